"""Frames derived from a timeline, computed once per timeline and kept on it.

Several analyses of one command need the same derived table (the launch-link table of
:func:`traceparse.links.launch_links`, the call classification of
:func:`traceparse.analyses.attribution.classify_calls`). :func:`cached` stores such a
value on the :class:`~traceparse.timeline.Timeline` object itself, tagged with the table
objects it was computed from; when a caller assigns a new ``tl.gpu`` (or any table the
value depends on) the stored value no longer matches and is computed again. Stored
values are not fields: they are never saved, compared or exported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from traceparse.timeline import Timeline

T = TypeVar("T")
_SLOT = "_derived"


def cached(tl: Timeline, name: str, tables: Sequence[str], compute: Callable[[], T]) -> T:
    """The value ``compute()`` for ``tl``, computed once while ``tl``'s ``tables`` are the
    same objects.

    Example:
        ``cached(tl, "links", ("gpu", "api"), lambda: f(tl))`` calls ``f`` on the first
        use; later calls return the same object until ``tl.gpu`` or ``tl.api`` is replaced.
    """
    store: dict[str, tuple[tuple[Any, ...], Any]] = tl.__dict__.setdefault(_SLOT, {})
    deps = tuple(getattr(tl, t) for t in tables)
    hit = store.get(name)
    if hit is not None and len(hit[0]) == len(deps) and all(
            a is b for a, b in zip(hit[0], deps, strict=True)):
        value: T = hit[1]
        return value
    value = compute()
    store[name] = (deps, value)
    return value
