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
from contextlib import contextmanager
from dataclasses import dataclass, field

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

__all__ = ["CHUNKED_FIXES", "GraphNotes", "NotOrdered", "Replay", "pieces", "replay_summary",
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
    (:func:`launch_segments`); with ``graphs`` the CUDA-graphs fix's removal
    (:func:`graph_segments`, without step regions: :func:`replay_summary` refuses an
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
    if not pinned:
        rates = None
    elif rates is None:
        rates = pinned_rates(plan)
    run = Replay(drop_syncs=drop_syncs, rates=rates,
                 removing=no_launch_overhead or graphs is not None, graphs=graphs,
                 look=look)
    if state is not None:
        state.append(run.state)
    segments = (launch_segments(plan, wins, pass1) if no_launch_overhead
                else graph_segments(plan, wins, pass1) if graphs is not None else None)
    for i, (t0, t1) in enumerate(piece_edges(wins)):
        got = None if segments is None else segments(i)
        tl, _ = read_span(plan, t0, t1)
        if steps is not None:
            steps.append(step_candidates(tl.ranges))
        yield run.piece(tl, t0, t1, got)
        del tl
    run.finish(plan)


def piece_edges(wins: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The replay's pieces: the time windows ``wins``, the first from the file's
    beginning (:data:`~traceparse.nsys.chunks.END` negated)."""
    return [(-chunks.END if i == 0 else t0, t1) for i, (t0, t1) in enumerate(wins)]


#: What a removal gives for one piece: its removed intervals (``rank, start_ns,
#: end_ns``, inside the piece) and, for the CUDA-graphs fix, the blocking calls entered
#: in it by name (``name, count``; None otherwise) and the attribution's whole ``launch``
#: host set in the piece per device (``rank, device_id, start_ns, end_ns``; what the
#: fusion fix removes inside its chains, :mod:`traceparse.fusion_chunks`; None otherwise).
Segments = tuple[pl.DataFrame, pl.DataFrame | None, pl.DataFrame | None]


@dataclass
class Replay:
    """One replay run piece by piece in time order (:func:`pieces` reads the pieces; the
    chunked summary hands it the pieces it reads): its options (``drop_syncs``,
    ``rates``, ``removing``: host time is taken away per piece, ``graphs``: the
    CUDA-graphs fix's notes, ``look``), the carried :class:`State` and
    :class:`Removed`, and the pieces' :func:`~traceparse.analyses.predict.summary_parts`
    folded as they come (:meth:`fold`)."""

    drop_syncs: bool = False
    rates: dict[str, float] | None = None
    removing: bool = False
    graphs: GraphNotes | None = None
    look: Callable[[Timeline, np.ndarray], None] | None = None
    state: State = field(default_factory=State)
    removed: Removed | None = None
    parts: list[pl.DataFrame] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.removing and self.removed is None:
            self.removed = Removed()

    def piece(self, tl: Timeline, t0: int, t1: int, segments: Segments | None = None,
              durations: np.ndarray | None = None) -> pl.DataFrame:
        """Replay the piece ``[t0, t1)`` whose timeline is ``tl`` (:func:`read_span` of
        it), its removed ``segments`` entered first; returns its activities.
        ``durations``: one replayed duration per ``tl.gpu`` row
        (:func:`~traceparse.analyses.replay_pieces.replay_piece`'s).

        Raises:
            NotOrdered: as :func:`~traceparse.analyses.replay_pieces.replay_piece`.
        """
        if self.removed is not None:
            rem, calls = (_NONE, None) if segments is None else segments[:2]
            self.removed.enter(rem, t0, t1)
            if self.graphs is not None:
                self.graphs.add(self.removed, calls)
        rows = replay_piece(tl, t0, t1, self.state, drop_syncs=self.drop_syncs,
                            rates=self.rates, removed=self.removed, durations=durations)
        if self.look is not None:
            self.look(tl, self.state.last)
        return rows

    def fold(self, rows: pl.DataFrame) -> None:
        """Fold one piece's activities into the summary parts (:func:`fold`)."""
        self.parts = fold(self.parts, rows)

    def finish(self, plan: chunks.Plan) -> None:
        """After the last piece: every GPU activity of the file replayed once, and a
        removal's least length not needed (:func:`check_removed`).

        Raises:
            NotOrdered: either does not hold.
        """
        total = sum(b.rows for b in plan.blocks)
        if self.state.rows != total:
            raise NotOrdered(f"{self.state.rows:,} GPU activities replayed of {total:,} "
                             "in the file")
        if self.removed is not None:
            check_removed(self.state)

    def summary(self) -> pl.DataFrame | None:
        """The folded summary parts; None without a piece."""
        return merge_summary_parts(self.parts) if self.parts else None


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


def launch_segments(plan: chunks.Plan, wins: list[tuple[int, int]], pass1: Pass1 | None = None
                    ) -> Callable[[int], Segments]:
    """The launch overhead ``whatif --no-launch-overhead`` removes, piece by piece: for
    piece ``i`` (window ``i`` of ``wins``, the first from the file's beginning) the
    intervals the chunked breakdown attributes to launch overhead in the time window
    (:func:`traceparse.executor_breakdown.span_launch_task`, after its pass 1: ``pass1``
    when the caller has run it).

    Raises:
        NotOrdered: (when called) a window's span may not hold what its attribution
            reads (:class:`traceparse.executor.NotLocal`).
    """
    from traceparse import executor_breakdown as eb

    got = eb.window_jobs(plan, wins) if pass1 is None else eb.jobs_after(wins, *pass1)
    jobs = {} if got is None else dict(got[2])

    def segments(i: int) -> Segments:
        job = jobs.get(i)
        if job is None or got is None:
            return _NONE, None, None
        with _not_local("launch overhead"):
            return eb.span_launch_task(plan, job[0], job[1], got[1]), None, None

    return segments


@dataclass
class GraphNotes:
    """What the CUDA-graphs fix's notes count, summed over the pieces: the blocking
    calls by name (:func:`traceparse.analyses.mechanisms.graph_cuts_note`) and per rank
    the length removed (the union of disjoint pieces' intervals:
    :func:`~traceparse.analyses.mechanisms.removed_note`)."""

    calls: dict[str, int] = field(default_factory=dict)
    lengths: dict[int, int] = field(default_factory=dict)

    def add(self, removed: Removed, calls: pl.DataFrame | None) -> None:
        """Count a piece: the blocking ``calls`` entered in it (``name, count``) and the
        lengths removed up to its end (``removed``, entered for it)."""
        for name, n in ([] if calls is None else calls.iter_rows()):
            self.calls[name] = self.calls.get(name, 0) + n
        self.lengths = {r: removed.before.get(r, 0) + int((e - s).sum())
                        for r, (s, e) in removed.here.items()} | {
            r: n for r, n in removed.before.items() if r not in removed.here}

    def notes(self) -> list[str]:
        """The fix's notes, as :func:`traceparse.analyses.mechanisms._graphs` words them
        for an export without step ranges."""
        from traceparse.analyses.mechanisms import graph_cuts_note, removed_note

        counts = pl.DataFrame({"name": list(self.calls), "count": list(self.calls.values())},
                              schema={"name": pl.String, "count": pl.Int64})
        lengths = pl.DataFrame({"rank": list(self.lengths), "ns": list(self.lengths.values())},
                               schema={"rank": pl.Int64, "ns": pl.Int64})
        return [*graph_cuts_note(counts), *removed_note(lengths.filter(pl.col("ns") > 0))]


def graph_segments(plan: chunks.Plan, wins: list[tuple[int, int]], pass1: Pass1 | None = None
                   ) -> Callable[[int], Segments]:
    """What ``whatif --fix cuda-graphs`` removes (an export without step ranges), piece
    by piece as :func:`launch_segments`: the whole ``launch`` host set less the graph
    launches in each piece, on a span checked for every nanosecond of the piece
    (:func:`traceparse.executor_breakdown.span_launch_set_task`, after the chunked
    breakdown's pass 1: ``pass1`` when the caller has run it), and the blocking calls
    entered in it.

    Raises:
        NotOrdered: (when called) a piece's span may not hold what the launch set reads.
    """
    from traceparse import executor_breakdown as eb

    got = eb.window_jobs(plan, wins) if pass1 is None else eb.jobs_after(wins, *pass1)
    spans = [] if got is None else eb.window_spans(wins, got[1].depth)
    edges = piece_edges(wins)

    def segments(i: int) -> Segments:
        if got is None:
            return _NONE, None, None
        with _not_local("the launch host set"):
            return eb.span_launch_set_task(plan, spans[i], got[0], got[1], *edges[i])

    return segments


_NONE = pl.DataFrame(schema={"rank": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


@contextmanager
def _not_local(what: str) -> Iterator[None]:
    """:class:`traceparse.executor.NotLocal` raised as :class:`NotOrdered` naming
    ``what`` could not be computed on a local span."""
    from traceparse.executor import NotLocal

    try:
        yield
    except NotLocal as exc:
        raise NotOrdered(f"{what} not local: {exc.why}") from exc


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
        acc = fold(acc, rows)
    if acc:
        no_steps(steps)
    return merge_summary_parts(acc) if acc else None


def fold(acc: list[pl.DataFrame], rows: pl.DataFrame) -> list[pl.DataFrame]:
    """``acc`` with the :func:`~traceparse.analyses.predict.summary_parts` of one piece's
    replayed activities ``rows`` appended, merged every eight pieces."""
    rep = rows.with_columns(
        pl.col("host_ns").alias("api_start_ns"),
        (pl.col("pred_end_ns") - pl.col("pred_dur_ns")).alias("pred_start_ns"))
    acc = [*acc, summary_parts(rep)]
    return [merge_summary_parts(acc)] if len(acc) >= 8 else acc


def no_steps(steps: list[pl.DataFrame]) -> None:
    """Raise :class:`NotOrdered` when the pieces' ranges hold steps
    (:func:`traceparse.analyses.steps.step_windows`: ``ProfilerStep`` ranges, or two
    numbered step annotations one after another on a rank): the memory summary then has
    step rows, which the pieces' summary does not compute."""
    from traceparse.analyses.steps import PROFILER_STEP_KIND, auto_steps

    if not steps:
        return
    r = pl.concat(steps).unique()
    if r.height and (r.filter(pl.col("kind") == PROFILER_STEP_KIND).height
                     or auto_steps(r).height):
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
