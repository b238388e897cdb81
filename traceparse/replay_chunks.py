"""The what-if replay of one nsys export read in time-ordered pieces
(``whatif --executor chunks``; docs/performance.md, "Chunked replay").

Each piece is a host-time span ``[t0, t1)`` whose edges are the time windows of
:meth:`traceparse.nsys.chunks.Plan.windows` (about ``chunk_rows`` GPU activities each);
its timeline is read by the reader itself (:func:`traceparse.nsys.spans.read_span`: the
rows overlapping the span, and the GPU rows its calls launched, wherever they run) and
replayed by :func:`traceparse.analyses.replay_pieces.replay_piece` with the state of the
pieces before it. Only the piece's timeline and the carried state are held; the result
is folded into :func:`traceparse.analyses.predict.summary_parts` per piece.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import polars as pl

from traceparse.analyses.predict import merge_summary_parts, summary_parts
from traceparse.analyses.replay_pieces import (
    NotOrdered,
    Removed,
    State,
    check_removed,
    replay_piece,
)
from traceparse.executor import TraceState
from traceparse.nsys import chunks
from traceparse.timeline import Timeline

__all__ = ["CHUNKED_FIXES", "GraphNotes", "NotOrdered", "pieces", "replay_summary", "savings",
           "whatif"]


def pieces(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS, drop_syncs: bool = False,
           pinned: bool = False, no_launch_overhead: bool = False,
           graphs: GraphNotes | None = None, steps: list[pl.DataFrame] | None = None,
           look: Callable[[Timeline, np.ndarray], None] | None = None,
           state: list[State] | None = None, plan: chunks.Plan | None = None,
           rates: dict[str, float] | None = None, pass1: Pass1 | None = None
           ) -> Iterator[pl.DataFrame]:
    """The replayed activities of ``path``, one frame per piece in time order
    (:func:`traceparse.analyses.replay_pieces.replay_piece`'s columns); measured
    durations, and with ``drop_syncs`` every blocking sync no longer waits; with
    ``pinned`` the copies from pageable memory run at the pinned rate and their blocking
    calls no longer wait (:func:`pinned_rates`; the measured replay when there is none);
    with ``no_launch_overhead`` the attribution's launch overhead is taken away from the
    host, each piece's from the chunked breakdown's time window of the same edges
    (:func:`launch_removed`); with ``graphs`` the CUDA-graphs fix's removal
    (:func:`graph_removed`, without step regions: :func:`replay_summary` refuses an
    export with step ranges), its notes' figures summed into ``graphs``. ``steps``:
    each piece's ranges that may be steps (:func:`step_candidates`) are appended to it.
    ``look``: called with each piece's timeline and the rows of its ``gpu`` the piece
    replayed (whole-file facts gathered piece by piece). ``state``: the carried
    :class:`~traceparse.analyses.replay_pieces.State` is appended to it (what it
    counted, e.g. the blocking syncs' waits, once the pieces are done). ``plan``: the
    file's :func:`~traceparse.nsys.spans.span_plan` when the caller has it (else it is
    planned here); ``rates``: the pinned rates when the caller has read them
    (:func:`pinned_notes`; else read here under ``pinned``); ``pass1``: the chunked
    breakdown's pass 1 (each device's window and the trace state) when the caller has
    run it (the chunked summary's pass 1), else run here for a removal.

    Raises:
        NotOrdered: a piece could not continue the carried state exactly, or the pieces
            did not replay every GPU activity of the file once, or a window's launch
            overhead could not be computed on a span (the caller replays the file in
            memory instead).
    """
    from traceparse.nsys.spans import read_span, span_plan

    if plan is None:
        plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return
    edges = [-chunks.END, *(w[0] for w in wins[1:]), chunks.END]
    if not pinned:
        rates = None
    elif rates is None:
        rates = pinned_rates(plan)
    carried = State()
    if state is not None:
        state.append(carried)
    removed = (launch_removed(plan, wins, pass1) if no_launch_overhead
               else graph_removed(plan, wins, graphs, pass1) if graphs is not None
               else None)
    for t0, t1 in pairwise(edges):
        got = None if removed is None else next(removed)
        tl, _ = read_span(plan, t0, t1)
        if steps is not None:
            steps.append(step_candidates(tl.ranges))
        rows = replay_piece(tl, t0, t1, carried, drop_syncs=drop_syncs, rates=rates,
                            removed=got)
        if look is not None:
            look(tl, carried.last)
        yield rows
        del tl
    total = sum(b.rows for b in plan.blocks)
    if carried.rows != total:
        raise NotOrdered(f"{carried.rows:,} GPU activities replayed of {total:,} in the file")
    if removed is not None:
        check_removed(carried)


def step_candidates(ranges: pl.DataFrame) -> pl.DataFrame:
    """The ranges (``rank, kind, name, start_ns, end_ns``) that
    :func:`traceparse.analyses.steps.step_windows` may take as steps without
    ``--steps``: ``ProfilerStep`` ranges and numbered step annotations."""
    from traceparse.analyses.codes import matches
    from traceparse.analyses.steps import AUTO_STEP_KINDS, AUTO_STEP_RE, PROFILER_STEP_KIND

    r = ranges.filter(pl.col("end_ns").is_not_null()).select(
        "rank", pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String), "start_ns",
        "end_ns")
    kind = pl.col("kind")
    return r.filter((kind == PROFILER_STEP_KIND)
                    | (kind.is_in(AUTO_STEP_KINDS) & matches(r["name"], AUTO_STEP_RE)))


#: The chunked breakdown's pass 1: each device's window (``rank, device_id, first_ns,
#: last_ns``) and the trace state (:func:`traceparse.executor_breakdown.window_jobs`).
Pass1 = tuple[pl.DataFrame, TraceState]


def launch_removed(plan: chunks.Plan, wins: list[tuple[int, int]], pass1: Pass1 | None = None
                   ) -> Iterator[Removed]:
    """The launch overhead ``whatif --no-launch-overhead`` removes, one piece at a time:
    the :class:`~traceparse.analyses.replay_pieces.Removed` state entered for each piece
    (the pieces' edges are the windows' starts, the first from the file's beginning),
    its intervals those the chunked breakdown attributes to launch overhead in the time
    window (:func:`traceparse.executor_breakdown.span_launch_task`, after its pass 1:
    ``pass1`` when the caller has run it).

    Raises:
        NotOrdered: a window's span may not hold what its attribution reads
            (:class:`traceparse.executor.NotLocal`).
    """
    from traceparse import executor_breakdown as eb

    got = eb.window_jobs(plan, wins) if pass1 is None else eb.jobs_after(wins, *pass1)
    jobs = {} if got is None else dict(got[2])

    def segments(i: int, t0: int, t1: int) -> pl.DataFrame:
        job = jobs.get(i)
        return _NONE if job is None or got is None else eb.span_launch_task(
            plan, job[0], job[1], got[1])

    return _removed(wins, segments, "launch overhead")


@dataclass
class GraphNotes:
    """What the CUDA-graphs fix's notes count, summed over the pieces: the blocking
    calls by name (:func:`traceparse.analyses.mechanisms.graph_cuts_note`) and per rank
    the length removed (the union of disjoint pieces' intervals:
    :func:`~traceparse.analyses.mechanisms.removed_note`)."""

    calls: dict[str, int] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """The fix's notes, as :func:`traceparse.analyses.mechanisms._graphs` words them
        for an export without step ranges."""
        from traceparse.analyses.mechanisms import graph_cuts_note, removed_note

        counts = pl.DataFrame({"name": list(self.calls), "count": list(self.calls.values())},
                              schema={"name": pl.String, "count": pl.Int64})
        lengths = pl.DataFrame({"rank": list(self.lengths), "ns": list(self.lengths.values())},
                               schema={"rank": pl.Int64, "ns": pl.Int64})
        return [*graph_cuts_note(counts), *removed_note(lengths.filter(pl.col("ns") > 0))]


def graph_removed(plan: chunks.Plan, wins: list[tuple[int, int]], notes: GraphNotes,
                  pass1: Pass1 | None = None) -> Iterator[Removed]:
    """What ``whatif --fix cuda-graphs`` removes (an export without step ranges), one
    piece at a time, as :func:`launch_removed`: the whole ``launch`` host set less the
    graph launches in each piece, on a span checked for every nanosecond of the piece
    (:func:`traceparse.executor_breakdown.span_launch_set_task`, after the chunked
    breakdown's pass 1: ``pass1`` when the caller has run it); ``notes`` gathers the
    notes' figures.

    Raises:
        NotOrdered: a piece's span may not hold what the launch set reads.
    """
    from traceparse import executor_breakdown as eb

    got = eb.window_jobs(plan, wins) if pass1 is None else eb.jobs_after(wins, *pass1)
    spans = [] if got is None else eb.window_spans(wins, got[1].depth)

    def segments(i: int, t0: int, t1: int) -> pl.DataFrame:
        if got is None:
            return _NONE
        rem, calls = eb.span_launch_set_task(plan, spans[i], got[0], got[1], t0, t1)
        for name, n in calls.iter_rows():
            notes.calls[name] = notes.calls.get(name, 0) + n
        return rem

    for removed in _removed(wins, segments, "the launch host set"):
        notes.lengths = {r: removed.before.get(r, 0) + int((e - s).sum())
                         for r, (s, e) in removed.here.items()} | {
            r: n for r, n in removed.before.items() if r not in removed.here}
        yield removed


_NONE = pl.DataFrame(schema={"rank": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


def _removed(wins: list[tuple[int, int]], segments: Callable[[int, int, int], pl.DataFrame],
             what: str) -> Iterator[Removed]:
    """The :class:`Removed` state entered for each piece (window ``i``'s ``[t0, t1)``,
    the first from the file's beginning) with the intervals ``segments(i, t0, t1)``.

    Raises:
        NotOrdered: ``segments`` could not compute them on a local span.
    """
    from traceparse.executor import NotLocal

    removed = Removed()
    for i, (t0, t1) in enumerate(wins):
        lo = -chunks.END if i == 0 else t0
        try:
            segs = segments(i, lo, t1)
        except NotLocal as exc:
            raise NotOrdered(f"{what} not local: {exc.why}") from exc
        removed.enter(segs, lo, t1)
        yield removed


def pinned_rates(plan: chunks.Plan) -> dict[str, float] | None:
    """:func:`traceparse.analyses.mechanisms.pinned_rates` of the whole export, its copies
    read a few rowid blocks at a time (the sums add up) and the device names from the
    export's device table; None when it has no copy from pageable memory or no rate."""
    return pinned_notes(plan)[0]


def pinned_notes(plan: chunks.Plan) -> tuple[dict[str, float] | None, list[str]]:
    """:func:`pinned_rates` and the notes of the ``pinned_memory`` fix
    (:func:`traceparse.analyses.mechanisms.pinned_rates`'); ``(None, [])`` without a
    copy from pageable memory."""
    from traceparse.analyses import mechanisms as mech
    from traceparse.nsys.gpu import MEMCPY
    from traceparse.nsys.spans import read_span

    blocks = [b for b in plan.blocks if b.table == MEMCPY]
    sums = {d: (0, 0, 0) for d in ("HtoD", "DtoH")}
    for i in range(0, len(blocks), 8):
        part = mech.copy_sums(mech.host_copies(chunks.read_rows(plan, blocks[i:i + 8])))
        sums = {d: (sums[d][0] + part[d][0], sums[d][1] + part[d][1],
                    sums[d][2] + part[d][2]) for d in sums}
    if not (sums["HtoD"][2] or sums["DtoH"][2]):
        return None, []
    devices, _ = read_span(plan, -chunks.END, -chunks.END + 1)  # no rows: the devices
    rate, notes = mech.pinned_rates(sums, mech.link_gbps(devices))
    return rate or None, notes


def replay_summary(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS,
                   drop_syncs: bool = False, pinned: bool = False,
                   no_launch_overhead: bool = False, graphs: GraphNotes | None = None,
                   look: Callable[[Timeline, np.ndarray], None] | None = None,
                   state: list[State] | None = None, plan: chunks.Plan | None = None,
                   rates: dict[str, float] | None = None, pass1: Pass1 | None = None
                   ) -> pl.DataFrame | None:
    """:func:`traceparse.analyses.predict.summary_parts` of the replay of ``path``
    (:func:`pieces`; ``graphs``, ``look``, ``state``, ``plan``, ``rates`` and ``pass1``
    as there), folded piece by piece; None when the export has no GPU activity.

    Raises:
        NotOrdered: as :func:`pieces`, or the export has step ranges (its summary's step
            rows are not computed in pieces).
    """
    acc: list[pl.DataFrame] = []
    steps: list[pl.DataFrame] = []
    for rows in pieces(path, chunk_rows=chunk_rows, drop_syncs=drop_syncs, pinned=pinned,
                       no_launch_overhead=no_launch_overhead, graphs=graphs, steps=steps,
                       look=look, state=state, plan=plan, rates=rates, pass1=pass1):
        rep = rows.with_columns(
            pl.col("host_ns").alias("api_start_ns"),
            (pl.col("pred_end_ns") - pl.col("pred_dur_ns")).alias("pred_start_ns"))
        acc.append(summary_parts(rep))
        if len(acc) >= 8:
            acc = [merge_summary_parts(acc)]
    if acc:
        _no_steps(steps)
    return merge_summary_parts(acc) if acc else None


def _no_steps(steps: list[pl.DataFrame]) -> None:
    """Raise :class:`NotOrdered` when the pieces' ranges hold steps
    (:func:`traceparse.analyses.steps.step_windows`: ``ProfilerStep`` ranges, or two
    numbered step annotations one after another on a rank): the memory summary then has
    step rows, which the pieces' summary does not compute."""
    from traceparse.analyses.steps import PROFILER_STEP_KIND, _auto_steps

    if not steps:
        return
    r = pl.concat(steps).unique()
    if r.height and (r.filter(pl.col("kind") == PROFILER_STEP_KIND).height
                     or _auto_steps(r).height):
        raise NotOrdered("the export has step ranges (per-step rows are computed in "
                         "memory only)")


#: ``whatif`` changes the chunked replay makes: the savings-engine change of each fix.
CHUNKED_FIXES = {"cuda-graphs": "no_launch_overhead", "host-sync": "host_sync",
                 "pinned-memory": "pinned_memory"}


def whatif(path: str, *, fix: str | None = None, no_launch_overhead: bool = False,
           chunk_rows: int = chunks.BLOCK_ROWS) -> pl.DataFrame | None:
    """``whatif --fix FIX`` or ``whatif --no-launch-overhead`` (alone;
    :func:`traceparse.analyses.predict.whatif`) of one nsys export, read in pieces. Without
    a fix, the summary of the replay without launch overhead. With one, the replay piece
    by piece (:func:`replay_summary`) and the window rows the savings engine's: a host
    change's capped at the GPU's busy time
    (:func:`traceparse.analyses.savings.host_capped`) with each rank's non-busy time from
    the chunked GPU-only breakdown (:func:`traceparse.executor.gpu_breakdown`: window less
    the union of busy activities per device, what the attribution's launch-overhead,
    warm-up, host-sync and idle parts sum to). None without GPU activity.

    Raises:
        NotOrdered: as :func:`replay_summary`.
    """
    from traceparse.analyses.predict import summary_from_parts, with_fix_windows
    from traceparse.analyses.savings import HOST_CHANGES, host_capped
    from traceparse.executor import gpu_breakdown

    if fix is None:
        got = replay_summary(path, chunk_rows=chunk_rows,
                             no_launch_overhead=no_launch_overhead)
        return None if got is None else summary_from_parts(got)
    change = CHUNKED_FIXES[fix]
    parts = replay_summary(path, chunk_rows=chunk_rows, drop_syncs=change == "host_sync",
                           pinned=change == "pinned_memory",
                           graphs=GraphNotes() if change == "no_launch_overhead" else None)
    if parts is None:
        return None
    out = summary_from_parts(parts)
    if change not in HOST_CHANGES:  # the replay's window itself
        return with_fix_windows(out, out.filter(pl.col("scope") == "window").select(
            "rank", "predicted_ns", pl.lit(None, pl.Int64).alias("window_unprofiled_ns"),
            pl.lit(None, pl.Int64).alias("saving_unprofiled_ns")))
    bd = gpu_breakdown(path, executor="chunks", chunk_rows=chunk_rows)
    bound = (bd.group_by("rank").agg(pl.col("no_gpu_activity_ns").sum().alias("bound_ns"))
             if bd is not None else pl.DataFrame(schema={"rank": pl.Int32,
                                                         "bound_ns": pl.Int64}))
    win = out.filter(pl.col("scope") == "window").select("rank", "measured_ns",
                                                         "predicted_ns")
    sv = (win.join(bound.cast({"rank": win.schema["rank"]}), on="rank", how="left")
          .with_columns(pl.col("bound_ns").fill_null(0))
          .select("rank", host_capped("predicted_ns").alias("predicted_ns"),
                  pl.lit(None, pl.Int64).alias("window_unprofiled_ns"),
                  pl.lit(None, pl.Int64).alias("saving_unprofiled_ns")))
    return with_fix_windows(out, sv)


class NotInPieces(NotOrdered):
    """A savings row :func:`savings` does not compute in pieces: ``change`` names the
    savings-engine change (or ``bounds_job``), ``why`` says why."""

    def __init__(self, change: str, why: str) -> None:
        super().__init__(f"{change}: {why}")
        self.change = change


@dataclass
class _Facts:
    """Whole-file facts gathered from the pieces (:func:`savings`): whether the
    in-memory engine would emit a row the pieces do not compute."""

    comm: bool = False  #: a GPU activity of category communication
    loading: bool = False  #: a finished host range named like data loading
    shapes: bool = False  #: a framework op with input shapes (kernel bytes)
    chain: bool = False  #: a fusion chain (:func:`_fusible`)
    rows: int = 0  #: activities replayed
    #: per lane (rank, process, device, stream): whether its last activity so far is
    #: fusible
    lanes: dict[tuple[int, ...], bool] = field(default_factory=dict)

    def look(self, tl: Timeline, gi: np.ndarray) -> None:
        from traceparse.analyses.issuing import host_ranges, loading_range

        self.rows += gi.size
        self.comm = self.comm or bool(tl.gpu.select(
            (pl.col("category") == "communication").any()).item())
        r = host_ranges(tl)
        self.loading = self.loading or bool(
            r.select(loading_range(pl.col("name"), pl.col("kind")).any()).item())
        if "input_dims" in tl.ranges.columns:  # what mechanisms.kernel_bytes reads
            self.shapes = self.shapes or bool(tl.ranges.select(
                ((pl.col("kind").cast(pl.String) == "cpu_op")
                 & pl.col("input_dims").is_not_null()).any()).item())
        if not self.chain:
            self.chain = _fusible(tl, gi, self.lanes)


def _fusible(tl: Timeline, gi: np.ndarray, lanes: dict[tuple[int, ...], bool]) -> bool:
    """Whether the piece's activities (rows ``gi`` of ``tl.gpu``, with their launch
    calls) continue a fusion chain of :func:`traceparse.analyses.mechanisms.fusion_chains`
    without op shapes or steps: two activities one after the other on a lane, both
    fusible kernels (named like :data:`~traceparse.analyses.mechanisms.FUSIBLE_RE`,
    longer than their call or than a kernel's fixed cost). ``lanes`` carries each lane's
    last activity across the edge (the replay checks that the lanes' order continues)."""
    from traceparse.analyses.codes import matches
    from traceparse.analyses.mechanisms import FIXED_KERNEL_NS, FUSIBLE_RE
    from traceparse.links import launch_links

    idx = pl.Series(gi)
    call = (tl.api["end_ns"] - tl.api["start_ns"]).gather(
        launch_links(tl)["api_row"].gather(idx))
    k = (tl.gpu.select("rank", "process_id", "device_id", "stream_id", "kind", "start_ns",
                       "dur_ns", "name")[idx]
         .with_columns(call.alias("_call"))
         .with_columns(((pl.col("kind") == "kernel")
                        & matches(tl.gpu["name"].gather(idx), FUSIBLE_RE)
                        & (pl.col("_call").is_null() | (pl.col("dur_ns") >= pl.col("_call"))
                           | (pl.col("dur_ns") > FIXED_KERNEL_NS))).alias("_f"))
         .select(pl.col("rank").cast(pl.Int64), pl.col("process_id").fill_null(0),
                 pl.col("device_id").fill_null(-1).cast(pl.Int64),
                 pl.col("stream_id").fill_null(-1).cast(pl.Int64), "start_ns",
                 pl.col("_f").fill_null(False))
         .sort("rank", "process_id", "device_id", "stream_id", "start_ns"))
    for key, g in k.group_by("rank", "process_id", "device_id", "stream_id",
                             maintain_order=True):
        f = g["_f"].to_numpy()
        if (lanes.get(key, False) and f[0]) or bool((f[1:] & f[:-1]).any()):
            return True
        lanes[key] = bool(f[-1])
    return False


def savings(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS,
            breakdown: pl.DataFrame | None = None, plan: chunks.Plan | None = None,
            pass1: Pass1 | None = None) -> pl.DataFrame:
    """:func:`traceparse.analyses.savings.savings` of one nsys export (the same columns,
    dtypes, rows, values and notes), its replays run in pieces: ``no_launch_overhead``
    (the CUDA-graphs fix, :func:`graph_removed`), ``host_sync`` and ``pinned_memory``
    (:func:`replay_summary`, as :func:`whatif` runs them), each rank's parts from
    ``breakdown`` (:func:`traceparse.executor_breakdown.breakdown`'s frame: one row per
    (rank, device), equal to the attribution's; computed in chunks when None). The
    profiler columns are null (no torch.profiler cost in an nsys export) and
    ``bounds_job`` is the rank that saves most (the ranks are coupled only through
    communication, refused below). ``plan`` and ``pass1``: the file's plan and the
    chunked breakdown's pass 1 when the caller has them (the chunked summary), so the
    file is planned and that pass run once (:func:`pieces`).

    Raises:
        NotInPieces: a change the engine would give a row that the pieces do not
            compute: ``overlap_comm`` (communication activity), ``input_pipeline``
            (data-loading ranges), ``fusion`` (a fusion chain, found exactly in the
            pieces, or op shapes) and, with step ranges, ``no_launch_overhead`` (one
            CUDA-graph region per step; ``warm_up`` needs steps too).
        NotOrdered: a replay could not run in pieces (:func:`pieces`), or the breakdown
            not in chunks (:class:`traceparse.executor.NotLocal`).
    """
    from traceparse import executor_breakdown as eb
    from traceparse.analyses import savings as sv
    from traceparse.analyses.mechanisms import sync_note
    from traceparse.nsys.spans import span_plan

    if plan is None:
        plan = span_plan(path, block_rows=chunk_rows)
    facts = _Facts()
    state: list[State] = []
    try:
        host = _windows(path, chunk_rows, drop_syncs=True, look=facts.look, state=state,
                        plan=plan)
    except NotOrdered as exc:
        if "step ranges" in exc.why:
            raise NotInPieces("no_launch_overhead", "the export has step ranges (the "
                              "CUDA-graph regions per step and the warm-up steps are "
                              "computed in memory only)") from exc
        raise
    if host is None or facts.rows == 0:
        return pl.DataFrame(schema=sv.SCHEMA)
    for change, fact, why in (
            ("overlap_comm", facts.comm, "the export has communication activity"),
            ("input_pipeline", facts.loading, "the export has data-loading ranges"),
            ("fusion", facts.shapes, "the export has op shapes (kernel bytes)"),
            ("fusion", facts.chain, "the export has fusion chains (their replay runs "
                                    "in memory only)")):
        if fact:
            raise NotInPieces(change, why)
    if breakdown is None:
        try:
            got = eb.breakdown(path, chunk_rows=chunk_rows)
        except eb.NotLocal as exc:
            raise NotOrdered(f"breakdown not local: {exc.why}") from exc
        breakdown = None if got is None else got[0]
    if breakdown is None:
        return pl.DataFrame(schema=sv.SCHEMA)
    parts = sv.rank_parts(breakdown)
    waits = state[0].waits
    out = [sv.change_rows(host.cast({"rank": parts.schema["rank"]}), parts, "host_sync",
                          sync_note(pl.DataFrame(
                              [(r, *waits[r]) for r in sorted(waits)],
                              schema={"rank": pl.Int64, "calls": pl.Int64,
                                      "wait_ns": pl.Int64}, orient="row")))]
    graphs = GraphNotes()
    w = _windows(path, chunk_rows, graphs=graphs, plan=plan, pass1=pass1)
    if w is not None:
        out.append(sv.change_rows(w.cast({"rank": parts.schema["rank"]}), parts,
                                  "no_launch_overhead", graphs.notes()))
    rates, notes = pinned_notes(plan)
    if rates:  # read once: the replay takes them
        w = _windows(path, chunk_rows, pinned=True, rates=rates, plan=plan)
        if w is not None:
            out.append(sv.change_rows(w.cast({"rank": parts.schema["rank"]}), parts,
                                      "pinned_memory", notes))
    return sv.finish_rows(out, False)


def _windows(path: str, chunk_rows: int, *, state: list[State] | None = None,
             **replay: object) -> pl.DataFrame | None:
    """Per rank the measured and replayed windows of the replay ``replay``
    (:func:`replay_summary`'s options): ``rank, measured_ns, predicted_ns`` and the null
    profiler columns :func:`traceparse.analyses.savings.change_rows` reads; None without
    GPU activity. ``state``: the replay's final :class:`State` is appended to it."""
    from traceparse.analyses.predict import summary_from_parts

    parts = replay_summary(path, chunk_rows=chunk_rows, state=state,
                           **replay)  # type: ignore[arg-type]
    if parts is None:
        return None
    return summary_from_parts(parts).filter(pl.col("scope") == "window").select(
        "rank", "measured_ns", "predicted_ns", pl.lit(None, pl.Int64).alias("_pu"),
        pl.lit(None, pl.Int64).alias("window_unprofiled_ns"))
