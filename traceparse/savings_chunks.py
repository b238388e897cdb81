"""The ``savings`` frame of one nsys export with its replays in pieces
(``summary --executor chunks``'s savings section; docs/performance.md, "Chunked
summary" and "Chunked replay").

The replays the savings engine runs for an nsys export (``host_sync``: every
blocking sync dropped; ``no_launch_overhead``: the CUDA-graphs fix, the whole ``launch``
host set less graph launches removed; ``pinned_memory``: pageable copies at the pinned
rate; ``fusion``: each chain of fusible kernels one kernel, :mod:`traceparse.fusion_chunks`)
are run **together**, piece by piece in time order (:class:`SavingsRun`): each
piece's timeline (:func:`traceparse.nsys.spans.read_span`) is read once and handed to
the :class:`~traceparse.replay_chunks.Replay` runs, each with its own carried
state. The chunked summary hands the pieces over from its pass 2, beside the span it
reads for the window, and the CUDA-graphs fix's removed intervals are computed on that
span when it is local for them (:func:`traceparse.executor_breakdown.launch_set_on`);
:func:`savings` reads them itself. The rows are the engine's
(:func:`traceparse.analyses.savings.change_rows`), each rank's parts from the chunked
breakdown.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from traceparse.fusion_chunks import FusionRun, chain_links, fusible_names
from traceparse.nsys import chunks
from traceparse.replay_chunks import (
    GraphNotes,
    NotOrdered,
    Pass1,
    Replay,
    Segments,
    graph_segments,
    no_steps,
    piece_edges,
    pinned_notes,
    step_candidates,
)
from traceparse.timeline import Timeline

__all__ = ["ChangeNotInPieces", "SavingsRun", "savings"]


class ChangeNotInPieces(NotOrdered):
    """A savings row :func:`savings` does not compute in pieces: ``change`` names the
    savings-engine change (or ``bounds_job``), ``why`` says why."""

    def __init__(self, change: str, why: str) -> None:
        super().__init__(f"{change}: {why}")
        self.change = change


@dataclass
class _Facts:
    """Whole-file facts gathered from the pieces (:class:`SavingsRun`): whether the
    in-memory engine would emit a row the pieces do not compute."""

    comm: bool = False  #: a GPU activity of category communication
    loading: bool = False  #: a finished host range named like data loading
    shapes: bool = False  #: a framework op with input shapes (kernel bytes)
    rows: int = 0  #: activities replayed

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


#: The replays in the order their failures are reported (the first stops the rest).
ORDER = ("host_sync", "no_launch_overhead", "pinned_memory", "fusion")


class SavingsRun:
    """The savings' replays of one export run together over its pieces (window ``i`` of
    ``wins``, the first from the file's beginning: :func:`~traceparse.replay_chunks.piece_edges`),
    fed in time order (:meth:`piece`) and finished into the frame (:meth:`finish`).

    A replay that cannot continue (:class:`NotOrdered`) is stopped, and so are the ones
    after it in :data:`ORDER` (its failure is reported before their rows count); the
    failures are raised by :meth:`finish` in the order :func:`savings` has always met
    them: the host-sync replay's, the whole-file facts', the CUDA-graphs replay's, the
    pinned one's, the fusion one's (with its chain checks,
    :class:`~traceparse.fusion_chunks.FusionRun`). ``pass1``: the chunked breakdown's
    pass 1 when the caller has it (the CUDA-graphs fix's removal reads it; else it is run
    here).
    """

    def __init__(self, plan: chunks.Plan, wins: list[tuple[int, int]],
                 pass1: Pass1 | None = None) -> None:
        self.plan, self.wins = plan, wins
        self.edges = piece_edges(wins)
        self.facts = _Facts()
        self.graphs = GraphNotes()
        self.rates, self.pinned_notes = pinned_notes(plan) if wins else (None, [])
        self.runs = {"host_sync": Replay(drop_syncs=True, look=self.facts.look),
                     "no_launch_overhead": Replay(removing=True, graphs=self.graphs)}
        if self.rates:  # read once: the pinned replay takes them
            self.runs["pinned_memory"] = Replay(rates=self.rates)
        self.fusion: FusionRun | None = None
        if wins and fusible_names(plan):  # the chains' links read once
            links = chain_links(plan, wins)
            if links.found:  # else no chain, no row
                self.fusion = FusionRun(links)
                self.runs["fusion"] = Replay(removing=True)
        self.errors: dict[str, NotOrdered] = {}
        self.steps: list[pl.DataFrame] = []
        self.fed = 0
        self._segments = None if not wins else graph_segments(plan, wins, pass1)

    def running(self) -> list[str]:
        """The replays still fed: those before the first failure."""
        out = []
        for name in ORDER:
            if name in self.errors:
                break
            if name in self.runs:
                out.append(name)
        return out

    def wants_segments(self) -> bool:
        """Whether the CUDA-graphs or fusion replay still needs each piece's removed
        intervals (the launch host set)."""
        return bool({"no_launch_overhead", "fusion"} & set(self.running()))

    def piece(self, tl: Timeline, segments: Segments | None = None) -> None:
        """Replay the next piece, whose timeline is ``tl`` (:func:`read_span` of it),
        with every running replay; ``segments``: the CUDA-graphs fix's removal for it
        when the caller has computed it on a local span (else computed here,
        :func:`~traceparse.replay_chunks.graph_segments`)."""
        i = self.fed
        t0, t1 = self.edges[i]
        self.fed += 1
        self.steps.append(step_candidates(tl.ranges))
        for name in self.running():
            run = self.runs[name]
            try:
                segs = None
                if run.removed is not None:
                    assert self._segments is not None
                    if segments is None:  # once for both removals
                        segments = self._segments(i)
                    segs = segments
                dur = None
                if name == "fusion":  # after host_sync: the piece's rows are its
                    if "host_sync" in self.errors:  # raised first by finish
                        break
                    assert self.fusion is not None and segs is not None
                    dur, rem = self.fusion.piece(tl, self.runs["host_sync"].state.last,
                                                 t0, t1, segs[2])
                    segs = (rem, None, None)
                run.fold(run.piece(tl, t0, t1, segs, durations=dur))
            except NotOrdered as exc:
                self.errors[name] = exc

    def _done(self, name: str) -> pl.DataFrame | None:
        """Per rank the measured and replayed windows of replay ``name`` (:func:`_windows`)
        after its last piece; None without GPU activity.

        Raises:
            NotOrdered: the replay failed, or its final checks do (every activity
                replayed once, a removal's least length, no step ranges).
        """
        if name in self.errors:
            raise self.errors[name]
        run = self.runs[name]
        if self.fed != len(self.edges):
            raise NotOrdered(f"{self.fed} pieces replayed of {len(self.edges)}")
        if not self.edges:
            return None
        run.finish(self.plan)
        no_steps(self.steps)
        return _windows(run)

    def finish(self, breakdown: pl.DataFrame | None, path: str, chunk_rows: int
               ) -> pl.DataFrame:
        """The savings frame after the last piece (:func:`savings`, ``breakdown`` as
        there).

        Raises:
            ChangeNotInPieces, NotOrdered: as :func:`savings`.
        """
        from traceparse import executor_breakdown as eb
        from traceparse.analyses import savings as sv
        from traceparse.analyses.mechanisms import sync_note

        try:
            host = self._done("host_sync")
        except NotOrdered as exc:
            if "step ranges" in exc.why:
                raise ChangeNotInPieces("no_launch_overhead", "the export has step ranges "
                                        "(the CUDA-graph regions per step and the warm-up "
                                        "steps are computed in memory only)") from exc
            raise
        facts = self.facts
        if host is None or facts.rows == 0:
            return pl.DataFrame(schema=sv.SCHEMA)
        for change, fact, why in (
                ("overlap_comm", facts.comm, "the export has communication activity"),
                ("input_pipeline", facts.loading, "the export has data-loading ranges"),
                ("fusion", facts.shapes, "the export has op shapes (kernel bytes)")):
            if fact:
                raise ChangeNotInPieces(change, why)
        if breakdown is None:
            try:
                got = eb.breakdown(path, chunk_rows=chunk_rows)
            except eb.NotLocal as exc:
                raise NotOrdered(f"breakdown not local: {exc.why}") from exc
            breakdown = None if got is None else got[0]
        if breakdown is None:
            return pl.DataFrame(schema=sv.SCHEMA)
        parts = sv.rank_parts(breakdown)
        waits = self.runs["host_sync"].state.waits
        out = [sv.change_rows(host.cast({"rank": parts.schema["rank"]}), parts, "host_sync",
                              sync_note(pl.DataFrame(
                                  [(r, *waits[r]) for r in sorted(waits)],
                                  schema={"rank": pl.Int64, "calls": pl.Int64,
                                          "wait_ns": pl.Int64}, orient="row")))]
        w = self._done("no_launch_overhead")
        if w is not None:
            out.append(sv.change_rows(w.cast({"rank": parts.schema["rank"]}), parts,
                                      "no_launch_overhead", self.graphs.notes()))
        if self.rates:
            w = self._done("pinned_memory")
            if w is not None:
                out.append(sv.change_rows(w.cast({"rank": parts.schema["rank"]}), parts,
                                          "pinned_memory", self.pinned_notes))
        if self.fusion is not None:
            w = self._done("fusion")
            self.fusion.finish()
            if w is not None and self.fusion.chains:
                out.append(sv.change_rows(w.cast({"rank": parts.schema["rank"]}), parts,
                                          "fusion", self.fusion.notes()))
        return sv.finish_rows(out, False)


def savings(path: str, *, chunk_rows: int = chunks.BLOCK_ROWS,
            breakdown: pl.DataFrame | None = None, plan: chunks.Plan | None = None,
            pass1: Pass1 | None = None) -> pl.DataFrame:
    """:func:`traceparse.analyses.savings.savings` of one nsys export (the same columns,
    dtypes, rows, values and notes), its replays run in pieces, together
    (:class:`SavingsRun`, one read of each piece): ``no_launch_overhead`` (the
    CUDA-graphs fix, :func:`~traceparse.replay_chunks.graph_segments`), ``host_sync`` and
    ``pinned_memory`` (as :func:`traceparse.replay_chunks.whatif` runs them), each rank's
    parts from ``breakdown`` (:func:`traceparse.executor_breakdown.breakdown`'s frame:
    one row per (rank, device), equal to the attribution's; computed in chunks when
    None). The profiler columns are null (no torch.profiler cost in an nsys export) and
    ``bounds_job`` is the rank that saves most (the ranks are coupled only through
    communication, refused below). ``plan`` and ``pass1``: the file's plan and the
    chunked breakdown's pass 1 when the caller has them, so the file is planned and that
    pass run once.

    Raises:
        ChangeNotInPieces: a change the engine would give a row that the pieces do not
            compute: ``overlap_comm`` (communication activity), ``input_pipeline``
            (data-loading ranges), ``fusion`` with op shapes (its chains without them
            are replayed in pieces) and, with step ranges, ``no_launch_overhead`` (one
            CUDA-graph region per step; ``warm_up`` needs steps too).
        NotOrdered: a replay could not run in pieces
            (:func:`~traceparse.replay_chunks.pieces`), or the breakdown not in chunks
            (:class:`traceparse.executor.NotLocal`).
    """
    from traceparse.nsys.spans import read_span, span_plan

    if plan is None:
        plan = span_plan(path, block_rows=chunk_rows)
    run = SavingsRun(plan, plan.windows(chunk_rows), pass1)
    for t0, t1 in run.edges:
        if not run.running():
            break
        tl, _ = read_span(plan, t0, t1)
        run.piece(tl)
        del tl
    return run.finish(breakdown, path, chunk_rows)


def _windows(run: Replay) -> pl.DataFrame | None:
    """Per rank the measured and replayed windows of a finished replay: ``rank,
    measured_ns, predicted_ns`` and the null profiler columns
    :func:`traceparse.analyses.savings.change_rows` reads; None without GPU activity."""
    from traceparse.analyses.predict import summary_from_parts

    parts = run.summary()
    if parts is None:
        return None
    return summary_from_parts(parts).filter(pl.col("scope") == "window").select(
        "rank", "measured_ns", "predicted_ns", pl.lit(None, pl.Int64).alias("_pu"),
        pl.lit(None, pl.Int64).alias("window_unprofiled_ns"))
