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
