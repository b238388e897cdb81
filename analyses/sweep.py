"""numpy sweeps behind the attribution's shared segments and the idle-gap joins.

:func:`priority_segments` is :func:`traceparse.analyses.intervals.segments` specialised to
the default-window attribution: one boundary array (time, group code, label, sign) sorted
once, one running count per label, and only the segments inside each group's window kept.
It never builds a frame with one column per label for every boundary (at 1M kernels the
~4M-row frame of the general sweep was ~600 MiB).

:func:`overlap_pairs` is the interval join ``rows`` x ``gaps`` (``start < gap end`` and
``end > gap start``, same group) for gaps that are disjoint within their group: two binary
searches per row give the run of gaps it overlaps, so the pairs come out without an
inequality join.

Example:
    Gaps ``[10, 20)`` and ``[30, 40)``; a row ``[15, 35)`` overlaps both (its first gap
    is the first whose end is after 15, its last the last whose start is before 35).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

_GID = "_sweep_gid"


def group_codes(keys: pl.DataFrame, frame: pl.DataFrame, group: Sequence[str]) -> np.ndarray:
    """Row position in ``keys`` (distinct group rows) of each row of ``frame`` (nulls are
    equal; -1 where the group is not in ``keys``), as int64."""
    group = list(group)
    if not group:
        return np.zeros(frame.height, dtype=np.int64)
    if keys.height == 1:
        hit = pl.lit(True)
        for c in group:
            hit = hit & pl.col(c).eq_missing(pl.lit(keys[c][0], dtype=keys.schema[c]))
        m = frame.select(hit.alias("_h")).to_series().to_numpy()
        return np.where(m, 0, -1).astype(np.int64)
    code = (frame.select(group)
            .join(keys.with_row_index(_GID), on=group, how="left", nulls_equal=True,
                  maintain_order="left")[_GID])
    return code.fill_null(-1).cast(pl.Int64).to_numpy()


def _clean(gid: np.ndarray, start: pl.Series, end: pl.Series
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = start.cast(pl.Int64).fill_null(0).to_numpy()
    e = end.cast(pl.Int64).fill_null(0).to_numpy()
    ok = (gid >= 0) & start.is_not_null().to_numpy() & end.is_not_null().to_numpy() & (e > s)
    return gid[ok], s[ok], e[ok]


def sort_boundaries(gid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Order of the boundaries by (group code, time); rows tied on both in any order."""
    if t.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(t.min()), int(t.max())
    ngroups = int(gid.max()) + 1
    span = hi - lo + 1
    if span * ngroups < 2**62:
        # stable: the boundaries come as sorted runs (starts, ends of each set), which a
        # merging sort exploits
        return np.argsort(gid * span + (t - lo), kind="stable")
    return np.lexsort((t, gid))


def priority_segments(sets: Sequence[tuple[np.ndarray, pl.Series, pl.Series]]
                      ) -> dict[str, np.ndarray]:
    """Sweep labelled interval sets: ``sets[0]`` is the window (one interval per group),
    the rest are labels ``1..len(sets)-1``. Each set is (group code, start, end); null
    bounds, empty intervals and rows with a negative code are ignored.

    Returns the segments of positive length inside a window, in group then time order:
    ``gid``, ``start``, ``end`` and ``count`` (int32, one row per label ``1..``: how
    many intervals of that label cover the segment)."""
    gids, ts, labels, signs = [], [], [], []
    for i, (gid, start, end) in enumerate(sets):
        g, s, e = _clean(gid, start, end)
        n = g.size
        gids += [g, g]
        ts += [s, e]
        labels.append(np.full(2 * n, i, dtype=np.int8))
        signs.append(np.concatenate([np.ones(n, np.int8), -np.ones(n, np.int8)]))
    g = np.concatenate(gids)
    t = np.concatenate(ts)
    order = sort_boundaries(g, t)
    g, t = g[order], t[order]
    lab = np.concatenate(labels)[order]
    sign = np.concatenate(signs)[order]
    del order
    # each group's deltas sum to 0, so one running sum restarts at 0 at every group
    win = np.cumsum(np.where(lab == 0, sign, 0), dtype=np.int32)
    keep = np.flatnonzero((g[1:] == g[:-1]) & (t[1:] > t[:-1]) & (win[:-1] > 0))
    del win
    count = np.empty((len(sets) - 1, keep.size), dtype=np.int32)
    for i in range(1, len(sets)):
        count[i - 1] = np.cumsum(np.where(lab == i, sign, 0), dtype=np.int32)[keep]
    return {"gid": g[keep], "start": t[keep], "end": t[keep + 1], "count": count}


def overlap_pairs(gap_gid: np.ndarray, gap_start: np.ndarray, gap_end: np.ndarray,
                  gid: np.ndarray, start: np.ndarray, end: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every (row, gap) of one group code with ``start < gap_end`` and ``end > gap_start``.

    The gaps must be disjoint within a code (then sorted by start their ends are sorted
    too). Rows with a negative code match nothing. Returns (row index, gap index), by row."""
    rows, gaps = [], []
    order = np.lexsort((gap_start, gap_gid))
    bounds = np.searchsorted(gap_gid[order], np.arange(int(gap_gid.max(initial=-1)) + 2))
    for code in range(bounds.size - 1):
        sel = order[bounds[code]:bounds[code + 1]]
        mine = np.flatnonzero(gid == code)
        if sel.size == 0 or mine.size == 0:
            continue
        lo = np.searchsorted(gap_end[sel], start[mine], side="right")
        hi = np.searchsorted(gap_start[sel], end[mine], side="left")
        n = np.maximum(hi - lo, 0)
        if not n.any():
            continue
        r = np.repeat(np.arange(mine.size), n)
        first = np.cumsum(n) - n
        k = lo[r] + (np.arange(r.size) - first[r])
        rows.append(mine[r])
        gaps.append(sel[k])
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(rows), np.concatenate(gaps)


def attribute(keys: pl.DataFrame, sets: Sequence[tuple[np.ndarray, pl.Series, pl.Series]],
              parts: Sequence[str], host_labels: Sequence[str]) -> dict[str, pl.DataFrame]:
    """The default-window attribution's frames from one :func:`priority_segments` sweep.

    Args:
        keys: the distinct group rows, in the order the groups are listed (group codes
            index it).
        sets: the window, then one set per part but the last (``parts``' priority order:
            compute, communication, memory, then the ``host_labels`` sets).
        parts: part names in priority order; the last is what no set covers (idle).
        host_labels: names of the last ``len(host_labels)`` sets (their counts are kept
            in ``free``).

    Returns:
        ``sums`` (per group: the lengths per part and ``overlapped_comm_ns``, the first
        two sets both covering), ``parts`` (each part's merged intervals, ``_part``,
        sorted by group, part name, start) and ``free`` (segments none of the first three
        sets covers, with the host sets' counts), as
        :func:`traceparse.analyses.attribution.default_segments` documents.
    """
    seg = priority_segments(sets)
    count, gid, start, end = seg["count"], seg["gid"], seg["start"], seg["end"]
    # the part of each segment: the first set (in priority order) that covers it
    part = np.full(gid.size, len(parts) - 1, dtype=np.int8)
    for i in range(count.shape[0] - 1, -1, -1):
        part[count[i] > 0] = i
    sums = (pl.DataFrame({"_g": gid, "_p": part, "_len": end - start,
                          "_ov": (count[0] > 0) & (count[1] > 0)})
            .group_by("_g")
            .agg(*(pl.col("_len").filter(pl.col("_p") == i).sum().alias(p)
                   for i, p in enumerate(parts)),
                 pl.col("_len").filter(pl.col("_ov")).sum().alias("overlapped_comm_ns"))
            .sort("_g"))
    sums = pl.concat([keys[sums["_g"]], sums.drop("_g")], how="horizontal")
    first_host = count.shape[0] - len(host_labels)
    rows = np.flatnonzero(part >= first_host)
    free = pl.concat([keys[gid[rows]], pl.DataFrame(
        [_take("start_ns", start, rows), _take("end_ns", end, rows),
         *(_take(label, count[first_host + i], rows).cast(pl.Int64)
           for i, label in enumerate(host_labels))])], how="horizontal")
    return {"sums": sums, "parts": _part_runs(keys, gid, start, end, part, parts),
            "free": free}


def _part_runs(keys: pl.DataFrame, gid: np.ndarray, start: np.ndarray, end: np.ndarray,
               part: np.ndarray, parts: Sequence[str]) -> pl.DataFrame:
    """The merged intervals of every part, for segments that tile each group's window in
    group then time order (``intervals.union`` by group and part): a part's intervals
    are its runs of consecutive segments (two runs of one part never touch: another
    part's segment lies between). Sorted by group, part name, start."""
    n = gid.size
    new = np.ones(n, dtype=bool)
    new[1:] = (part[1:] != part[:-1]) | (gid[1:] != gid[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], n) - 1
    rg, rp = gid[first], part[first]
    # part names in string order, as sorting by the _part column does
    rank = np.argsort(np.argsort(np.array(parts)))
    # the runs are in group then time order: a stable sort by (group, part) keeps time order
    key = rg * len(parts) + rank[rp]
    order = np.argsort(key.astype(np.int16) if key.size and key.max() < 2**15 else key,
                       kind="stable")
    first, last, rg, rp = first[order], last[order], rg[order], rp[order]
    return pl.concat([keys[rg], pl.DataFrame(
        [pl.Series("_part", list(parts), dtype=pl.String).gather(rp),
         _take("start_ns", start, first), _take("end_ns", end, last)])], how="horizontal")


def _take(name: str, values: np.ndarray, rows: np.ndarray) -> pl.Series:
    """``values[rows]`` gathered by polars: a frame kept in a cache then holds polars'
    memory, not a numpy array between the sweep's freed temporaries (which would keep
    the C heap from shrinking)."""
    return pl.Series(name, values).gather(rows)
