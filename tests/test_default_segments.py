"""One segments pass per (timeline, group) (issue 16, third round): the default-window
breakdown, the part intervals and ``idle_gaps`` read
:func:`traceparse.analyses.attribution.default_segments` instead of each cutting the time
line themselves. Here each is checked against the computation it replaced, written out
independently: the breakdown over clipped sets keyed by window id, and the idle-gap sweep
over ``_win``/``_busy`` and the host sets."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceparse
from tests.conftest import ids, shared_files
from traceparse.analyses import attribution, intervals
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

GROUPS = (("rank", "device_id"), ("rank", "device_id", "stream_id"))


def _fresh(tl: Timeline) -> Timeline:
    return Timeline(**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__})


def _ref_free(tl: Timeline, group: list[str]) -> pl.DataFrame:
    """The free segments as idle_gaps cut them before: all busy activities as one set."""
    acts = (tl.gpu.filter(pl.col("category").cast(pl.String) != "sync")
            .with_columns(pl.col("category").cast(pl.String)))
    wins = acts.group_by(group).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    hs = attribution._host_sets(tl, acts, group)
    seg = intervals.segments({"_win": wins, "_busy": acts, **hs}, by=group)
    return (seg.filter((pl.col("_win") > 0) & (pl.col("_busy") == 0))
            .select(*group, "start_ns", "end_ns", "launch", "warmup", "host_sync"))


def _check(tl: Timeline) -> None:
    for g in GROUPS:
        group = list(g)
        shared = attribution.breakdown(_fresh(tl), group=group)
        t = _fresh(tl)
        ref = attribution.breakdown_windows(t, attribution._default_windows(t, group),
                                            group=group, _shared=False)
        assert_frame_equal(shared, ref)
        # the part intervals add up to the breakdown computed the old way
        t = _fresh(tl)
        for part in attribution.PARTS:
            iv = attribution.part_intervals(t, part, group=group)
            got = (iv.group_by(group).agg((pl.col("end_ns") - pl.col("start_ns")).sum()
                                          .alias("s")))
            want = ref.filter(pl.col(part) > 0).select(*group, pl.col(part).alias("s"))
            assert_frame_equal(got, want, check_row_order=False, check_dtypes=False)
        # ... and are the union per part of the segments (the definition they replaced)
        t = _fresh(tl)
        acts = attribution.busy_activities(t)
        sets = {"_win": acts.group_by(group).agg(pl.col("start_ns").min(),
                                                 pl.col("end_ns").max())}
        for label in ("compute", "communication", "memory"):
            sets[label] = acts.filter(pl.col("category") == label).select(
                *group, "start_ns", "end_ns")
        sets.update(attribution._host_sets(t, acts, group))
        seg = (intervals.segments(sets, by=group).filter(pl.col("_win") > 0)
               .select(*group, "start_ns", "end_ns", attribution.part_expr().alias("_part")))
        ref_parts = intervals.union(seg, by=[*group, "_part"]).select(
            *group, "_part", "start_ns", "end_ns")
        parts = attribution.default_segments(_fresh(tl), group)["parts"]
        assert parts.schema["_part"] == pl.Enum(attribution.PARTS)
        assert_frame_equal(parts.with_columns(pl.col("_part").cast(pl.String)), ref_parts)
        free = attribution.default_segments(_fresh(tl), group)["free"]
        assert all(free.schema[c] == pl.Int32 for c in ("launch", "warmup", "host_sync"))
        assert_frame_equal(free, _ref_free(_fresh(tl), group).cast(
            {c: pl.Int32 for c in ("launch", "warmup", "host_sync")}))


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_shared_segments_on_sample_scenarios(name: str) -> None:
    _check(samplegen.scenario_timeline(name))


SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_shared_segments_on_shared_traces(path: Path) -> None:
    _check(traceparse.load(path))
