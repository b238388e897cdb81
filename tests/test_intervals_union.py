"""Issue 16, fourth round: :func:`traceparse.analyses.intervals.union` takes each merged
interval's start and end from the first and last rows of its cluster (two filters) instead
of a ``group_by`` over cluster ids. The old definition is kept here as the reference and
compared on random frames with groups, null groups, null bounds and empty intervals."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from traceparse.analyses import intervals


def _ref_union(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``union`` as written before: a cluster id per row, then min start / max end."""
    f = intervals.sort_within(intervals._clean(frame, by), by, "start_ns")
    prev_end = intervals._over(pl.col("end_ns").cum_max().shift(1), by)
    new = (pl.col("start_ns") > prev_end).fill_null(True)
    return (f.with_columns(_cluster=intervals._over(new.cum_sum(), by))
            .group_by([*by, "_cluster"], maintain_order=True)
            .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
            .drop("_cluster"))


row = st.tuples(st.sampled_from([None, 1, 2]), st.integers(0, 1),
                st.one_of(st.none(), st.integers(0, 60)), st.integers(-3, 15))


@settings(max_examples=200, deadline=None)
@given(st.lists(row, max_size=40))
def test_union_matches_the_cluster_group_by(rows: list[tuple[int | None, int, int | None,
                                                               int]]) -> None:
    frame = pl.DataFrame(
        {"g": [r[0] for r in rows], "h": [r[1] for r in rows],
         "start_ns": [r[2] for r in rows],
         "end_ns": [None if r[2] is None else r[2] + r[3] for r in rows]},
        schema={"g": pl.Int64, "h": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
    for by in ([], ["g"], ["g", "h"]):
        assert_frame_equal(intervals.union(frame, by=by), _ref_union(frame, by))


def test_union_touching_and_nested() -> None:
    f = pl.DataFrame({"start_ns": [0, 5, 10, 2, 30], "end_ns": [5, 10, 12, 3, 31]})
    assert intervals.union(f).rows() == [(0, 12), (30, 31)]


def _ref_subtract(a: pl.DataFrame, b: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``subtract`` as written before: the general sweep's segments covered by ``a`` and
    not ``b``, merged by the old ``union``."""
    seg = intervals.segments({"_a": a, "_b": b}, by=by)
    return _ref_union(seg.filter((pl.col("_a") > 0) & (pl.col("_b") == 0))
                      .select(*by, "start_ns", "end_ns"), by)


def _frame(rows: list[tuple[int | None, int, int | None, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"g": [r[0] for r in rows], "h": [r[1] for r in rows],
         "start_ns": [r[2] for r in rows],
         "end_ns": [None if r[2] is None else r[2] + r[3] for r in rows]},
        schema={"g": pl.Int64, "h": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


@settings(max_examples=300, deadline=None)
@given(st.lists(row, max_size=40), st.lists(row, max_size=12))
def test_subtract_matches_the_segment_sweep(a: list[tuple[int | None, int, int | None, int]],
                                            b: list[tuple[int | None, int, int | None, int]]
                                            ) -> None:
    """Issue 28 (sfast): ``subtract`` merges each group's intervals and splits them at the
    merged cut intervals in numpy; equal, row for row and dtype for dtype, to the sweep it
    replaced (cuts nested in, straddling, touching and outside the intervals, groups only
    on one side, null groups)."""
    fa, fb = _frame(a), _frame(b)
    for by in ([], ["g"], ["g", "h"]):
        assert_frame_equal(intervals.subtract(fa, fb, by=by), _ref_subtract(fa, fb, by))


def test_subtract_by_hand() -> None:
    a = pl.DataFrame({"g": [1, 1, 2], "start_ns": [0, 5, 0], "end_ns": [10, 20, 10]})
    b = pl.DataFrame({"g": [1, 1, 1, 3], "start_ns": [2, 8, 20, 0],
                      "end_ns": [4, 12, 30, 5]})
    assert intervals.subtract(a, b, by=["g"]).rows() == [
        (1, 0, 2), (1, 4, 8), (1, 12, 20), (2, 0, 10)]
