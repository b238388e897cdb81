"""``launches --report graphs`` of one nsys export on a chunked executor
(:mod:`traceparse.executor`): the launch-bound gaps of
:func:`traceparse.analyses.launches.graph_recoverable`, read one time window at a time.

Each window's task reads the kernels that start in it (the reader's own rows,
:func:`traceparse.nsys.chunks.read_rows`) and their launch calls by correlation id
(:func:`traceparse.nsys.spans.calls_by_correlation`), joins them as
:func:`traceparse.links.launch_join` does (per key the call that started first, file order
among equal starts) and reduces them to a partial
(:func:`traceparse.analyses.chunked_launches.launch_part`); the partials merge in time
order (:func:`~traceparse.analyses.chunked_launches.merge_launch_parts`).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from traceparse.analyses import chunked_launches as cl
from traceparse.executor import CHUNK_ROWS, map_reduce
from traceparse.nsys import chunks

_KEY = ["rank", "process_id", "correlation_id"]


def launch_rows(plan: chunks.Plan, window: tuple[int, int]) -> pl.DataFrame:
    """The launch-table rows (``rank, process_id, device_id, stream_id, start_ns, end_ns,
    dur_ns, api_start_ns, api_end_ns, api_name, graph_id``) of the kernels that start in
    ``window``, in table order."""
    from traceparse.nsys.spans import calls_by_correlation

    t0, t1 = window
    rows = chunks.read_rows(plan, plan.blocks_for(t0, t1), window)
    k = _kernels(rows, t0, t1)
    return join_launches(k, calls_by_correlation(plan, k["correlation_id"]))


def _kernels(rows: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    return rows.filter((pl.col("kind") == "kernel") & (pl.col("start_ns") >= t0)
                       & (pl.col("start_ns") < t1)
                       & pl.all_horizontal(pl.col(_KEY).is_not_null()))


def join_launches(rows: pl.DataFrame, api: pl.DataFrame, window: tuple[int, int] | None = None
                  ) -> pl.DataFrame:
    """:func:`launch_rows` of the kernels of ``rows`` (those starting in ``window`` when
    given) and the runtime calls ``api`` read for them (every call that may share a key:
    :func:`traceparse.nsys.spans.calls_by_correlation`)."""
    k = rows if window is None else _kernels(rows, *window)
    # launch_links' api_row: the call of a key that started first, file order among ties
    first = (api.filter(pl.all_horizontal(pl.col(_KEY).is_not_null())
                        & pl.col("start_ns").is_not_null())
             .select(*_KEY, pl.col("start_ns").alias("api_start_ns"),
                     pl.col("end_ns").alias("api_end_ns"), pl.col("name").alias("api_name"))
             .sort("api_start_ns", maintain_order=True)
             .unique(subset=_KEY, keep="first", maintain_order=True))
    return (k.select(*_KEY, "device_id", "stream_id", "start_ns", "end_ns", "dur_ns",
                     "graph_id")
            .join(first.cast({c: k.schema[c] for c in _KEY}), on=_KEY, how="inner",
                  maintain_order="left")
            .select("rank", "process_id", "device_id", "stream_id", "start_ns", "end_ns",
                    "dur_ns", "api_start_ns", "api_end_ns", "api_name", "graph_id"))


Parts = tuple[cl.LaunchPart, cl.StatsPart]


def launch_task(plan: chunks.Plan, window: tuple[int, int]) -> Parts:
    """The launch-bound and distribution partials of one time window (runs on a worker)."""
    rows = launch_rows(plan, window)
    return cl.launch_part(rows), cl.stats_part(rows)


def _merge(parts: Sequence[Parts]) -> Parts:
    return (cl.merge_launch_parts([p[0] for p in parts]),
            cl.merge_stats_parts([p[1] for p in parts]))


def launch_parts(path: str, *, executor: str = "chunks", chunk_rows: int = CHUNK_ROWS,
                 workers: int = 4, scheduler: str | None = None) -> Parts | None:
    """Both partials of every launched kernel of one nsys export, read one time window at
    a time; None when it has no GPU activity. :func:`graph_recoverable` finishes the
    first; :func:`~traceparse.analyses.chunked_launches.launch_summary_from_part` the
    second, given the savings engine's CUDA-graph saving."""
    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None
    return map_reduce(executor, plan, launch_task, wins, (), _merge, workers, scheduler)


def graph_recoverable(path: str, *, executor: str = "chunks", chunk_rows: int = CHUNK_ROWS,
                      workers: int = 4, scheduler: str | None = None) -> pl.DataFrame | None:
    """:func:`traceparse.analyses.launches.graph_recoverable` of one nsys export on a
    chunked executor; None when it has no GPU activity."""
    parts = launch_parts(path, executor=executor, chunk_rows=chunk_rows, workers=workers,
                         scheduler=scheduler)
    return None if parts is None else cl.graph_recoverable_from_part(parts[0])
