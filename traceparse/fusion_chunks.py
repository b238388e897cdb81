"""The fusion fix's replay of one nsys export in time-ordered pieces (the ``fusion`` row of
``summary --executor chunks``'s savings; docs/performance.md, "Chunked replay").

The in-memory fix (:func:`traceparse.analyses.mechanisms._fusion`, an export without op
shapes or step ranges) finds **chains**: runs of two or more consecutive fusible
activities of one stream lane (``rank, process, device, stream``) in start order
(:data:`~traceparse.analyses.mechanisms.FUSIBLE_RE` kernels longer than their launch call
or than a kernel's fixed cost). Each chain becomes one kernel: every member lasts 0 but
the last, which lasts as long as the chain's longest; the host's ``launch`` set between
the chain's first and last launch calls (per device) is removed.

In pieces (host-time spans, :mod:`traceparse.replay_chunks`), a piece's replay needs its
activities' durations and its removed intervals before it runs, and both depend on
whether the chain of a lane's last activity in the piece goes on in a later piece. So:

1. **Links** (:func:`chain_links`, one read of the GPU rows per time window, run only
   when a kernel name of the file is fusible, :func:`fusible_names`): each lane's
   activities in start order with their fusibility (the launch call by correlation id)
   and their piece (call entry, else start, as the replay places them); kept are the
   chain links whose two activities lie in different pieces (at most one per lane and
   edge).
2. **Chains** (:class:`FusionRun`), per piece with the replay's own activities: the
   piece's chains, carried per lane across an edge as one small record (members,
   kernel time, longest, first and last names, whether a member had a call). A chain
   going on past the piece gives its members 0 and removes the launch set up to the
   piece's end; one that ends gives its last member the chain's longest and removes up
   to its last call. Every link is checked when its second activity arrives: a lane
   whose first activity does (not) continue the chain the links said would (not)
   continue, a chain crossing an edge without a launch call after it, or a chain still
   open after the last piece raise :class:`~traceparse.analyses.replay_pieces.NotOrdered`
   (the caller falls back). The notes are the memory fix's, from counts and the chain
   that saves most (ties: the first in lane, start order, as memory numbers chains).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses.replay_pieces import NotOrdered
from traceparse.nsys import chunks
from traceparse.timeline import Timeline

__all__ = ["FusionRun", "Links", "chain_links", "fusible_names"]

_LANE = ["rank", "process_id", "device_id", "stream_id"]
_I64 = np.int64
#: A lane ``(rank, process, device, stream)``, nulls filled (-1; process 0), and a start.
Key = tuple[int, int, int, int, int]


def _lanes(frame: pl.DataFrame) -> list[pl.Expr]:
    """The lane columns of ``frame`` as the replay codes them (nulls filled)."""
    return [pl.col("rank").cast(pl.Int64), pl.col("process_id").fill_null(0).cast(pl.Int64),
            pl.col("device_id").fill_null(-1).cast(pl.Int64),
            pl.col("stream_id").fill_null(-1).cast(pl.Int64)]


def _fusible(kind: str, names: pl.Series, call: str) -> pl.Expr:
    """A fusible activity (an export without op shapes): a kernel named like
    :data:`~traceparse.analyses.mechanisms.FUSIBLE_RE` that lasted at least its launch
    call (column ``call``: its length, null without one) or longer than a kernel's fixed
    cost, as :func:`traceparse.analyses.mechanisms._chains` reads it."""
    from traceparse.analyses.codes import matches
    from traceparse.analyses.mechanisms import FIXED_KERNEL_NS, FUSIBLE_RE

    return ((pl.col(kind) == "kernel") & matches(names, FUSIBLE_RE)
            & (pl.col(call).is_null() | (pl.col("dur_ns") >= pl.col(call))
               | (pl.col("dur_ns") > FIXED_KERNEL_NS))).fill_null(False)


def fusible_names(plan: chunks.Plan) -> bool:
    """Whether a kernel name of the export (any of its name columns) matches
    :data:`~traceparse.analyses.mechanisms.FUSIBLE_RE`: without one there is no chain.
    One ``DISTINCT`` per name column."""
    import re

    from traceparse.analyses.mechanisms import FUSIBLE_RE
    from traceparse.nsys.db import NsysDB
    from traceparse.nsys.gpu import KERNEL

    with NsysDB(plan.path) as db:
        if not db.has(KERNEL):
            return False
        cols = [c for c in ("demangledName", "shortName", "mangledName")
                if c in db.columns(KERNEL)]
        ids: set[int] = set()
        for c in cols:
            ids |= {int(v) for v in db.frame(f'SELECT DISTINCT "{c}" AS v FROM {KERNEL}')
                    ["v"].drop_nulls().to_list()}
        if not ids:
            return False
        names = db.frame("SELECT id, value FROM StringIds").filter(
            pl.col("id").cast(pl.Int64).is_in(list(ids)))["value"].cast(pl.String)
    rx = re.compile(FUSIBLE_RE)
    return any(rx.search(n) for n in names.drop_nulls().to_list())


@dataclass
class Links:
    """What :func:`chain_links` finds: the first activity ``(lane, start)`` of each chain
    link whose two activities the replay places in different pieces, and whether the
    export has a chain link at all (without one there is no fusion row)."""

    across: set[Key] = field(default_factory=set)
    found: bool = False


def chain_links(plan: chunks.Plan, wins: list[tuple[int, int]]) -> Links:
    """:class:`Links` of the export, read one time window of ``wins`` at a time (the rows
    that start in it, :func:`traceparse.nsys.chunks.read_rows`, and the fusible kernels'
    calls by correlation id); per lane the last activity's fusibility, piece and start
    are carried across windows."""
    from traceparse.analyses.codes import matches
    from traceparse.analyses.mechanisms import FUSIBLE_RE
    from traceparse.launch_chunks import join_launches
    from traceparse.nsys.spans import calls_by_correlation

    starts = np.asarray([w[0] for w in wins[1:]], _I64)
    out = Links()
    carry: dict[tuple[int, ...], tuple[bool, int, int]] = {}
    for t0, t1 in wins:
        rows = chunks.read_rows(plan, plan.blocks_for(t0, t1), (t0, t1)).filter(
            (pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
        k = rows.filter(pl.col("kind") != "sync")
        if k.height == 0:
            continue
        # only the kernels named fusible need their calls (the others never chain)
        named = k.filter((pl.col("kind") == "kernel") & matches(k["name"], FUSIBLE_RE))
        calls = join_launches(named, calls_by_correlation(plan, named["correlation_id"]))
        calls = calls.select(*_lanes(calls), "start_ns", "api_start_ns", "api_end_ns").unique(
            subset=[*_LANE, "start_ns"], keep="first", maintain_order=True)
        k = (k.select(*_lanes(k), "kind", "start_ns", "dur_ns", "name")
             .join(calls, on=[*_LANE, "start_ns"], how="left")
             .with_columns((pl.col("api_end_ns") - pl.col("api_start_ns")).alias("_call")))
        k = k.select(*_LANE, "start_ns", _fusible("kind", k["name"], "_call").alias("_f"),
                     pl.coalesce("api_start_ns", "start_ns").alias("_h"))
        k = k.sort(*_LANE, "start_ns")
        lane = [k[c].to_numpy() for c in _LANE]
        s, f = k["start_ns"].to_numpy(), k["_f"].to_numpy()
        piece = np.searchsorted(starts, k["_h"].to_numpy(), side="right")
        first = np.ones(k.height, bool)
        first[1:] = np.any([c[1:] != c[:-1] for c in lane], axis=0)
        for i in np.flatnonzero(first).tolist():
            got = carry.get(tuple(int(c[i]) for c in lane))
            if got is not None and got[0] and f[i]:
                out.found = True
                if got[1] != piece[i]:
                    out.across.add((*(int(c[i]) for c in lane), got[2]))  # type: ignore[arg-type]
        linked = ~first[1:] & f[1:] & f[:-1]
        out.found = out.found or bool(linked.any())
        j = np.flatnonzero(linked & (piece[1:] != piece[:-1]))
        for i in j.tolist():
            out.across.add((*(int(c[i]) for c in lane), int(s[i])))  # type: ignore[arg-type]
        last = np.append(np.flatnonzero(first)[1:] - 1, k.height - 1)
        for i in last.tolist():
            carry[tuple(int(c[i]) for c in lane)] = (bool(f[i]), int(piece[i]), int(s[i]))
    return out


@dataclass
class _Open:
    """A chain going on past the pieces replayed so far (one per lane)."""

    n: int  #: members so far
    total: int  #: their kernel time
    top: int  #: the longest
    first: str  #: the first member's name
    last: str  #: the last member's name
    rank: int
    stream: Any  #: the stream id as the timeline has it
    start: int  #: the first member's start
    call: bool  #: a member so far had a launch call


@dataclass
class FusionRun:
    """The fusion fix's chains found piece by piece (:meth:`piece`), with the
    :class:`Links` of :func:`chain_links`: per piece the replayed durations and the
    removed intervals, and the counts and largest chain for the notes (:meth:`notes`)."""

    links: Links
    #: per lane: whether its last activity so far is fusible
    last_f: dict[tuple[int, ...], bool] = field(default_factory=dict)
    open: dict[tuple[int, ...], _Open] = field(default_factory=dict)
    chains: int = 0
    kernels: int = 0
    #: the chain that saves most: ``(-saving, lane, start)`` and the note's fields
    best: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    #: per rank the first GPU start (every row, syncs included: what the largest chain's
    #: note counts from), over the pieces' timelines (each row starts in one)
    first: dict[int, int] = field(default_factory=dict)

    def piece(self, tl: Timeline, rows: np.ndarray, t0: int, t1: int,
              launch: pl.DataFrame | None) -> tuple[np.ndarray, pl.DataFrame]:
        """The piece ``[t0, t1)`` whose timeline is ``tl`` and whose replayed
        activities are the rows ``rows`` of ``tl.gpu``: one duration per ``tl.gpu`` row
        and the removed intervals (``rank, start_ns, end_ns``: ``launch``, the piece's
        ``launch`` host set per device, inside the chains' call spans).

        Raises:
            NotOrdered: a link does not hold as :func:`chain_links` found it, or the
                launch set is missing.
        """
        from traceparse.links import launch_links

        for r, t in tl.gpu.group_by("rank").agg(pl.col("start_ns").min()).iter_rows():
            if t is not None:
                self.first[int(r)] = min(self.first.get(int(r), t), t)
        dur = tl.gpu["dur_ns"].to_numpy().copy()
        idx = pl.Series(rows)
        api = launch_links(tl)["api_row"].gather(idx)
        k = (tl.gpu.select(*_LANE, "kind", "start_ns", "dur_ns", "name")[idx]
             .with_columns(pl.Series("_gi", rows),
                           (tl.api["end_ns"] - tl.api["start_ns"]).gather(api).alias("_call"),
                           tl.api["start_ns"].gather(api).alias("_c"),
                           pl.col("device_id").alias("_dev"),
                           pl.col("stream_id").alias("_stream")))
        k = k.with_columns(_fusible("kind", tl.gpu["name"].gather(idx), "_call").alias("_f"))
        k = k.with_columns(*(e.alias(c) for e, c in zip(_lanes(k), _LANE, strict=True)))
        k = k.sort(*_LANE, "start_ns")
        lanes = [k[c].to_numpy() for c in _LANE]
        f = k["_f"].to_numpy()
        s = k["start_ns"].to_numpy()
        n = k.height
        first = np.ones(n, bool)
        if n:
            first[1:] = np.any([c[1:] != c[:-1] for c in lanes], axis=0)
        lkey = [tuple(int(c[i]) for c in lanes) for i in np.flatnonzero(first).tolist()]
        link = np.zeros(n, bool)
        link[1:] = ~first[1:] & f[1:] & f[:-1]
        for i, key in zip(np.flatnonzero(first).tolist(), lkey, strict=True):
            was = self.last_f.get(key, False) and bool(f[i])
            if was != (key in self.open):
                raise NotOrdered("a fusion chain link across a piece edge is not where the "
                                 "links found it")
            link[i] = was
        last_row = np.append(np.flatnonzero(first)[1:] - 1, n - 1) if n else first[:0]
        out = np.zeros(n, bool)  # the chain of a lane's last row goes on past the piece
        for i, key in zip(last_row.tolist(), lkey, strict=True):
            out[i] = bool(f[i]) and (*key, int(s[i])) in self.links.across
        chain = np.cumsum(~link)
        k = k.with_columns(pl.Series("_chain", chain), pl.Series("_in", link & first),
                           pl.Series("_out", out)).filter(pl.col("_f"))
        per = (k.group_by("_chain", maintain_order=True)
               .agg(*(pl.col(c).first() for c in _LANE), pl.col("_in").first(),
                    pl.col("_out").last(), pl.len().alias("n"), pl.col("dur_ns").sum()
                    .alias("total"), pl.col("dur_ns").max().alias("top"),
                    pl.col("name").first().cast(pl.String).alias("first"),
                    pl.col("name").last().cast(pl.String).alias("last"),
                    pl.col("_stream").first(), pl.col("_dev").first(),
                    pl.col("start_ns").first(), pl.col("_c").min().alias("lo"),
                    pl.col("_c").max().alias("hi"), pl.col("_gi").last().alias("_end"),
                    pl.col("_gi")))
        # chains going on through the piece where their lane has no activity
        here = set(lkey)
        spans: list[tuple[Any, ...]] = [
            (key[0], None if key[2] < 0 else key[2], t0, t1)
            for key, o in self.open.items() if key not in here and o.call]
        for c in per.iter_rows(named=True):
            key = tuple(c[x] for x in _LANE)
            o = self.open.pop(key) if c["_in"] else None
            has = c["lo"] is not None
            if o is not None:
                if not c["_out"] and not has and o.call:
                    raise NotOrdered("a fusion chain across a piece edge has no launch call "
                                     "after it")
                c = c | {"n": o.n + c["n"], "total": o.total + c["total"],
                         "top": max(o.top, c["top"]), "first": o.first, "start_ns": o.start,
                         "_stream": o.stream}
            lo = t0 if o is not None and o.call else c["lo"]
            hi = t1 if c["_out"] else c["hi"]
            real = c["_out"] or c["n"] >= 2
            if real and lo is not None and hi is not None and hi > lo:
                spans.append((c["rank"], c["_dev"], lo, hi))
            if c["_out"]:
                dur[np.asarray(c["_gi"], _I64)] = 0
                self.open[key] = _Open(c["n"], c["total"], c["top"], c["first"], c["last"],
                                       c["rank"], c["_stream"], c["start_ns"],
                                       (o is not None and o.call) or has)
            elif real:
                dur[np.asarray(c["_gi"], _I64)] = 0
                dur[c["_end"]] = c["top"]
                self._close(key, c)
        for i, key in zip(last_row.tolist(), lkey, strict=True):
            self.last_f[key] = bool(f[i])
        return dur, _removed(launch, spans, tl)

    def _close(self, key: tuple[int, ...], c: dict[str, Any]) -> None:
        """Count a chain that ended (``c``: its members' sums, longest, names, start)."""
        self.chains += 1
        self.kernels += c["n"]
        rank = (-(c["total"] - c["top"]), key, c["start_ns"])
        if self.best is None or rank < self.best[0]:
            self.best = (rank, {"len": c["n"], "dur_ns": c["total"], "first": c["first"],
                                "last": c["last"], "rank": c["rank"],
                                "stream_id": c["_stream"], "start_ns": c["start_ns"],
                                "_max": c["top"]})

    def finish(self) -> None:
        """After the last piece: no chain is still open.

        Raises:
            NotOrdered: one is (a link found past the file's last activity).
        """
        if self.open:
            raise NotOrdered("a fusion chain is open after the last piece")

    def notes(self) -> list[str]:
        """The fix's notes (:func:`traceparse.analyses.mechanisms.fusion_note` and
        :func:`~traceparse.analyses.mechanisms.largest_chain_note`); empty without a
        chain (no row)."""
        from traceparse.analyses.mechanisms import fusion_note, largest_chain_note

        if self.best is None:
            return []
        c = self.best[1]
        return [fusion_note(self.chains, self.kernels, 0),
                largest_chain_note(c, self.first[int(c["rank"])])]


def _removed(launch: pl.DataFrame | None, spans: list[tuple[Any, ...]], tl: Timeline
             ) -> pl.DataFrame:
    """The launch set ``launch`` (``rank, device_id, start_ns, end_ns``) inside the chains'
    call spans of the piece (``spans``: rank, device, start, end), ``rank, start_ns,
    end_ns``."""
    from traceparse.analyses import intervals

    empty = pl.DataFrame(schema={"rank": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    if not spans:
        return empty
    if launch is None:
        raise NotOrdered("the launch host set of a piece with fusion chains is not known")
    g = ["rank", "device_id"]
    sp = pl.DataFrame(spans, schema={"rank": pl.Int64, "device_id": pl.Int64,
                                     "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    rem = intervals.intersect(launch.select(*g, "start_ns", "end_ns"),
                              sp.cast({c: launch.schema[c] for c in g}), by=g)  # type: ignore[arg-type]
    return rem.select(pl.col("rank").cast(pl.Int64), "start_ns", "end_ns")
