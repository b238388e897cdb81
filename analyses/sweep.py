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

import itertools
from collections.abc import Iterator, Sequence

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
    top = np.bincount(lab[sign > 0], minlength=len(sets))  # a count <= the label's starts
    keep, count = _label_counts(lab[:-1], sign[:-1], (g[1:] == g[:-1]) & (t[1:] > t[:-1]),
                                [0] * len(sets), top.tolist())
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


#: Boundaries swept at once by :func:`attribute`: the sweep's temporaries (keys, order,
#: running counts) scale with this, not with the trace (issue 28: at 10M kernels the whole
#: sweep at once peaked ~6 GB). One chunk is about 100 MB of temporaries.
CHUNK_BOUNDARIES = 1 << 22


def attribute(keys: pl.DataFrame, sets: Sequence[tuple[np.ndarray, pl.Series, pl.Series]],
              parts: Sequence[str], host_labels: Sequence[str], *,
              chunk: int | None = None) -> dict[str, pl.DataFrame]:
    """The default-window attribution's frames from one sweep of the labelled sets,
    made in time-ordered chunks of about ``chunk`` boundaries (default
    :data:`CHUNK_BOUNDARIES`; :func:`chunk_segments`).

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
        :func:`traceparse.analyses.attribution.default_segments` documents. The same
        frames whatever the chunk size (carried across chunk edges: the running count of
        every label, and the part run still open at the edge).
    """
    first_host = len(sets) - 1 - len(host_labels)
    npart = len(parts)
    # per chunk, numpy only (polars' allocator would keep every chunk's freed pages)
    gsum: list[np.ndarray] = []  # per chunk: (group, part sums..., overlapped) rows
    free: list[tuple[np.ndarray, ...]] = []
    runs = []
    for seg in chunk_segments(sets, CHUNK_BOUNDARIES if chunk is None else chunk):
        count, gid, start, end = seg["count"], seg["gid"], seg["start"], seg["end"]
        # the part of each segment: the first set (in priority order) that covers it
        part = np.full(gid.size, npart - 1, dtype=np.int8)
        for i in range(count.shape[0] - 1, -1, -1):
            part[count[i] > 0] = i
        length = end - start
        # the segments are in group order: exact int64 sums per run of one group
        first = np.flatnonzero(np.diff(gid, prepend=-1) != 0) if gid.size else gid[:0]
        cols = [gid[first]]
        for i in range(npart):
            cols.append(np.add.reduceat(np.where(part == i, length, 0), first)
                        if first.size else first)
        ov = (count[0] > 0) & (count[1] > 0)
        cols.append(np.add.reduceat(np.where(ov, length, 0), first) if first.size else first)
        gsum.append(np.stack(cols).astype(np.int64))
        rows = np.flatnonzero(part >= first_host)
        # kept until the end: group codes as int32 (there are a few groups, not 2**31)
        free.append((gid[rows].astype(np.int32), start[rows], end[rows],
                     count[first_host:, rows]))
        rg, rp, rs, re_ = _runs(gid, start, end, part)
        runs.append((rg.astype(np.int32), rp, rs, re_))
        del rg, rp, rs, re_
        del count, part, rows, length, ov
    allsum = np.concatenate(gsum, axis=1) if gsum else np.zeros((npart + 2, 0), np.int64)
    del gsum
    groups, inv = np.unique(allsum[0], return_inverse=True)
    total = np.zeros((npart + 1, groups.size), np.int64)
    for r in range(npart + 1):
        np.add.at(total[r], inv, allsum[r + 1])
    out_sums = pl.concat([keys[groups], pl.DataFrame(
        [pl.Series(p, total[i], pl.Int64) for i, p in enumerate(parts)]
        + [pl.Series("overlapped_comm_ns", total[npart], pl.Int64)])], how="horizontal")
    fg = np.concatenate([f[0] for f in free])
    out_free = pl.concat([keys[fg], pl.DataFrame(
        [pl.Series("start_ns", np.concatenate([f[1] for f in free])),
         pl.Series("end_ns", np.concatenate([f[2] for f in free])),
         *(pl.Series(label, np.concatenate([f[3][i] for f in free]), pl.Int32)
           for i, label in enumerate(host_labels))])], how="horizontal")
    del free, fg
    return {"sums": out_sums, "parts": _part_runs(keys, runs, parts), "free": out_free}


def chunk_segments(sets: Sequence[tuple[np.ndarray, pl.Series, pl.Series]], chunk: int
                   ) -> Iterator[dict[str, np.ndarray]]:
    """:func:`priority_segments`, yielded in consecutive pieces (group then time order)
    that together are its result, each cut from about ``chunk`` boundaries.

    Each set's start and end keys (group code x time, one int64) are sorted once; a
    chunk is a key range [K0, K1), so every boundary tied with another lies in one chunk.
    The running count of each label at K0 is the number of its starts before K0 minus
    its ends before K0 (two binary searches), and the last segment of a chunk ends at
    the first boundary of the next. Keys that would not fit in int64 (times spanning
    more than 2**62 ns over all groups) fall back to one :func:`priority_segments`."""
    cleaned = [_clean(g, s, e) for g, s, e in sets]
    n = sum(2 * c[0].size for c in cleaned)
    if n == 0:
        yield priority_segments(sets)
        return
    lo = min(int(c[1].min()) for c in cleaned if c[1].size)
    hi = max(int(c[2].max()) for c in cleaned if c[2].size)
    span = hi - lo + 1
    ngroups = max(int(c[0].max()) for c in cleaned if c[0].size) + 1
    if n <= chunk or span * ngroups >= 2**62:
        yield priority_segments(sets)
        return
    # per label: sorted start keys and sorted end keys; each label's cleaned arrays are
    # released once its keys are made (at 10M kernels each label's are ~0.25 GB)
    ks: list[np.ndarray] = []
    ke: list[np.ndarray] = []
    for i, (g, s, e) in enumerate(cleaned):
        cleaned[i] = (g[:0], s[:0], e[:0])
        # stable: a timsort of the runs the sets come in (starts in file order are
        # sorted), half the time of the default quicksort
        ks.append(np.sort(g * span + (s - lo), kind="stable"))
        ke.append(np.sort(g * span + (e - lo), kind="stable"))
        del g, s, e
    del cleaned
    cuts = _cut_keys([*ks, *ke], n, chunk)
    nl = len(ks)
    for k0, k1 in itertools.pairwise(cuts):
        a = [np.searchsorted(k, k0) for k in ks]
        b = [np.searchsorted(k, k1) for k in ks]
        c = [np.searchsorted(k, k0) for k in ke]
        d = [np.searchsorted(k, k1) for k in ke]
        key = np.concatenate([*(ks[i][a[i]:b[i]] for i in range(nl)),
                              *(ke[i][c[i]:d[i]] for i in range(nl))])
        if key.size == 0:
            continue
        lab = np.concatenate([*(np.full(b[i] - a[i], i, np.int8) for i in range(nl)),
                              *(np.full(d[i] - c[i], i, np.int8) for i in range(nl))])
        sign = np.concatenate([np.ones(sum(b[i] - a[i] for i in range(nl)), np.int8),
                               -np.ones(sum(d[i] - c[i] for i in range(nl)), np.int8)])
        order = np.argsort(key, kind="stable")
        key, lab, sign = key[order], lab[order], sign[order]
        del order
        # the first boundary at or after K1 closes the chunk's last segment
        after = [k[j] for k, j in zip(ks, b, strict=True) if j < k.size]
        after += [k[j] for k, j in zip(ke, d, strict=True) if j < k.size]
        nxt = min(after) if after else key[-1]
        key = np.append(key, nxt)
        if ngroups == 1:  # one group: the key is the time (no int64 division)
            g, t = np.zeros(key.size, np.int64), key + lo
        else:
            g, t = key // span, key % span + lo
        run0 = [int(a[i] - c[i]) for i in range(nl)]  # counts carried in from before K0
        # a label's count in the chunk lies in [0, run0 + its starts in the chunk]
        keep, count = _label_counts(lab, sign, (g[1:] == g[:-1]) & (t[1:] > t[:-1]), run0,
                                    [run0[i] + int(b[i] - a[i]) for i in range(nl)])
        yield {"gid": g[keep], "start": t[keep], "end": t[keep + 1], "count": count}


def _label_counts(lab: np.ndarray, sign: np.ndarray, cand: np.ndarray, run0: Sequence[int],
                  top: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The segments kept and their label counts, from boundaries in sweep order (label
    ``lab``, +1 start / -1 end ``sign``): ``keep``, the positions where ``cand`` (a
    segment of positive length within one group starts there) and label 0 (the window)
    covers it, and ``count`` (int32, one row per label ``1..``) at those positions.
    ``run0``: each label's count before the first boundary; ``top``: a bound of its count
    over these boundaries (never below 0: an interval's start comes before its end).

    The running counts are cumulative sums of several labels at once, one bit field per
    label in an int64 (:func:`_pack_fields`: each field holds its label's largest count,
    so no field carries into the next), not one sum per label."""
    nl = len(top)
    keep = np.zeros(0, np.int64)
    count = np.zeros((nl - 1, 0), dtype=np.int32)
    for w, fields in enumerate(_pack_fields(top)):
        lut = np.zeros(nl, np.int64)
        for i, (sh, _) in fields.items():
            lut[i] = 1 << sh
        run = lut[lab]
        run *= sign
        np.cumsum(run, out=run)
        run += sum(int(run0[i]) << sh for i, (sh, _) in fields.items())
        if w == 0:  # the window's word
            sh, mask = fields[0]
            keep = np.flatnonzero(cand & (((run >> sh) & mask) > 0))
            count = np.zeros((nl - 1, keep.size), dtype=np.int32)
        at = run[keep]
        del run
        for i, (sh, mask) in fields.items():
            if i:
                count[i - 1] = (at >> sh) & mask
        del at
    return keep, count


def _pack_fields(top: Sequence[int]) -> list[dict[int, tuple[int, int]]]:
    """Bit fields of int64 words for running counts bounded by ``top`` (label ``i``'s count
    lies in ``[0, top[i]]``): per word, ``{label: (shift, mask)}``, at most 62 bits a
    word. Label 0 (the window) is in the first word; a label whose count is always 0 is
    in none.

    Example:
        ``_pack_fields([1, 0, 1000])`` -> ``[{0: (0, 1), 2: (1, 1023)}]``."""
    words: list[dict[int, tuple[int, int]]] = [{}]
    used = [0]
    for i, hi in enumerate(top):
        bits = int(hi).bit_length()
        if bits == 0 and i:
            continue
        bits = max(bits, 1)
        if used[-1] + bits > 62:
            words.append({})
            used.append(0)
        words[-1][i] = (used[-1], (1 << bits) - 1)
        used[-1] += bits
    return words


def _cut_keys(arrays: Sequence[np.ndarray], n: int, chunk: int) -> list[int]:
    """Key cut points giving chunks of about ``chunk`` boundaries: quantiles of an even
    sample of every sorted key array, then the largest key + 1 as the last cut."""
    pieces = -(-n // chunk)
    step = max(1, n // (64 * pieces * max(1, len(arrays))))
    sample = np.sort(np.concatenate([k[::step] for k in arrays if k.size]))
    inner = sample[(np.arange(1, pieces) * sample.size) // pieces] if pieces > 1 \
        else sample[:0]
    first = min(int(k[0]) for k in arrays if k.size)
    last = max(int(k[-1]) for k in arrays if k.size) + 1
    return sorted({first, *(int(x) for x in inner), last})


def _runs(gid: np.ndarray, start: np.ndarray, end: np.ndarray, part: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runs of consecutive segments of one group and part: (group, part, start of
    the first segment, end of the last), in group then time order."""
    n = gid.size
    new = np.ones(n, dtype=bool)
    new[1:] = (part[1:] != part[:-1]) | (gid[1:] != gid[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], n)[:first.size] - 1
    return gid[first], part[first], start[first], end[last]


def _join_runs(runs: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runs of consecutive chunks as one list: a chunk's first run continues the
    previous chunk's last run when group and part are the same (the chunks' segments are
    consecutive, so such a run was only cut by the chunk edge)."""
    g: list[np.ndarray] = []
    p: list[np.ndarray] = []
    s: list[np.ndarray] = []
    e: list[np.ndarray] = []
    for rg, rp, rs, re_ in runs:
        if g and rg.size and rg[0] == g[-1][-1] and rp[0] == p[-1][-1]:
            e[-1] = e[-1].copy()
            e[-1][-1] = re_[0]
            rg, rp, rs, re_ = rg[1:], rp[1:], rs[1:], re_[1:]
        if rg.size:
            g.append(rg)
            p.append(rp)
            s.append(rs)
            e.append(re_)
    if not g:
        z = np.zeros(0, np.int64)
        return z, np.zeros(0, np.int8), z, z
    return np.concatenate(g), np.concatenate(p), np.concatenate(s), np.concatenate(e)


def _part_runs(keys: pl.DataFrame,
               runs: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
               parts: Sequence[str]) -> pl.DataFrame:
    """The merged intervals of every part from the runs of consecutive segments of one
    group and part (:func:`_runs` per chunk, joined by :func:`_join_runs`; segments tile
    each group's window in group then time order, so a part's intervals are its runs: two
    runs of one part never touch, another part's segment lies between). Sorted by group,
    part name, start. ``_part`` is an Enum of ``parts``: one byte a row (as a String column
    it was 16 bytes a row, 0.4 GB at 27M runs).

    ``runs`` is emptied: the per-chunk arrays are dropped once joined, and each joined
    array once its column is gathered (at 27M runs each is 0.1-0.2 GB, and all of them
    were held beside the frame being built, the attribution's peak)."""
    rg, rp, rs, re_ = _join_runs(runs)
    runs.clear()
    # part names in string order, as sorting by the _part column does
    rank = np.argsort(np.argsort(np.array(parts)))
    # the runs are in group then time order: a stable sort by (group, part) keeps time order
    key = rg * len(parts) + rank[rp]
    order = np.argsort(key.astype(np.int16) if key.size and key.max() < 2**15 else key,
                       kind="stable")
    del key
    group = keys[rg[order]]
    del rg
    part = pl.Series("_part", list(parts), dtype=pl.Enum(list(parts))).gather(rp[order])
    del rp
    start = _take("start_ns", rs, order)
    del rs
    end = _take("end_ns", re_, order)
    del re_, order
    return pl.concat([group, pl.DataFrame([part, start, end])], how="horizontal")


def _take(name: str, values: np.ndarray, rows: np.ndarray) -> pl.Series:
    """``values[rows]`` gathered by polars: a frame kept in a cache then holds polars'
    memory, not a numpy array between the sweep's freed temporaries (which would keep
    the C heap from shrinking)."""
    return pl.Series(name, values).gather(rows)
