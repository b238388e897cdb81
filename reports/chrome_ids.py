"""Process/thread ids and time conversion shared by the Chrome-trace writers
(:mod:`traceparse.reports.chrome`, :mod:`traceparse.reports.chrome_counters`)."""

from __future__ import annotations

import polars as pl

#: pid used for host lanes without an OS process id: ``HOST_PID_BASE + rank``.
HOST_PID_BASE = 900_000
#: tid of the attribution lane on each GPU process.
ATTRIBUTION_TID = -2


def _gpu_pid(multi_rank: bool) -> pl.Expr:
    dev = pl.col("device_id").cast(pl.Int64)
    return (pl.col("rank").cast(pl.Int64) * 1000 + dev) if multi_rank else dev


def _host_pid() -> pl.Expr:
    return pl.coalesce(pl.col("process_id"), HOST_PID_BASE + pl.col("rank").cast(pl.Int64))


def _div1000(s: pl.Series) -> pl.Series:
    # numpy's true division is correctly rounded (polars may multiply by 0.001 instead,
    # which prints 1.5010000000000001 for 1501 ns)
    return pl.Series(s.name, s.cast(pl.Float64).to_numpy() / 1000.0)


def _us(col: str, base: int = 0) -> pl.Expr:
    """Nanoseconds relative to ``base`` as float microseconds (exact to the ns below 2**53)."""
    return (pl.col(col) - base).map_batches(_div1000, return_dtype=pl.Float64)
