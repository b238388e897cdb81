"""``summary`` of one nsys export on a chunked executor (``summary --executor chunks|dask``;
docs/performance.md, "Chunked summary"): the dict of
:func:`traceparse.analyses.summary.summarize`, section for section, without the timeline.

The export is planned **once** (:func:`traceparse.nsys.spans.span_plan`) and read in two
passes over its time windows of about ``chunk_rows`` GPU activities; every section comes
from them:

1. **Pass 1**, per window, one read of its GPU rows (:func:`traceparse.nsys.chunks.read_rows`)
   and one read of their calls by correlation id (:func:`traceparse.executor.own_calls`),
   folded into four partials: the breakdown's devices and call state
   (:func:`traceparse.executor_breakdown.breakdown_window_task`'s), the gaps'
   (:mod:`traceparse.analyses.chunked_gaps`), the launches'
   (:mod:`traceparse.analyses.chunked_launches`) and the summary's own
   (:mod:`traceparse.analyses.chunked_summary`: kernel sums, counts, devices, op-tree sums).
2. **Pass 2**, per window, one checked local span
   (:func:`traceparse.executor_breakdown.checked_span`) for the window's part of each
   device's window **and** the gaps that start in it: the in-memory attribution
   (``breakdown``) and gap rules (``top_gaps``, the verdict's gaps) on the same timeline,
   and the span's first and last event, runtime calls and range kinds (``window``; the
   whole-file fact that the export has no tree ranges), and the window's part of
   ``host_sync_by_op`` (:mod:`traceparse.analyses.chunked_host_sync`: the verdict's
   blocking call and op, :func:`sync_by_op`). Every window has a span, so together they
   read every row of the file.

Sections a whole-file fact proves empty (``communication`` and ``stragglers`` without
communication rows; ``gpu_metrics``, ``gpu_clock`` and the idle caveat without GPU-metrics
rows; ``memory`` without memory events; ``graphs`` without graph launches, captures or
graph records; ``phases``, ``phase_mix``, ``layers`` and the verdict's step clause without
ranges of the kinds they read) are computed by their own functions on a small timeline of
the first rows of each rank and kind (:func:`stub`); the op tree of such an export comes
from the pass-1 sums (:func:`traceparse.analyses.optree.unranged_tree`). An export with
NVTX ranges has them read whole and the kernels' owners folded in pass 1
(:mod:`traceparse.ranges_chunks`, :func:`ranged_sections`). Anything else raises
:class:`SectionNotInPieces`, naming the section; the caller then prints the memory
summary. The ``savings`` section and the launches section's CUDA-graph saving come
last, from the what-if replays in pieces (:class:`traceparse.savings_chunks.SavingsRun`:
host-sync, pinned-memory, CUDA graphs; a change it does not compute in pieces is named).
On the ``chunks`` executor pass 2 feeds them each window's piece as it goes
(:func:`_replay_window`: the CUDA-graph removal on the window's span when it is local
for it, the piece read once for the three replays); they reuse the plan and pass 1
(:class:`Reuse`). With communication rows, ``communication`` and ``stragglers`` are
read after the savings, in one more pass over the windows
(:mod:`traceparse.comm_chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

import polars as pl

from traceparse import executor as ex
from traceparse import executor_breakdown as eb
from traceparse import launch_chunks
from traceparse.analyses import chunked, chunked_gaps
from traceparse.analyses import chunked_host_sync as chs
from traceparse.analyses import chunked_launches as cl
from traceparse.analyses import chunked_summary as cs
from traceparse.analyses.chunked_ranges import RangeTree, owner_part
from traceparse.analyses.replay_pieces import NotOrdered
from traceparse.detach import detach
from traceparse.nsys import chunks
from traceparse.ranges_chunks import NVTX_KINDS, Ranged, ranged_of, without_nvtx
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from traceparse.savings_chunks import SavingsRun

#: Range kinds no tree view, step finder, phase rule or layer group reads (OS-runtime
#: calls, CPU samples, the profiler's own overhead).
INERT_RANGES = frozenset({"osrt", "cpu_sample", "profiler_overhead"})


class SectionNotInPieces(Exception):
    """``section`` cannot be computed exactly in pieces: ``why``."""

    def __init__(self, section: str, why: str) -> None:
        super().__init__(f"{section}: {why}")
        self.section = section
        self.why = why


Part1 = tuple[ex.WindowPart, pl.DataFrame, launch_chunks.Parts, cs.SummaryPart]


def pass1_task(plan: chunks.Plan, window: tuple[int, int], min_ns: int,
               ranges: RangeTree | None = None) -> Part1:
    """Every pass-1 partial of one time window, from one read of its rows and calls
    (runs on a worker); ``ranges``: the whole ranges' op-tree part, the kernels' owners
    folded too (:mod:`traceparse.ranges_chunks`)."""
    return fold1(plan, *read1(plan, window), window, min_ns, ranges)


Read1 = tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]


def read1(plan: chunks.Plan, window: tuple[int, int], *, grid: bool = False) -> Read1:
    """Pass 1's one read of a time window: its GPU rows, their calls by correlation id
    and the launches joined from them (also what the report's pass 1,
    :mod:`traceparse.payload_chunks`, folds its own partial from; ``grid``: the kernels'
    launch dimensions too, which only the report reads)."""
    t0, t1 = window
    rows = chunks.read_rows(plan, plan.blocks_for(t0, t1), window, grid=grid)
    api = ex.own_calls(plan, rows, t0, t1)
    return rows, api, launch_chunks.join_launches(rows, api, window)


def fold1(plan: chunks.Plan, rows: pl.DataFrame, api: pl.DataFrame, launches: pl.DataFrame,
          window: tuple[int, int], min_ns: int, ranges: RangeTree | None = None) -> Part1:
    """Every pass-1 partial of one time window from :func:`read1`'s frames (``ranges``:
    as :func:`pass1_task`'s)."""
    t0, t1 = window
    part = cs.summary_part(rows, api, t0, t1)
    if ranges is not None:
        part = part._replace(owners=owner_part(ranges, rows, api, t0, t1))
    return ((chunked.window_parts(rows, t0, t1), ex.window_call_state(plan, rows, t0, t1, api)),
            chunked_gaps.window_gaps(rows, t0, t1, min_ns),
            (cl.launch_part(launches), cl.stats_part(launches)), part)


def merge_pass1(parts: Sequence[Part1], min_ns: int) -> Part1:
    """Pass-1 partials of consecutive windows merged (in time order)."""
    return (ex.merge_with_state([p[0] for p in parts], chunked.merge_parts),
            chunked_gaps.merge_gaps([p[1] for p in parts], min_ns),
            (cl.merge_launch_parts([p[2][0] for p in parts]),
             cl.merge_stats_parts([p[2][1] for p in parts])),
            cs.merge_summary_parts([p[3] for p in parts]))


class SpanPart(NamedTuple):
    """What pass 2 gives for one time window: its ``breakdown_windows`` rows, its gaps'
    rows, the span's first and last event, the runtime calls that start in the window,
    the span's range kinds and first range row per ``(rank, kind)``, and its
    :func:`~traceparse.analyses.host_sync.host_sync_by_op` partial
    (:mod:`traceparse.analyses.chunked_host_sync`)."""

    breakdown: pl.DataFrame
    gaps: pl.DataFrame
    span: tuple[int, int] | None
    api_calls: int
    range_kinds: frozenset[str]
    ranges: pl.DataFrame
    sync: chs.SyncPart | None = None


Job = tuple[pl.DataFrame, pl.DataFrame, tuple[int, int]]


def span_task(plan: chunks.Plan, span: ex.Span, job: Job, opts: tuple[int, ex.TraceState]
              ) -> SpanPart:
    """Pass 2 of one time window (runs on a worker): ``job`` is its part of each device's
    window, the gaps that start in it and the stretch whose calls it counts.

    Raises:
        NotLocal: no span of ``span`` holds what the rules read there.
    """
    return span_read(plan, span, job, opts)[0]


def span_read(plan: chunks.Plan, span: ex.Span, job: Job, opts: tuple[int, ex.TraceState]
              ) -> tuple[SpanPart, Timeline, int, int]:
    """:func:`span_task`'s part, the span's timeline and the span read (``lo, hi``), for
    a caller that computes more on the same timeline (:func:`pass2` with the savings'
    replays).

    Raises:
        NotLocal: as :func:`span_task`.
    """
    from traceparse.analyses.attribution import breakdown_windows

    wins, gaps, (a, b) = job
    min_ns, state = opts
    tl, lo, hi = eb.checked_span_at(plan, span, wins, state, gaps)
    rows = breakdown_windows(tl, wins, group=eb.GROUP) if wins.height else wins
    # the first window's gap rows even without gaps: the typed empty frame
    found = ex.gaps_on(tl, gaps, min_ns) if gaps.height or a == -chunks.END else None
    own = (pl.col("start_ns") >= a) & (pl.col("start_ns") < b)
    part = SpanPart(rows, found if found is not None else pl.DataFrame(), tl.span_ns(),
                    tl.api.filter(own).height,
                    frozenset(tl.ranges["kind"].cast(pl.String).unique().to_list()),
                    tl.ranges.unique(subset=["rank", "kind"], keep="first",
                                     maintain_order=True),
                    chs.window_part(tl, wins if wins.height and int(
                        rows["host_sync_ns"].sum()) else wins.clear(), a, b))
    return part, tl, lo, hi


def stub(part: cs.SummaryPart, ranges: pl.DataFrame) -> Timeline:
    """The timeline of the first GPU row of each ``(rank, kind)`` and the first range row
    of each ``(rank, kind)``: the trace's ranks, kinds and range kinds, nothing else. The
    sections a whole-file fact proves empty are computed on it by their own functions."""
    from traceparse import schema

    return Timeline(gpu=schema.conform("gpu", part.sample),
                    ranges=schema.conform("ranges", ranges))


def whole_file_facts(plan: chunks.Plan) -> SectionNotInPieces | None:
    """The first section (in :data:`~traceparse.analyses.summary.SECTIONS` order) that a
    whole-file fact rules out before any piece is read, or None: GPU metrics, memory
    events, graph launches or stream captures (NVTX ranges are read whole:
    :mod:`traceparse.ranges_chunks`)."""
    from traceparse.analyses.graphs import LAUNCH_API_RE
    from traceparse.nsys.db import NsysDB
    from traceparse.nsys.memory import TABLE as MEMORY
    from traceparse.nsys.metrics import METRICS_TABLE
    from traceparse.nsys.spans import calls_named, string_ids

    with NsysDB(plan.path) as db:
        if db.has_rows(METRICS_TABLE):
            return SectionNotInPieces("gpu_metrics",
                                      f"the export has GPU metrics ({METRICS_TABLE})")
        if db.has_rows(MEMORY):
            return SectionNotInPieces("memory", f"the export has memory events ({MEMORY})")
        graph_calls = calls_named(db, string_ids(db, LAUNCH_API_RE)[0])
    if graph_calls or plan.captures or any(b.table == chunks.GRAPH_TRACE for b in plan.blocks):
        return SectionNotInPieces("graphs", "the export has CUDA graph launches, captures or "
                                     "graph records")
    return None


def summary(path: str, *, top: int, min_gap_ns: int, chunk_rows: int = ex.CHUNK_ROWS,
            executor: str = "chunks", workers: int = 4, scheduler: str | None = None
            ) -> dict[str, Any] | None:
    """:func:`traceparse.analyses.summary.summarize` of one nsys export (every section,
    ``top`` rows in top-N sections, gaps of at least ``min_gap_ns``) in pieces; None when
    no device has busy GPU activity (the caller words it from the timeline).

    Raises:
        SectionNotInPieces: a section cannot be computed exactly in pieces (the first found:
            whole-file facts, then pass 1, the spans, the savings, the verdict).
    """
    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None
    if (why := whole_file_facts(plan)) is not None:
        raise why
    ranged = ranged_of(plan)
    first = pass1(plan, wins, min_gap_ns, executor, workers, scheduler,
                  ranges=ranged.tree if ranged else None)
    if (why := pass1_facts(first[3])) is not None:
        raise why
    reuse = Reuse.of(plan, first, wins if executor == "chunks" else None)
    got = pass2(plan, wins, min_gap_ns, first, executor, workers, scheduler,
                replays=reuse.run)
    if got is None:
        return None
    return compose(path, chunk_rows, top, *got, reuse=reuse, ranged=ranged)


def pass1(plan: chunks.Plan, wins: list[tuple[int, int]], min_ns: int,
          executor: str = "chunks", workers: int = 4, scheduler: str | None = None,
          ranges: RangeTree | None = None) -> Part1:
    """Pass 1 over the time windows ``wins``: every partial merged (``ranges``: as
    :func:`pass1_task`'s)."""
    return ex.map_reduce(executor, plan, pass1_task, wins, (min_ns, ranges),
                         partial(merge_pass1, min_ns=min_ns), workers, scheduler)


def pass1_facts(part: cs.SummaryPart) -> SectionNotInPieces | None:
    """The first section pass 1 rules out (graph records: ``graphs``), or None.
    Communication rows are read in pieces (:func:`compose`, :mod:`traceparse.comm_chunks`)."""
    counts = part.counts.row(0, named=True)
    if counts["graphs"]:
        return SectionNotInPieces("graphs", "the export has graph records")
    return None


Pieces = tuple[pl.DataFrame, pl.DataFrame, launch_chunks.Parts, cs.SummaryPart,
               list[SpanPart]]


def read_pieces(plan: chunks.Plan, wins: list[tuple[int, int]], min_ns: int,
                executor: str = "chunks", workers: int = 4, scheduler: str | None = None,
                ranges: RangeTree | None = None) -> Pieces | None:
    """Both passes (:func:`pass1`, with ``ranges`` as its, and :func:`pass2`)."""
    return pass2(plan, wins, min_ns, pass1(plan, wins, min_ns, executor, workers, scheduler,
                                           ranges), executor, workers, scheduler)


def pass2(plan: chunks.Plan, wins: list[tuple[int, int]], min_ns: int, first: Part1,
          executor: str = "chunks", workers: int = 4, scheduler: str | None = None,
          replays: SavingsRun | None = None) -> Pieces | None:
    """Pass 2 after pass 1 (``first``): the breakdown, every gap, the launches' and the
    summary's partials and each window's span part; None when no device has busy GPU
    activity. ``replays`` (the ``chunks`` executor: windows in time order, in this
    process): each window's piece is handed to the savings' replays as it is read
    (:func:`_replay_window`).

    Raises:
        SectionNotInPieces: a span cannot hold what its rules read (``breakdown``).
    """
    (bd_part, state), gap_part, launches, part = first
    devices = eb.device_windows(bd_part)
    if devices.height == 0:
        return None
    found = chunked_gaps.gap_list(gap_part)
    starts, ends = [w[0] for w in wins], [w[1] for w in wins]
    jobs = []
    for i, (t0, t1) in enumerate(wins):
        mine = found.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
        lo = -chunks.END if i == 0 else held_back_lo(
            plan, state.launches, max(-chunks.END, t0 - state.depth - 1), t0, starts[i - 1])
        hi = t1
        if mine.height:
            hi = max(hi, int(mine["end_ns"].max()) + 1)  # type: ignore[arg-type]
        job: Job = (eb.windows_in(devices, t0, t1), mine, (lo if i == 0 else t0, t1))
        jobs.append(((ex.earlier_spans(lo, starts), ex.later_spans(hi, ends)), job))
    try:
        if replays is None:
            spans: list[SpanPart] = ex.map_jobs(executor, plan, span_task, jobs,
                                            (min_ns, state), workers, scheduler)
        else:
            spans = [detach(_replay_window(plan, job, (min_ns, state), devices, replays))
                     for job in jobs]
    except ex.NotLocal as exc:
        raise SectionNotInPieces("breakdown", exc.why) from None
    rows = pl.concat([s.breakdown for s in spans if s.breakdown.height],
                     how="vertical_relaxed")
    from traceparse.analyses.gaps import sort_gaps

    every = sort_gaps(pl.concat([s.gaps for s in spans if s.gaps.width],
                                how="vertical_relaxed"), chunked_gaps.GROUP)
    return eb.finish(devices, rows), every, launches, part, spans


def _replay_window(plan: chunks.Plan, job: tuple[ex.Span, Job],
                   opts: tuple[int, ex.TraceState], devices: pl.DataFrame,
                   replays: SavingsRun) -> SpanPart:
    """:func:`span_task` of one window, then its piece handed to the savings' replays
    (:meth:`~traceparse.savings_chunks.SavingsRun.piece`): the CUDA-graphs fix's removed
    intervals computed on the same span when it is local for them
    (:func:`traceparse.executor_breakdown.launch_set_on`), and the piece's own
    timeline read once for the three replays.

    Raises:
        NotLocal: as :func:`span_task`.
    """
    from traceparse.nsys.spans import read_span

    part, tl, lo, hi = span_read(plan, *job, opts)
    if not replays.running():
        return part
    t0, t1 = replays.edges[replays.fed]
    segs = None
    if replays.wants_segments():
        segs = eb.launch_set_on(plan, tl, lo, hi, devices, t0, t1)
    del tl
    piece, _ = read_span(plan, t0, t1)
    replays.piece(piece, segs)
    return part


def held_back_lo(plan: chunks.Plan, launches: pl.DataFrame, lo: int, t0: int, floor: int
                 ) -> int:
    """Where the span of the window starting at ``t0`` starts: ``lo``, or earlier, just
    before the latest launch call before ``lo`` of each waited stream and waiting thread
    (:attr:`~traceparse.nsys.chunks.Plan.waited`, :attr:`~traceparse.nsys.chunks.Plan.waiters`)
    that launches work starting in the window, as
    :func:`traceparse.nsys.spancheck.held_back_start` widens a span that a stream wait
    may hold back: read once instead of twice. Only launches at or after ``floor`` (the
    previous window's start) widen it; the check still runs on the span, and a stream or
    thread held back further is left to its retry."""
    if not (plan.waited or plan.waiters) or launches.height == 0:
        return lo
    keys = ["kind", "rank", "a", "b"]
    held = pl.DataFrame(
        [("stream", a, b) for a, b in plan.waited] + [("thread", a, b) for a, b in plan.waiters],
        schema={"kind": pl.String, "a": pl.Int64, "b": pl.Int64}, orient="row")
    here = launches.filter(pl.col("_t0") == t0).join(held, on=["kind", "a", "b"], how="semi")
    before = (launches.filter(pl.col("cs") < lo).group_by(keys).agg(pl.col("cs").max())
              .join(here.select(keys).unique(), on=keys, how="semi")
              .filter(pl.col("cs") >= floor))
    return min(lo, int(before["cs"].min()) - 1) if before.height else lo  # type: ignore[arg-type]


class Reuse(NamedTuple):
    """What the savings' replays take from the summary's passes instead of computing it
    again: the file's plan, the chunked breakdown's pass 1 (each device's window and the
    trace state) and, on the ``chunks`` executor, the replays fed by pass 2
    (:class:`~traceparse.savings_chunks.SavingsRun`)."""

    plan: chunks.Plan
    devices: pl.DataFrame
    state: ex.TraceState
    run: SavingsRun | None = None

    @classmethod
    def of(cls, plan: chunks.Plan, first: Part1, wins: list[tuple[int, int]] | None = None
           ) -> Reuse:
        """The plan and pass 1's merged partials (``first``, :func:`pass1`); with the
        time windows ``wins``, the replays pass 2 feeds."""
        from traceparse.savings_chunks import SavingsRun

        (bd_part, state) = first[0]
        devices = eb.device_windows(bd_part)
        run = None
        if wins is not None and devices.height:
            run = SavingsRun(plan, wins, (devices, state))
        return cls(plan, devices, state, run)


def _savings(path: str, chunk_rows: int, breakdown: pl.DataFrame, reuse: Reuse | None = None
             ) -> pl.DataFrame:
    """The ``savings`` section (:func:`traceparse.analyses.savings.savings` of the export,
    ``breakdown`` its attribution) computed in pieces
    (:class:`traceparse.savings_chunks.SavingsRun`, fed by pass 2 or run here with
    ``reuse`` when given): the one place
    it is computed, and the launches section's CUDA-graph saving reads it. The empty
    frame for an export without GPU activity.

    Raises:
        NotOrdered: the savings cannot be computed in pieces (``str`` of it says why).
    """
    from traceparse import savings_chunks
    from traceparse.analyses.savings import savings

    if breakdown.height == 0:
        return savings(Timeline())
    if reuse is None:
        return savings_chunks.savings(path, chunk_rows=chunk_rows, breakdown=breakdown)
    if reuse.run is not None:  # fed by pass 2
        return reuse.run.finish(breakdown, path, chunk_rows)
    return savings_chunks.savings(path, chunk_rows=chunk_rows, breakdown=breakdown,
                                  plan=reuse.plan, pass1=(reuse.devices, reuse.state))


def compose(path: str, chunk_rows: int, top: int, bd: pl.DataFrame, every: pl.DataFrame,
            launches: launch_chunks.Parts, part: cs.SummaryPart, spans: list[SpanPart],
            reuse: Reuse | None = None, ranged: Ranged | None = None) -> dict[str, Any]:
    """The summary dict from both passes' results (see the module docstring), sections in
    :data:`~traceparse.analyses.summary.SECTIONS` order; ``reuse``: the plan and pass 1
    for the savings' replays (:class:`Reuse`; without it they plan and run it again).

    Raises:
        SectionNotInPieces: the first section that cannot be computed exactly.
    """
    from traceparse.analyses import llm_summary, optree
    from traceparse.analyses import summary as sm
    from traceparse.analyses.attribution import check_attribution
    from traceparse.analyses.savings import best

    opts = sm.SummaryOptions(top=top)
    seen = [s.span for s in spans if s.span is not None]
    kinds = frozenset[str]().union(*(s.range_kinds for s in spans))
    tl = stub(part, pl.concat([s.ranges for s in spans], how="vertical_relaxed"))
    counts = part.counts.row(0, named=True)
    out: dict[str, pl.DataFrame] = {
        "window": cs.window(part, (min(s[0] for s in seen), max(s[1] for s in seen)),
                            sum(s.api_calls for s in spans)),
        "breakdown": check_attribution(bd),
        "top_kernels": cs.top_kernels(part, top),
        "top_gaps": every.head(top)}
    if (why := pass1_facts(part)) is not None:
        raise why
    read = INERT_RANGES | (NVTX_KINDS if ranged is not None else frozenset())
    if not kinds <= read:
        raise SectionNotInPieces("phases", "the export has ranges of kind "
                                    f"{', '.join(sorted(kinds - read))}")
    # proven empty by the facts above (and whole_file_facts): their own functions on the stub
    if ranged is not None:  # the NVTX ranges read whole (traceparse.ranges_chunks)
        tl, ranged_out = ranged_sections(ranged, part, tl, opts)
        out.update(ranged_out)
    else:
        for name in ("phases", "phase_mix", "layers"):
            out[name] = sm.SECTIONS[name](tl, opts)
        out["op_tree"] = pl.DataFrame()
    if counts["kernels"] and ranged is None:
        by_rank = optree.splits_by_rank(tl)
        out["op_tree"] = llm_summary.tree_top(
            optree.unranged_tree(part.tree, max_depth=llm_summary.TREE_DEPTH,
                                 by_rank=by_rank), llm_summary.tree_view(tl), by_rank, opts)
    for name in ("gpu_metrics", "gpu_clock", "memory", "graphs"):
        out[name] = sm.SECTIONS[name](tl, opts)
    sync_ops = sync_by_op(spans) if int(bd["host_sync_ns"].sum()) > 0 else None
    # the savings' replays last: every cheaper reason to fall back is found before them
    try:
        out["savings"] = _savings(path, chunk_rows, bd, reuse)
    except NotOrdered as exc:
        raise SectionNotInPieces("savings", str(exc)) from None
    out["communication"], out["stragglers"] = _comm(
        path, chunk_rows, top, tl, counts, kinds, reuse,
        None if ranged is None else ranged.tl.ranges)
    rec = cl.graph_recoverable_from_part(launches[0])
    out["launches"] = cl.launch_summary_from_part(
        launches[1], launch_bound_kernels=int(rec["launch_bound_kernels"].sum()),
        saving=best(out["savings"], "no_launch_overhead"))
    line, caveat = sm.verdict_line(tl, bd, every, out["stragglers"], sync_ops)
    return {"sections": {name: out[name] for name in sm.SECTIONS}, "verdict": line,
            "untraced_gpu_work": caveat}


def _comm(path: str, chunk_rows: int, top: int, tl: Timeline, counts: dict[str, Any],
          kinds: frozenset[str], reuse: Reuse | None, ops: pl.DataFrame | None
          ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ``communication`` and ``stragglers`` sections: their own functions on the stub
    without communication rows, else the collectives read in pieces
    (:func:`traceparse.comm_chunks.sections`, one more read of each window, ``ops`` the
    NVTX ranges read whole; after the savings, which refuse first while ``overlap_comm``
    is not computed in pieces).

    Raises:
        SectionNotInPieces: ranges that may name the collectives (``communication``).
    """
    from traceparse import comm_chunks
    from traceparse.analyses import summary as sm

    if not counts["communication"]:
        opts = sm.SummaryOptions(top=top)
        return sm.SECTIONS["communication"](tl, opts), sm.SECTIONS["stragglers"](tl, opts)
    from traceparse.nsys.spans import span_plan

    plan = reuse.plan if reuse is not None else span_plan(path, block_rows=chunk_rows)
    try:
        return comm_chunks.sections(plan, plan.windows(chunk_rows), top, kinds, ops)
    except comm_chunks.OpNamed as exc:
        raise SectionNotInPieces("communication", str(exc)) from None


def ranged_sections(ranged: Ranged, part: cs.SummaryPart, tl: Timeline, opts: Any
                    ) -> tuple[Timeline, dict[str, pl.DataFrame]]:
    """``phases``, ``phase_mix``, ``layers`` and ``op_tree`` of an export whose NVTX ranges
    were read whole (:func:`traceparse.ranges_chunks.sections`), and the stub ``tl``
    without its NVTX rows for the verdict: the whole ranges gave no step, so its step
    clause is empty, as memory's.

    Raises:
        SectionNotInPieces: a section is not exact from the pieces, or the ranges give
            steps (their attribution, the verdict's step clause, is not computed in
            pieces).
    """
    from traceparse import ranges_chunks as rc
    from traceparse.analyses import optree
    from traceparse.analyses.chunked_ranges import NotExact

    assert part.owners is not None
    try:
        got = rc.sections(ranged, part.owners, int(part.counts["kernels"][0]),
                          optree.splits_by_rank(tl), opts)
    except NotExact as exc:
        section, _, why = str(exc).partition(": ")
        raise SectionNotInPieces(section, why) from None
    if ranged.steps:
        raise SectionNotInPieces("verdict", f"the ranges give {ranged.steps} steps (the "
                                            "steps' attribution, the step clause, is not "
                                            "computed in pieces)")
    return without_nvtx(tl), got


def sync_by_op(spans: Sequence[SpanPart]) -> pl.DataFrame:
    """:func:`traceparse.analyses.host_sync.host_sync_by_op` of the export from pass 2's
    window partials (:func:`traceparse.analyses.chunked_host_sync.merge`).

    Raises:
        SectionNotInPieces: a call's op is not known exactly (``verdict``).
    """
    try:
        return chs.merge([s.sync for s in spans if s.sync is not None])
    except chs.NoOwnRow as exc:
        raise SectionNotInPieces("verdict", f"host_sync_by_op: {exc}") from None
