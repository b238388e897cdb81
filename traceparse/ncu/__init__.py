"""Nsight Compute CSV pages: ``ncu --csv --page raw|details|...`` (``--print-units base`` or not).

Every page layout is read: raw (one row per launch, one column per metric), details and
section pages (one row per metric), the roofline chart page (FORMATS.md in the shared
reference). :func:`read` (``traceparse.ncu.read``) turns a page into a
:class:`~traceparse.timeline.Timeline` with the ``ncu`` table; ``traceparse.load`` calls it.

Modules:
    reader    ``read``: a page -> ``ncu``, ``devices``, ``sources``, ``ingest`` tables.
    csv       any CSV page -> launches (identity) and metrics (long).
    labels    details-page UI labels -> metric identifiers, as data.
    units     number and unit normalisation (thousands separators, prefixes).
    roofline  roofline inputs (FLOPs, bytes per level, peaks) as Nsight Compute computes them.
    tensor    tensor-core activity and precision from counters, never from kernel names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceparse.lazy import lazy_exports

if TYPE_CHECKING:
    from traceparse.ncu.reader import read

__all__ = ["read"]

__getattr__ = lazy_exports(__name__, "reader", __all__)
