"""The rules of :func:`traceparse.analyses.attribution.classify_calls`, run on codes.

A million launched activities carry a few dozen distinct call names and a handful of
activity kinds and memory kinds: the regexes and string tests run on the distinct values of
each categorical column (its physical codes index a boolean table), never on a million
strings; the first launch of a name is one ``arg_min`` per group instead of a rank over
every row.

Example (``call_part`` of joined rows, median non-blocking call 10 us):
    cudaLaunchKernel 5 us, name ``k`` seen before            -> launch
    cudaStreamSynchronize 2 ms                                -> host_sync
    cudaMemcpyAsync of a memcpy from ``Pageable`` memory      -> host_sync
    first cudaLaunchKernel of name ``k2`` on its process, 3 ms -> warmup
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import polars as pl

__all__ = ["STATE_SLOT", "CallState", "call_parts", "call_state", "merge_call_states"]

#: Where a timeline that holds only part of a trace keeps the trace-wide
#: :class:`CallState` its calls are classified with (``tl.__dict__``, like the derived
#: values of :mod:`traceparse.derived`: never saved, compared or exported). The chunked
#: ``gaps`` sets it on each span's timeline (traceparse/executor.py).
STATE_SLOT = "_trace_call_state"


class CallState(NamedTuple):
    """What :func:`call_parts` reads from the whole trace, as partials that merge exactly
    (:func:`merge_call_states`): ``first``: per ``rank, process_id, name`` (String) the
    first launch, ``api_start_ns`` then the activity's ``start_ns`` (the smallest pair);
    ``durations``: per ``rank, process_id`` and ``_dur`` (a non-blocking call's duration,
    once per launched activity) the count ``n`` (the exact median is read from it)."""

    first: pl.DataFrame
    durations: pl.DataFrame


def _matches(values: pl.Series, test: pl.Expr) -> pl.Series:
    """``test`` (an expression on ``pl.col("v")``, a string) of each value of ``values``,
    evaluated once per distinct value for a categorical series; null where the value is null.

    Example: ``["a", "b", "a", null]`` with ``v == "a"`` -> ``[true, false, true, null]``
    (``test`` ran on ``"a"`` and ``"b"`` only)."""
    if values.dtype != pl.Categorical:
        return values.cast(pl.String).to_frame("v").select(test).to_series()
    distinct = values.unique().drop_nulls()
    hit = distinct.filter(distinct.cast(pl.String).to_frame("v").select(test).to_series())
    return values.is_in(hit.implode())


def _blocking(j: pl.DataFrame, blocking_re: str) -> pl.Series:
    pageable = pl.Series(np.zeros(j.height, dtype=bool))
    for c in ("src_kind", "dst_kind"):
        if c in j.columns:
            pageable = pageable | _matches(j[c], pl.col("v") == "Pageable").fill_null(False)
    copy = _matches(j["kind"], pl.col("v").is_in(["memcpy", "memset"])).fill_null(False)
    name_hit = _matches(j["call_name"], pl.col("v").str.contains(blocking_re))
    # null call name: the row rules gave null (neither blocking nor not) unless a pageable copy
    return name_hit | (copy & pageable)


def _rows(j: pl.DataFrame, blocking_re: str) -> pl.DataFrame:
    keys = ["rank", "process_id"]
    return pl.DataFrame({"_blk": _blocking(j, blocking_re)}).hstack(
        j.select(*keys, "name", (pl.col("api_end_ns") - pl.col("api_start_ns")).alias("_dur"),
                 "api_start_ns")).with_row_index("_r")


def call_parts(j: pl.DataFrame, blocking_re: str, min_ns: int,
               state: CallState | None = None) -> pl.Series:
    """``call_part`` of each row of ``j`` (columns ``rank``, ``process_id``, ``name``,
    ``kind``, ``call_name``, ``api_start_ns``, ``api_end_ns`` and optionally ``src_kind``,
    ``dst_kind``): ``host_sync`` where ``call_name`` matches ``blocking_re`` or a
    memcpy/memset moves pageable memory, else ``warmup`` for the first call (earliest
    ``api_start_ns``, ties in row order) of a ``name`` on its ``(rank, process_id)`` that
    lasted at least ``min_ns`` and ten times the process's median non-blocking call, else
    ``launch``. Same result as the row-wise rules of
    :func:`traceparse.analyses.attribution.classify_calls` (``tests/test_callparts.py``).

    ``state``: the first launches and the median from the whole trace (``j`` then holds
    part of it and has ``start_ns``): a row is a first launch when its
    ``(api_start_ns, start_ns)`` is its name's trace-wide first (the first such row of
    ``j``), and the median is the trace's."""
    if j.height == 0:
        return pl.Series("call_part", [], dtype=pl.String)
    keys = ["rank", "process_id"]
    f = _rows(j, blocking_re)
    if state is None:
        first = (f.group_by(*keys, "name")
                 .agg(pl.col("_r").get(pl.col("api_start_ns").arg_min()))
                 .get_column("_r").drop_nulls())
        med = (f.select(pl.col("_dur").filter(~pl.col("_blk")).median().over(keys))
               .to_series())
    else:
        k = f.with_columns(pl.col("name").cast(pl.String), j["start_ns"].alias("_s"))
        first = (k.join(state.first, on=[*keys, "name"], how="inner", nulls_equal=True)
                 .filter((pl.col("api_start_ns") == pl.col("_fa"))
                         & (pl.col("_s") == pl.col("_fs")))
                 .group_by(*keys, "name").agg(pl.col("_r").min()).get_column("_r"))
        med = (f.select(keys).join(medians(state), on=keys, how="left", nulls_equal=True,
                                   maintain_order="left").get_column("_med"))
    is_first = np.zeros(j.height, dtype=bool)
    is_first[first.to_numpy()] = True
    out = f.select(pl.Series("_first", is_first), "_blk", "_dur", med.alias("_med"))
    lazy = (pl.col("_first") & ~pl.col("_blk") & (pl.col("_dur") >= min_ns)
            & (pl.col("_dur") >= 10 * pl.col("_med").fill_null(0)))
    return out.select(pl.when(pl.col("_blk")).then(pl.lit("host_sync")).when(lazy)
                      .then(pl.lit("warmup")).otherwise(pl.lit("launch"))
                      .alias("call_part")).to_series()


def call_state(j: pl.DataFrame, blocking_re: str) -> CallState:
    """The :class:`CallState` partial of the rows of ``j`` (as :func:`call_parts`, with
    ``start_ns``): each row of the trace must be in exactly one partial."""
    keys = ["rank", "process_id"]
    f = _rows(j, blocking_re).with_columns(pl.col("name").cast(pl.String),
                                           j["start_ns"].alias("_s"))
    first = (f.filter(pl.col("api_start_ns").is_not_null())
             .group_by(*keys, "name")
             .agg(pl.col("api_start_ns").min().alias("_fa"),
                  pl.col("_s").filter(pl.col("api_start_ns") == pl.col("api_start_ns").min())
                  .min().alias("_fs")))
    durs = (f.filter(~pl.col("_blk") & pl.col("_dur").is_not_null())
            .group_by(*keys, "_dur").agg(pl.len().cast(pl.Int64).alias("n")))
    return CallState(first.cast({"_fa": pl.Int64, "_fs": pl.Int64}), durs)


def merge_call_states(parts: Sequence[CallState]) -> CallState:
    """One :class:`CallState` of partials of disjoint rows (any order)."""
    keys = ["rank", "process_id"]
    first = (pl.concat([p.first for p in parts], how="vertical_relaxed")
             .sort("_fa", "_fs").group_by(*keys, "name", maintain_order=True).first())
    durs = (pl.concat([p.durations for p in parts], how="vertical_relaxed")
            .group_by(*keys, "_dur").agg(pl.col("n").sum()))
    return CallState(first, durs)


def medians(state: CallState) -> pl.DataFrame:
    """``rank, process_id, _med``: the median of each process's non-blocking call
    durations from their counts, as :meth:`polars.Series.median` gives it (the middle
    value, or the mean of the two middle values)."""
    keys = ["rank", "process_id"]
    d = state.durations.sort(*keys, "_dur")
    c = d.with_columns(pl.col("n").cum_sum().over(keys).alias("_c"),
                       pl.col("n").sum().over(keys).alias("_t"))
    # the values at positions (t - 1) // 2 and t // 2 (0-based) of the sorted durations
    lo = (c.filter(pl.col("_c") > (pl.col("_t") - 1) // 2).group_by(keys)
          .agg(pl.col("_dur").first().alias("_a")))
    hi = (c.filter(pl.col("_c") > pl.col("_t") // 2).group_by(keys)
          .agg(pl.col("_dur").first().alias("_b")))
    return (lo.join(hi, on=keys, nulls_equal=True)
            .select(*keys, ((pl.col("_a") + pl.col("_b")) / 2).cast(pl.Float64).alias("_med")))
