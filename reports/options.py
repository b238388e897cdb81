"""What the report modules share at the bottom of their imports: the report options and
how frames become JSON-able rows. :mod:`traceparse.reports.payload` and
:mod:`traceparse.reports.sections` both import this module; it imports neither (no cycle).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl


@dataclass(frozen=True)
class ReportOptions:
    """Knobs of the report (all have defaults that keep a 1M-kernel report under 5 MB).

    Attributes:
        title: report title (defaults to the input file names).
        top_n: kernels listed individually; the rest are summed into one "other" row.
        timeline_budget: most GPU activities drawn exactly in the overview; above it lanes
            are binned (see :mod:`traceparse.reports.lanes`) and the report says so.
        timeline_bins: number of time bins in binned mode.
        max_lanes: most (rank, device, stream) lanes drawn in the overview.
        max_gaps: idle gaps listed (longest first).
        gap_min_ns: shortest idle gap considered.
    """

    title: str | None = None
    top_n: int = 50
    timeline_budget: int = 4000
    timeline_bins: int = 600
    max_lanes: int = 32
    max_gaps: int = 30
    gap_min_ns: int = 10_000


def clean(value: Any) -> Any:
    """Make ``value`` JSON-able and deterministic: NaN/inf -> None, tuples -> lists,
    dict keys sorted (recursively)."""
    if isinstance(value, float):
        return None if (math.isnan(value) or math.isinf(value)) else value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if isinstance(value, pl.DataFrame):
        return rows(value)
    return value


def rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows of ``frame`` as dicts (categoricals as text, NaN as None), in frame order."""
    cast = frame.with_columns(pl.col(pl.Categorical).cast(pl.String))
    out: list[dict[str, Any]] = clean(cast.to_dicts())
    return out

