"""Exact, vectorised interval arithmetic on int64 nanoseconds.

Every function takes polars frames of half-open intervals ``[start_ns, end_ns)`` plus optional
group columns (``by``), and works per group: intervals of different groups never interact.
Empty intervals (``end_ns <= start_ns``) and rows with a null bound are ignored. All results
are exact integers: nothing passes through floats.

The workhorse is :func:`segments`, a sweep line: every interval contributes ``+1`` at its start
and ``-1`` at its end for its label; a cumulative sum per group gives, for every elementary
segment between two consecutive boundaries, how many intervals of each label cover it. Union,
intersection, subtraction and the priority attribution of :mod:`traceparse.analyses.attribution`
are all
filters over those segments.

Example:
    >>> import polars as pl
    >>> a = pl.DataFrame({"start_ns": [0, 5, 20], "end_ns": [10, 12, 30]})
    >>> union(a).rows()
    [(0, 12), (20, 30)]
    >>> b = pl.DataFrame({"start_ns": [8], "end_ns": [25]})
    >>> subtract(a, b).rows()
    [(0, 8), (25, 30)]
    >>> total(intersect(a, b))
    9
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from traceparse.analyses.hostrows import distinct_rows

START = "start_ns"
END = "end_ns"


def _over(expr: pl.Expr, by: Sequence[str]) -> pl.Expr:
    return expr.over(list(by)) if by else expr


def sort_within(frame: pl.DataFrame, by: Sequence[str], col: str) -> pl.DataFrame:
    """``frame`` sorted by the ``by`` columns, then ``col``: the rows of
    ``frame.sort([*by, col])``, but one single-key sort of ``col`` per group.

    polars sorts on several keys through a row encoding that is 3-6x slower than a
    single-key sort (4M rows: 6.7 s vs 2.1 s with one group, 14.4 s vs 2.8 s with 8, on
    the 2-core benchmark machine), and the analyses sort millions of boundaries by
    (rank, device, time). The groups come out in the order ``sort(by)`` gives them (nulls
    first), so the result equals the multi-key sort up to the order of rows tied on every
    key (neither sort promises one).

    Example:
        >>> f = pl.DataFrame({"g": [2, 1, 2, 1], "t": [5, 9, 1, 3]})
        >>> sort_within(f, ["g"], "t").rows()
        [(1, 3), (1, 9), (2, 1), (2, 5)]
    """
    by = list(by)
    if not by or frame.height < 2:
        return frame.sort([*by, col])
    order = distinct_rows(frame.select(by)).sort(by)
    if order.height == 1:
        return frame.sort(col)
    parts = frame.partition_by(by, as_dict=True)
    return pl.concat([parts[key].sort(col) for key in order.iter_rows()], rechunk=False)


def _clean(frame: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    return (frame.select(*by, pl.col(START).cast(pl.Int64), pl.col(END).cast(pl.Int64))
            .filter(pl.col(START).is_not_null() & pl.col(END).is_not_null()
                    & (pl.col(END) > pl.col(START))))


def union(frame: pl.DataFrame, *, by: Sequence[str] = ()) -> pl.DataFrame:
    """Merge overlapping or touching intervals per group.

    Args:
        frame: rows with ``start_ns``, ``end_ns`` and the ``by`` columns.
        by: group columns.

    Returns:
        ``by`` columns, ``start_ns``, ``end_ns``: disjoint, non-touching intervals sorted by
        group then start.

    Example:
        >>> f = pl.DataFrame({"g": [1, 1, 1, 2], "start_ns": [0, 3, 10, 0],
        ...                   "end_ns": [5, 7, 12, 1]})
        >>> union(f, by=["g"]).rows()
        [(1, 0, 7), (1, 10, 12), (2, 0, 1)]
    """
    by = list(by)
    f = _clean(frame, by)
    return _assemble(f, by, [(k, *_merge(s, e)) for k, s, e in _groups(f, by)])


def _groups(f: pl.DataFrame, by: list[str]) -> list[tuple[tuple, np.ndarray, np.ndarray]]:
    """Per group of a :func:`_clean` frame, in ``sort(by)`` order (nulls first): the key
    and the start and end arrays (int64, file order)."""
    if not by:
        return [((), f[START].to_numpy(), f[END].to_numpy())] if f.height else []
    order = distinct_rows(f.select(by)).sort(by)
    if order.height == 1:
        return [(order.row(0), f[START].to_numpy(), f[END].to_numpy())]
    parts = f.select(*by, START, END).partition_by(by, as_dict=True)
    return [(k, parts[k][START].to_numpy(), parts[k][END].to_numpy())
            for k in order.iter_rows()]


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[s, e)`` (non-empty): merged, non-touching, by start.
    Sorted by start, an interval opens a new merged one when it starts after every earlier
    end; a merged interval ends at the running maximum end of its last row."""
    if s.size == 0:
        return s, e
    if s.size > 1 and not bool((s[1:] >= s[:-1]).all()):
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
        del o
    cm = np.maximum.accumulate(e)
    new = np.ones(s.size, bool)
    new[1:] = s[1:] > cm[:-1]
    last = np.ones(s.size, bool)
    last[:-1] = new[1:]
    return s[new], cm[last]


def _assemble(f: pl.DataFrame, by: list[str],
              groups: list[tuple[tuple, np.ndarray, np.ndarray]]) -> pl.DataFrame:
    """One frame (group columns with ``f``'s dtypes, ``start_ns``, ``end_ns``) of per-group
    interval arrays, in the order given."""
    schema = pl.Schema({**{c: f.schema[c] for c in by}, START: pl.Int64(), END: pl.Int64()})
    frames = [pl.DataFrame({START: s, END: e}, schema={START: pl.Int64, END: pl.Int64})
              .select(*(pl.lit(v, dtype=schema[c]).alias(c) for c, v in zip(by, k, strict=True)),
                      START, END)
              for k, s, e in groups if s.size]
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]


def total(frame: pl.DataFrame) -> int:
    """Sum of ``end_ns - start_ns`` over rows (use on disjoint intervals, e.g. a union)."""
    if frame.height == 0:
        return 0
    return int(frame.select((pl.col(END) - pl.col(START)).sum()).item())


def covered(frame: pl.DataFrame, *, by: Sequence[str] = ()) -> pl.DataFrame:
    """Length of the union per group: ``by`` columns and ``covered_ns``."""
    u = union(frame, by=by)
    d = (pl.col(END) - pl.col(START)).sum().alias("covered_ns")
    if by:
        return u.group_by(list(by), maintain_order=True).agg(d)
    return u.select(d)


def segments(sets: Mapping[str, pl.DataFrame], *, by: Sequence[str] = ()) -> pl.DataFrame:
    """Cut the time line at every boundary of every labelled interval set.

    Args:
        sets: label -> frame of intervals (``start_ns``, ``end_ns`` and the ``by`` columns).
            Intervals of one label may overlap each other.
        by: group columns (all frames must have them, with equal dtypes).

    Returns:
        One row per elementary segment of positive length: ``by`` columns, ``start_ns``,
        ``end_ns`` and, per label, an Int64 column named after the label holding how many
        intervals of that label cover the segment. Only segments between the first and
        last boundary of their group appear; segments covered by no label appear too (all
        counts 0), so filters must test the counts.

    Example:
        >>> a = pl.DataFrame({"start_ns": [0], "end_ns": [10]})
        >>> b = pl.DataFrame({"start_ns": [5, 6], "end_ns": [20, 8]})
        >>> segments({"a": a, "b": b}).rows()
        [(0, 5, 1, 0), (5, 6, 1, 1), (6, 8, 1, 2), (8, 10, 1, 1), (10, 20, 0, 1)]
    """
    by = list(by)
    labels = list(sets)
    parts = []
    for label, frame in sets.items():
        f = _clean(frame, by)
        zeros = [pl.lit(0, dtype=pl.Int64).alias(x) for x in labels if x != label]
        for col, sign in ((START, 1), (END, -1)):
            parts.append(f.select(*by, pl.col(col).alias("_t"),
                                  pl.lit(sign, dtype=pl.Int64).alias(label), *zeros)
                         .select(*by, "_t", *labels))
    if not parts:
        return pl.DataFrame(schema={START: pl.Int64, END: pl.Int64})
    # No group_by on (by, _t): after the sort, the running sums on the LAST of several rows
    # with equal _t already include all of them, and the earlier ones get END == _t (the
    # next row's _t) and are dropped by the END > _t filter below.
    ev = sort_within(pl.concat(parts, how="vertical"), by, "_t")
    # Every interval adds +1 and -1 inside its own group, so each group's deltas sum to 0 and
    # a global cumulative sum restarts at 0 at every group boundary: no window function.
    same_group = pl.lit(True)
    for c in by:
        same_group = same_group & pl.col(c).shift(-1).eq_missing(pl.col(c))
    nxt = pl.when(same_group).then(pl.col("_t").shift(-1)).otherwise(None)
    return (ev.with_columns(*(pl.col(x).cum_sum() for x in labels), nxt.alias(END))
            .filter(pl.col(END).is_not_null() & (pl.col(END) > pl.col("_t")))
            .rename({"_t": START})
            .select(*by, START, END, *labels))


def _merge_segments(seg: pl.DataFrame, by: Sequence[str]) -> pl.DataFrame:
    return union(seg.select(*by, START, END), by=by)


def intersect(a: pl.DataFrame, b: pl.DataFrame, *, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by both ``a`` and ``b`` (per group), merged and sorted.

    Example:
        >>> a = pl.DataFrame({"start_ns": [0, 20], "end_ns": [10, 30]})
        >>> b = pl.DataFrame({"start_ns": [5], "end_ns": [25]})
        >>> intersect(a, b).rows()
        [(5, 10), (20, 25)]
    """
    seg = segments({"_a": a, "_b": b}, by=by)
    return _merge_segments(seg.filter((pl.col("_a") > 0) & (pl.col("_b") > 0)), by)


def subtract(a: pl.DataFrame, b: pl.DataFrame, *, by: Sequence[str] = ()) -> pl.DataFrame:
    """Intervals covered by ``a`` but not by ``b`` (per group), merged and sorted.

    Example:
        >>> a = pl.DataFrame({"start_ns": [0], "end_ns": [10]})
        >>> b = pl.DataFrame({"start_ns": [2, 4], "end_ns": [3, 6]})
        >>> subtract(a, b).rows()
        [(0, 2), (3, 4), (6, 10)]
    """
    by = list(by)
    fa, fb = _clean(a, by), _clean(b, by)
    cut = {k: _merge(s, e) for k, s, e in _groups(fb, by)}
    return _assemble(fa, by, [(k, *_minus(*_merge(s, e), cut.get(k)))
                              for k, s, e in _groups(fa, by)])


def _minus(s: np.ndarray, e: np.ndarray, cut: tuple[np.ndarray, np.ndarray] | None
           ) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals ``[s, e)`` less merged intervals ``cut``: an interval a cut
    overlaps (two binary searches give the run of cuts) is replaced, in place, by the
    pieces between its cuts that are not empty; the others are kept as they are (only the
    touched intervals get per-piece arrays: a few hundred cuts against a million
    intervals)."""
    if cut is None or cut[0].size == 0 or s.size == 0:
        return s, e
    cs, ce = cut
    i0 = np.searchsorted(ce, s, side="right")  # first cut ending after the start
    i1 = np.searchsorted(cs, e, side="left")   # first cut starting at or after the end
    d = np.flatnonzero(i1 > i0)                # the intervals a cut overlaps
    if d.size == 0:
        return s, e
    a0, n = i0[d], i1[d] - i0[d] + 1           # their first cut, their pieces
    del i0, i1
    row = np.repeat(np.arange(d.size), n)
    k = np.arange(row.size) - np.repeat(np.cumsum(n) - n, n)
    j = a0[row] + k                            # the cut after the piece
    ds, de = s[d][row], e[d][row]
    lo = np.where(k == 0, ds, ce[np.clip(j - 1, 0, ce.size - 1)])
    hi = np.where(k == n[row] - 1, de, cs[np.clip(j, 0, cs.size - 1)])
    lo, hi = np.maximum(lo, ds), np.minimum(hi, de)
    keep = hi > lo
    row, lo, hi = row[keep], lo[keep], hi[keep]
    # every interval repeated as many times as it has pieces (1 untouched, 0 cut away),
    # then the touched ones' places overwritten by their pieces (inside it, in order)
    cnt = np.ones(s.size, np.int64)
    cnt[d] = np.bincount(row, minlength=d.size)
    off = (np.cumsum(cnt) - cnt)[d]
    out_s, out_e = np.repeat(s, cnt), np.repeat(e, cnt)
    pos = off[row] + (np.arange(row.size) - np.searchsorted(row, row))
    out_s[pos], out_e[pos] = lo, hi
    return out_s, out_e


def complement(frame: pl.DataFrame, windows: pl.DataFrame, *,
               by: Sequence[str] = ()) -> pl.DataFrame:
    """Stretches of each group's window(s) not covered by ``frame``: ``windows - frame``."""
    return subtract(windows, frame, by=by)
