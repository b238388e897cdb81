"""Issue 16, fourth round: ``idle_gaps`` finds the host rows overlapping each gap with two
binary searches per row (:func:`traceparse.analyses.sweep.overlap_pairs`) instead of an
inequality join (``join_where``). Here the new join is checked against the old one, kept
below as the reference definition, for every kind of row the gaps are joined with (the
cause candidates, the CPU samples, the CUDA calls) on the sample scenarios and the shared
traces; and that ``_near_gaps`` (the calls overlapping some gap, taken before they are
copied to their groups) loses no pair, for the CUDA calls and every other candidate
source. ``idle_gaps`` finds the causes batch by batch of groups (``gaps.CHUNK_ROWS``):
one group per batch gives the same gaps as one batch of all groups."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceparse
from tests.conftest import ids, shared_files
from traceparse.analyses import attribution, gaps, hostrows, sweep
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

GROUPS = (("rank", "device_id"), ("rank", "device_id", "stream_id"))


def _ref_join_gaps(gaps_: pl.DataFrame, rows: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """The join as ``idle_gaps`` wrote it before (an IEJoin, then the group filter)."""
    g = gaps_.select("_gid", *(pl.col(c).alias(f"_g_{c}") for c in group),
                     pl.col("start_ns").alias("_gs"), pl.col("end_ns").alias("_ge"))
    j = rows.join_where(g, pl.col("start_ns") < pl.col("_ge"), pl.col("end_ns") > pl.col("_gs"))
    for c in group:
        j = j.filter((pl.col(c) == pl.col(f"_g_{c}"))
                     | (pl.col(c).is_null() & pl.col(f"_g_{c}").is_null()))
    overlap = pl.min_horizontal("end_ns", "_ge") - pl.max_horizontal("start_ns", "_gs")
    return (j.with_columns(overlap.alias("_ov"),
                           (pl.col("end_ns") - pl.col("start_ns")).alias("_d"))
            .drop(f"_g_{c}" for c in group))


def _same(got: pl.DataFrame, want: pl.DataFrame) -> None:
    cols = want.columns
    key = ["_gid", *[c for c in cols if c != "_gid"]]
    assert_frame_equal(got.select(cols).sort(key, nulls_last=True),
                       want.sort(key, nulls_last=True))


def _check(tl: Timeline) -> None:
    for g in GROUPS:
        group = list(g)
        if len(group) == 3 and tl.gpu.select(group).unique().height > 100:
            continue  # the reference join of every call with every stream's gaps is too big
        acts = attribution.busy_activities(tl)
        free = attribution.default_segments(tl, group)["free"]
        gp = (attribution.intervals.union(free, by=group)
              .filter(pl.col("end_ns") - pl.col("start_ns") >= 1000).with_row_index("_gid"))
        calls = hostrows.per_group(tl.api.filter(pl.col("end_ns").is_not_null()), acts,
                                      group)
        cands = gaps._candidates(tl, acts, group, calls)
        # the calls kept by _near_gaps join the gaps exactly as all calls do
        near = hostrows.per_group(
            gaps._near_gaps(tl.api.filter(pl.col("end_ns").is_not_null()), gp), acts, group)
        _same(gaps._join_gaps(gp, near, group), _ref_join_gaps(gp, calls, group))
        # the candidates kept by _near_gaps (before the copy to groups) cover as all do
        near_cands = gaps._candidates(tl, acts, group, near, gp)
        _same(gaps._join_gaps(gp, near_cands, group, cover=True),
              _ref_join_gaps(gp, cands, group).filter(
                  pl.col("_ov") >= gaps.COVER_FRACTION * (pl.col("_ge") - pl.col("_gs"))))
        for rows in (cands, calls):
            want = _ref_join_gaps(gp, rows, group)
            _same(gaps._join_gaps(gp, rows, group), want)
            cover = want.filter(pl.col("_ov") >= gaps.COVER_FRACTION
                                * (pl.col("_ge") - pl.col("_gs")))
            _same(gaps._join_gaps(gp, rows, group, cover=True), cover)
            inside = want.filter(pl.col("start_ns") >= pl.col("_gs"))
            _same(gaps._join_gaps(gp, rows, group, inside=True), inside)


def test_overlap_pairs_by_hand() -> None:
    # gaps [10, 20) and [30, 40) of code 0, [0, 5) of code 1
    gid = np.array([0, 1, 0])
    gs, ge = np.array([30, 0, 10]), np.array([40, 5, 20])
    rows = (np.array([0, 0, 0, 1, 0, -1]), np.array([15, 20, 5, 4, 40, 0]),
            np.array([35, 30, 10, 9, 50, 100]))
    r, k = sweep.overlap_pairs(gid, gs, ge, *rows)
    # row 0 overlaps both gaps of code 0; row 1 [20, 30) touches them only; row 2 ends at
    # 10; row 3 overlaps code 1's gap; row 4 starts at 40; row 5 has no group
    assert sorted(zip(r.tolist(), k.tolist(), strict=True)) == [(0, 0), (0, 2), (3, 1)]


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_gap_joins_on_sample_scenarios(name: str) -> None:
    _check(samplegen.scenario_timeline(name))


SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_gap_joins_on_shared_traces(path: Path) -> None:
    _check(traceparse.load(path))


def _check_batches(tl: Timeline, monkeypatch: pytest.MonkeyPatch) -> None:
    for g in GROUPS:
        group = list(g)
        whole = gaps._idle_gaps(tl, 1000, None, group)
        with monkeypatch.context() as m:
            m.setattr(gaps, "CHUNK_ROWS", 1)  # one group per batch
            assert_frame_equal(gaps._idle_gaps(tl, 1000, None, group), whole)


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_batches_on_sample_scenarios(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_batches(samplegen.scenario_timeline(name), monkeypatch)


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_batches_on_shared_traces(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tl = traceparse.load(path)
    if tl.gpu.select("rank", "device_id", "stream_id").unique().height > 100:
        pytest.skip("one batch of every stream is the memory this change avoids")
    _check_batches(tl, monkeypatch)
