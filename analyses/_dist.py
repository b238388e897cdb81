"""Small distribution helpers shared by the launch, range, comm and step analyses.

The ``nsys stats`` conventions are used everywhere so numbers compare with NVIDIA's tools:
mean; median = mean of the two middle values for an even count; **sample** standard
deviation (n - 1 denominator), 0.0 for a single value; printed values rounded half up.
"""

from __future__ import annotations

import polars as pl

#: The smallest change (%) of a median worth flagging: ``diff``'s default ``--min-effect``
#: and the least a step's period must exceed the median by to be an outlier
#: (:func:`traceparse.analyses.steps.step_table`). Run-to-run jitter of a few percent is
#: not a finding, however tight the other steps are.
MIN_EFFECT_PCT = 5.0


def nsys_stats(col: str | pl.Expr, prefix: str, *, suffix: str = " (ns)",
               names: tuple[str, ...] = ("Avg", "Med", "Min", "Max", "StdDev")) -> list[pl.Expr]:
    """Aggregation expressions ``{prefix}Avg{suffix}`` ... ``{prefix}StdDev{suffix}``.

    Null inputs are ignored; an all-null group gives null Avg/Med/Min/Max and StdDev 0.0
    (what ``nsys stats`` prints for an empty subgroup).

    Example:
        values [1, 2, 3, 10] -> Avg 4.0, Med 2.5, Min 1, Max 10,
        StdDev sqrt(((1-4)^2+(2-4)^2+(3-4)^2+(10-4)^2)/3) = sqrt(50/3) = 4.08.
    """
    e = pl.col(col) if isinstance(col, str) else col
    avg, med, mn, mx, sd = (f"{prefix}{n}{suffix}" for n in names)
    return [
        e.mean().cast(pl.Float64).alias(avg),
        e.median().cast(pl.Float64).alias(med),
        e.min().alias(mn),
        e.max().alias(mx),
        e.std(ddof=1).fill_null(0.0).fill_nan(0.0).cast(pl.Float64).alias(sd),
    ]


def round_half_up(frame: pl.DataFrame, columns: list[str], decimals: int = 1) -> pl.DataFrame:
    """Round float ``columns`` half up (1958248.25 -> 1958248.3), as ``nsys stats`` prints.

    Python's and polars' own rounding is half-to-even on the binary value; this matches the
    oracle text once printed with ``decimals`` places.
    """
    k = 10.0 ** decimals
    return frame.with_columns([((pl.col(c) * k + 0.5).floor() / k).alias(c) for c in columns])


def percentiles(col: str, qs: tuple[float, ...] = (0.5, 0.95, 0.99),
                prefix: str = "p") -> list[pl.Expr]:
    """``{prefix}50`` ... expressions: linear-interpolated quantiles of ``col``."""
    return [pl.col(col).quantile(q, interpolation="linear").alias(f"{prefix}{round(q * 100):g}")
            for q in qs]
