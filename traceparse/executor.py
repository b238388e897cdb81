"""Where an analysis runs: the whole timeline in memory, in chunks here, or on Dask.

Executors (``--executor`` of ``kernels``, ``breakdown``, ``gaps``, ``launches`` and
``summary``; the full ``breakdown``'s two passes are :mod:`traceparse.executor_breakdown`,
the summary's :mod:`traceparse.summary_chunks`):

* ``memory`` (default): the whole timeline is built and analysed (every command's path);
* ``chunks``: an nsys SQLite export is read one piece at a time in this process
  (:mod:`traceparse.nsys.chunks`), each piece reduced to its partial
  (:mod:`traceparse.analyses.chunked`) and folded into the running result before the next
  is read: memory follows the piece, not the trace;
* ``dask``: the same pieces as tasks on a Dask cluster (``distributed``; the optional
  extra ``traceparse[dask]``): each worker opens the export read-only by its path, reads
  its piece and computes its partial; partials are merged pairwise **on the workers** and
  the client receives the finished frame. A local cluster of ``workers`` processes (one
  thread each) is started unless ``scheduler`` names a running one (whose workers must be
  able to read the path).

The result is the same frame, value for value, on every executor (tests/test_chunked.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any, NamedTuple, TypeVar

import numpy as np
import polars as pl

from traceparse.analyses import chunked, chunked_gaps
from traceparse.analyses.callparts import CallState
from traceparse.analyses.nsys_stats import ByChoice, NameChoice
from traceparse.detach import detach
from traceparse.errors import UsageError
from traceparse.nsys import chunks
from traceparse.timeline import Timeline

P = TypeVar("P")
EXECUTORS = ("memory", "chunks", "dask")
#: Activities per piece (rows of a rowid block; rows a time window holds).
CHUNK_ROWS = chunks.BLOCK_ROWS
#: Partials folded at once by the ``chunks`` executor ...
_FOLD = 8
#: ... which reads this many pieces at a time (threads).
_THREADS = 2


def kernel_task(plan: chunks.Plan, block: chunks.Block, name: NameChoice, by: ByChoice
                ) -> pl.DataFrame:
    """The kernel histogram of one rowid block (runs on a worker)."""
    return chunked.kernel_histogram(chunks.read_rows(plan, [block]), name=name, by=by)


def window_task(plan: chunks.Plan, window: tuple[int, int]) -> pl.DataFrame:
    """The GPU-only breakdown partial of one time window (runs on a worker)."""
    return chunked.window_parts(chunks.read_rows(plan, plan.blocks_for(*window), window),
                                *window)


def kern_sum(path: str, *, name: NameChoice = "demangled", by: ByChoice = None,
             executor: str = "chunks", chunk_rows: int = CHUNK_ROWS, workers: int = 4,
             scheduler: str | None = None) -> pl.DataFrame | None:
    """``kernels`` of one nsys export on a chunked executor; None when it has no kernel."""
    plan = chunks.plan(path, block_rows=chunk_rows, tables=(chunks.KERNEL,),
                       categories=False)
    if not plan.blocks:
        return None
    hist = map_reduce(executor, plan, kernel_task, list(plan.blocks), (name, by),
                      chunked.merge_histograms, workers, scheduler)
    if hist.height == 0:
        return None
    return chunked.kern_sum_from_histogram(hist, name=name, by=by)


def gpu_breakdown(path: str, *, executor: str = "chunks", chunk_rows: int = CHUNK_ROWS,
                  workers: int = 4, scheduler: str | None = None) -> pl.DataFrame | None:
    """``breakdown --gpu-only`` of one nsys export on a chunked executor; None when it has
    no GPU activity."""
    plan = chunks.plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None
    part = map_reduce(executor, plan, window_task, wins, (), chunked.merge_parts, workers,
                      scheduler)
    return chunked.gpu_breakdown_from_parts(part)


class NotLocal(Exception):
    """A span of the chunked ``gaps`` may not hold every row its gaps' rules read
    (:func:`traceparse.nsys.spancheck.why_not_local`): ``why`` says which lookup."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class TraceState(NamedTuple):
    """What the second pass's spans need from the whole trace (pass 1, merged exactly):
    ``calls``: the call rules' state (:class:`~traceparse.analyses.callparts.CallState`);
    ``depth``: the deepest launch queue (a call's start to its activity's start; a span
    reaching back this far holds the call of every activity that starts in it);
    ``launches``: per time window (``_t0``) the latest launch call start ``cs`` per
    waited stream (``kind`` ``stream``: ``rank``, ``a`` device, ``b`` stream) and per
    launching thread (``thread``: ``rank``, ``a`` process, ``b`` thread), from which a
    span held back by a stream wait finds how far back to start
    (:func:`traceparse.nsys.spancheck.held_back_start`)."""

    calls: CallState
    depth: int
    launches: pl.DataFrame


WindowPart = tuple[pl.DataFrame, TraceState]


Span = tuple[tuple[int, ...], tuple[int, ...]]


def local_span(plan: chunks.Plan, span: Span,
               explain: pl.DataFrame | Callable[[Timeline], pl.DataFrame], state: TraceState
               ) -> Timeline:
    """:func:`local_span_at`'s timeline."""
    return local_span_at(plan, span, explain, state)[0]


def local_span_at(plan: chunks.Plan, span: Span,
                  explain: pl.DataFrame | Callable[[Timeline], pl.DataFrame],
                  state: TraceState) -> tuple[Timeline, int, int]:
    """The timeline of the first span of ``span`` (its candidate starts and ends, as
    :func:`earlier_spans` and :func:`later_spans` give them) that holds every row the rules read
    for the stretches of ``explain`` (``rank``, ``device_id``, ``start_ns``, ``end_ns``,
    or a function of the span's timeline giving them;
    :func:`traceparse.nsys.spancheck.why_not_local`), with the trace-wide call state in
    :data:`~traceparse.analyses.callparts.STATE_SLOT`, and the span read (``lo, hi``:
    another rule may check its own stretches on the same timeline). A lookup that reaches backwards
    (forwards) is retried on a span starting earlier (ending later); a span whose first
    launch on a waited stream or thread may be held back by a wait before it starts just
    before that stream's or thread's previous launch
    (:func:`traceparse.nsys.spancheck.held_back_start`).

    Raises:
        NotLocal: no candidate span holds them.
    """
    from traceparse.analyses.callparts import STATE_SLOT
    from traceparse.nsys.spancheck import (
        BACKWARD,
        FORWARD,
        HELD_BACK,
        WIDER,
        held_back_start,
        why_not_local,
    )
    from traceparse.nsys.spans import read_span

    lows, highs = span
    k = m = 0
    lo, hi = lows[0], highs[0]
    while True:
        tl, _ = read_span(plan, lo, hi)
        g = explain if isinstance(explain, pl.DataFrame) else explain(tl)
        why = why_not_local(plan, tl, g, lo, hi)
        wider = (lo, hi)
        if why == HELD_BACK:
            wider = (min(lo, held_back_start(plan, tl, g, lo, state.launches)), hi)
        elif why in BACKWARD + WIDER and k + 1 < len(lows):
            k += 1
            wider = (min(lo, lows[k]), hi)
        if why in FORWARD + WIDER and m + 1 < len(highs):
            m += 1
            wider = (wider[0], max(hi, highs[m]))
        if wider == (lo, hi):
            break
        lo, hi = wider
    if why is not None:
        raise NotLocal(why)
    tl.__dict__[STATE_SLOT] = state.calls
    return tl, lo, hi


def gap_window_task(plan: chunks.Plan, window: tuple[int, int], min_ns: int) -> WindowPart:
    """The idle-gap partial of one time window, the call-state partial of the GPU rows
    that start in it and their deepest queue (runs on a worker)."""
    rows = chunks.read_rows(plan, plan.blocks_for(*window), window)
    return (chunked_gaps.window_gaps(rows, *window, min_ns),
            window_call_state(plan, rows, *window))


def window_call_state(plan: chunks.Plan, rows: pl.DataFrame, t0: int, t1: int,
                      api: pl.DataFrame | None = None) -> TraceState:
    """The :class:`TraceState` partial of the busy GPU rows of ``rows`` that start in
    ``[t0, t1)``, each joined to its call as the attribution joins them
    (:func:`traceparse.analyses.attribution.classify_calls`; the calls read by
    correlation id, :func:`traceparse.nsys.spans.calls_by_correlation`): their
    :func:`~traceparse.analyses.callparts.call_state`, the longest time from a call's
    start (the earliest call of its key) to its activity's start (0 without any), and
    the latest launch call per stream and per thread. ``api``: those calls when the
    caller has read them (:func:`own_calls`), else they are read here."""
    from traceparse.analyses.attribution import BLOCKING_API_RE
    from traceparse.analyses.callparts import call_state
    from traceparse.nsys.spans import calls_by_correlation

    key = ["rank", "process_id", "correlation_id"]
    own = _own_launched(rows, t0, t1)
    if api is None:
        api = calls_by_correlation(plan, own["correlation_id"])
    api = api.filter(pl.col("correlation_id").is_not_null())
    early = api.group_by(key).agg(pl.col("start_ns").min().alias("_cs"))
    depth = own.join(early, on=key, how="inner").select(
        (pl.col("start_ns") - pl.col("_cs")).max()).item()
    api = (api
           .select(*key, pl.col("name").alias("call_name"), "thread_id",
                   pl.col("start_ns").alias("api_start_ns"), pl.col("end_ns").alias("api_end_ns"))
           .unique(subset=key, keep="first", maintain_order=True))
    j = own.select("rank", "process_id", "correlation_id", "name", "kind", "start_ns",
                   "device_id", "stream_id",
                   *(c for c in ("src_kind", "dst_kind") if c in own.columns)
                   ).join(api, on=key, how="inner", maintain_order="left")
    return TraceState(call_state(j, BLOCKING_API_RE), max(0, int(depth or 0)),
                      _latest_launches(j, t0))


def _own_launched(rows: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    """The rows of ``rows`` that start in ``[t0, t1)``, are not ``sync`` and carry a
    correlation id: the activities whose calls :func:`window_call_state` joins."""
    return rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1)
                       & (pl.col("category").cast(pl.String) != "sync")
                       & pl.col("correlation_id").is_not_null())


def own_calls(plan: chunks.Plan, rows: pl.DataFrame, t0: int, t1: int) -> pl.DataFrame:
    """The runtime calls that may share a key with a row of ``rows`` starting in
    ``[t0, t1)`` (read once by correlation id,
    :func:`traceparse.nsys.spans.calls_by_correlation`): those :func:`window_call_state`
    joins and those of the window's kernels (:func:`traceparse.launch_chunks.join_launches`)."""
    from traceparse.nsys.spans import calls_by_correlation

    own = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    return calls_by_correlation(plan, own["correlation_id"])


def _latest_launches(j: pl.DataFrame, t0: int) -> pl.DataFrame:
    """:attr:`TraceState.launches` of the joined launches ``j`` of the window at ``t0``."""
    cs = pl.col("api_start_ns").max().cast(pl.Int64).alias("cs")
    parts = [j.group_by("rank", a, b).agg(cs).select(
        pl.lit(t0, pl.Int64).alias("_t0"), pl.lit(kind).alias("kind"),
        pl.col("rank").cast(pl.Int32), pl.col(a).cast(pl.Int64).alias("a"),
        pl.col(b).cast(pl.Int64).alias("b"), "cs")
        for kind, a, b in (("stream", "device_id", "stream_id"),
                           ("thread", "process_id", "thread_id"))]
    return pl.concat(parts)


def merge_with_state(parts: Sequence[tuple[P, TraceState]],
                     merge: Callable[[Sequence[P]], P]) -> tuple[P, TraceState]:
    """Pass-1 partials (an analysis' partial and the :class:`TraceState`, as
    :func:`gap_window_task` gives them) merged: the first by ``merge``, the call states
    by :func:`~traceparse.analyses.callparts.merge_call_states`, the queues by max, the
    latest launches kept per window."""
    from traceparse.analyses.callparts import merge_call_states

    states = [p[1] for p in parts]
    return (merge([p[0] for p in parts]),
            TraceState(merge_call_states([s.calls for s in states]),
                       max(s.depth for s in states),
                       pl.concat([s.launches for s in states])))


def gap_cause_task(plan: chunks.Plan, span: Span, gaps: pl.DataFrame,
                   opts: tuple[int, TraceState]) -> tuple[pl.DataFrame, int | None]:
    """The rows of :func:`traceparse.analyses.gaps.idle_gaps` for ``gaps`` (group, start,
    end), computed on the timeline of ``span`` (:func:`traceparse.nsys.spans.read_span`)
    with the trace-wide call state, and that timeline's first event (runs on a worker)."""

    min_ns, state = opts
    tl = local_span(plan, span, gaps, state)
    first = tl.span_ns()
    return gaps_on(tl, gaps, min_ns), None if first is None else first[0]


def gaps_on(tl: Timeline, gaps: pl.DataFrame, min_ns: int) -> pl.DataFrame:
    """The rows of :func:`traceparse.analyses.gaps.idle_gaps` of the span timeline ``tl``
    for the gaps found in pass 1 (``gaps``: group, start, end): a false gap at the span's
    border (its neighbours not read) is never kept."""
    from traceparse.analyses.gaps import idle_gaps as memory_gaps

    rows = memory_gaps(tl, min_ns=min_ns)
    keys = [*chunked_gaps.GROUP, "start_ns", "end_ns"]
    return rows.join(gaps.select(keys).cast(rows.select(keys).schema), on=keys, how="semi",
                     nulls_equal=True)


def idle_gaps(path: str, *, min_ns: int, executor: str = "chunks",
              chunk_rows: int = CHUNK_ROWS, workers: int = 4, scheduler: str | None = None
              ) -> tuple[pl.DataFrame, int | None] | None:
    """``gaps`` of one nsys export on a chunked executor: the frame of
    :func:`traceparse.analyses.gaps.idle_gaps` and the trace's first event; None when it
    has no GPU activity.

    Two passes over time windows of about ``chunk_rows`` GPU activities
    (docs/performance.md, "Chunked gaps"): the gaps themselves from the busy activities,
    one row per device carried across an edge (:mod:`traceparse.analyses.chunked_gaps`),
    and the trace-wide state of the call rules (each name's first launch, each process's
    median call: :class:`traceparse.analyses.callparts.CallState`); then, per window
    holding a gap's start, the in-memory rules on the timeline of the window, the window
    before and the window after (and the rest of any gap that runs past them, and the
    activities its calls launched), with that state, keeping that window's gaps. The
    first window's span starts at the beginning of the file (the trace's first event,
    which table times count from).

    Raises:
        NotLocal: a span may not hold every row its gaps' rules read
            (:func:`traceparse.nsys.spancheck.why_not_local`); the caller computes the
            file in memory instead.
    """
    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None
    merge = partial(merge_with_state, merge=partial(chunked_gaps.merge_gaps, min_ns=min_ns))
    part, state = map_reduce(executor, plan, gap_window_task, wins, (min_ns,), merge, workers,
                             scheduler)
    depth = state.depth
    found = chunked_gaps.gap_list(part)
    starts = [w[0] for w in wins]
    owner = np.searchsorted(np.asarray(starts, dtype=np.int64),
                            found["start_ns"].to_numpy(), side="right") - 1
    found = found.with_columns(pl.Series("_w", owner, pl.Int64))
    jobs: list[tuple[Span, pl.DataFrame]] = []
    for i in sorted({0, *owner.tolist()}):
        mine = found.filter(pl.col("_w") == i).drop("_w")
        lo = wins[i][0] if i > 0 else -chunks.END
        hi = wins[i][1]
        if mine.height:
            hi = max(hi, int(mine["end_ns"].max()) + 1)  # type: ignore[arg-type]
            # back at least the deepest queue: every call of an activity queued across a
            # gap is read (spancheck relies on it)
            lo = max(-chunks.END, min(lo, int(mine["start_ns"].min()) - depth - 1))  # type: ignore[arg-type]
        jobs.append(((earlier_spans(lo, starts), later_spans(hi, [w[1] for w in wins])), mine))
    results = map_jobs(executor, plan, gap_cause_task, jobs, (min_ns, state), workers, scheduler)
    frames = [r[0] for r in results]
    firsts = [r[1] for r in results if r[1] is not None]
    from traceparse.analyses.gaps import sort_gaps

    out = sort_gaps(pl.concat(frames, how="vertical_relaxed"), chunked_gaps.GROUP)
    return out, min(firsts) if firsts else None


def earlier_spans(lo: int, starts: list[int]) -> tuple[int, ...]:
    """``lo``, then window starts 2, 4, 8, ... windows before it, then the file's
    beginning: the spans a job tries in turn when a lookup reaches backwards."""
    out = [lo]
    k = int(np.searchsorted(np.asarray(starts, dtype=np.int64), lo, side="right")) - 1
    step = 2
    while lo > -chunks.END and k - step > 0:
        out.append(min(lo, starts[k - step]))
        step *= 2
    if lo > -chunks.END:
        out.append(-chunks.END)
    return tuple(out)


def later_spans(hi: int, ends: list[int]) -> tuple[int, ...]:
    """``hi``, then window ends 2, 4, 8, ... windows after it, then the file's end."""
    out = [hi]
    k = int(np.searchsorted(np.asarray(ends, dtype=np.int64), hi, side="left"))
    step = 2
    while hi < chunks.END and k + step < len(ends) - 1:
        out.append(max(hi, ends[k + step]))
        step *= 2
    if hi < chunks.END:
        out.append(chunks.END)
    return tuple(out)


def map_jobs(executor: str, plan: chunks.Plan, task: Callable[..., Any],
             jobs: Sequence[tuple[Any, Any]], extra: Any, workers: int,
             scheduler: str | None) -> list[Any]:
    """``task(plan, *job, extra)`` of each job, in order: one at a time here (a job's
    timeline is the memory), or as Dask tasks."""
    if executor == "chunks":  # kept until the end: detached from the job's rows
        return [detach(task(plan, *job, extra)) for job in jobs]
    with dask_client(workers, scheduler) as client:
        shared = client.scatter(plan, broadcast=True)
        futs = [client.submit(task, shared, *job, extra, pure=False) for job in jobs]
        return list(client.gather(futs))


def map_reduce(executor: str, plan: chunks.Plan, task: Callable[..., P],
               items: Sequence[Any], extra: tuple[Any, ...],
               merge: Callable[[Sequence[P]], P], workers: int,
               scheduler: str | None) -> P:
    """``merge`` of ``task(plan, item, *extra)`` of each item: the partials folded as
    they come (two pieces in flight here), or merged pairwise on Dask workers."""
    if executor == "chunks":
        acc: list[P] = []
        # SQLite and polars release the GIL: two pieces in flight keep two cores busy
        with ThreadPoolExecutor(_THREADS) as pool:
            pending: list[Future[P] | None] = [
                pool.submit(task, plan, item, *extra) for item in items[:_THREADS]]
            for i in range(len(items)):
                done = pending[i]
                assert done is not None
                # kept until folded: detached from the window's rows (traceparse.detach)
                acc.append(detach(done.result()))
                pending[i] = None  # its partial is folded: let it go
                if i + _THREADS < len(items):
                    pending.append(pool.submit(task, plan, items[i + _THREADS], *extra))
                if len(acc) >= _FOLD:
                    acc = [detach(merge(acc))]
        return detach(merge(acc))
    if executor != "dask":
        raise ValueError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    with dask_client(workers, scheduler) as client:
        shared = client.scatter(plan, broadcast=True)
        futs = client.map(task, [shared] * len(items), items, *([e] * len(items)
                                                                  for e in extra),
                          pure=False)
        while len(futs) > 1:  # pairwise merges on the workers
            futs = [client.submit(_merge_two, merge, *futs[i:i + 2], pure=False)
                    if i + 1 < len(futs) else futs[i] for i in range(0, len(futs), 2)]
        out: P = futs[0].result()
        return out


def _merge_two(merge: Callable[[Sequence[P]], P], a: P, b: P) -> P:
    return merge([a, b])


@contextmanager
def dask_client(workers: int, scheduler: str | None) -> Iterator[Any]:
    """A ``distributed.Client``: on ``scheduler`` when given, else on a local cluster of
    ``workers`` processes with one thread each (closed on exit).

    Raises:
        UsageError: ``distributed`` is not installed.
    """
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError(None, "--executor dask needs the 'distributed' package "
                               "(pip install 'traceparse[dask]')") from None
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if scheduler:
        with Client(scheduler) as client:
            yield client
        return
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        yield client
