"""The replay engine shares its preparation between what-ifs and solves every run of every
process at once (issue 16). The engine before (``tests/ref_replay.py``, kept as the
reference definition) and the savings computed from it must give the same frames, to the
row and dtype, on every sample scenario and shared trace, for every combination of
what-ifs and with changed durations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceparse
from tests import ref_replay
from tests.conftest import ids, shared_files
from traceparse.analyses import launches, replay, savings
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

OPTIONS: list[dict[str, Any]] = [
    {}, {"no_launch_overhead": True}, {"overlap_comm": True},
    {"no_launch_overhead": True, "overlap_comm": True}]


#: The two what-ifs the reference engine knows (the fixes are mechanisms on top of it,
#: tests/test_fix_mechanisms.py).
REF_CHANGES = {"no_launch_overhead": "launch_overhead_ns", "overlap_comm": "communication_ns"}


def ref_savings(tl: Timeline) -> pl.DataFrame:
    """savings before: two whole replays (reference engine), windows of their frames."""
    from traceparse.analyses.attribution import breakdown

    schema = {"change": pl.String, "rank": pl.Int32, "measured_ns": pl.Int64,
              "predicted_ns": pl.Int64, "saving_ns": pl.Int64, "bound_ns": pl.Int64,
              "within_bound": pl.Boolean}
    if tl.gpu.filter(pl.col("kind").cast(pl.String) != "sync").height == 0:
        return pl.DataFrame(schema=schema)
    parts = breakdown(tl).group_by("rank").agg(
        *(pl.col(p).sum() for p in ("launch_overhead_ns", "communication_ns")))
    out = []
    for change, part in REF_CHANGES.items():
        w = savings.windows(ref_replay.replay(
            tl, no_launch_overhead=change == "no_launch_overhead",
            overlap_comm=change == "overlap_comm"))
        out.append(w.join(parts.select("rank", pl.col(part).alias("bound_ns")), on="rank",
                          how="left")
                   .with_columns(pl.lit(change).alias("change"),
                                 (pl.col("measured_ns") - pl.col("predicted_ns"))
                                 .alias("saving_ns")))
    res = pl.concat(out, how="vertical_relaxed").with_columns(
        pl.col("bound_ns").fill_null(0),
        (pl.col("measured_ns") - pl.col("predicted_ns") <= pl.col("bound_ns").fill_null(0))
        .alias("within_bound"))
    return res.select(list(schema)).cast(schema).sort("change", "rank")  # type: ignore[arg-type]


def _fresh(tl: Timeline) -> Timeline:
    return Timeline(**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__})


def _halved(tl: Timeline) -> pl.Series:
    """Every other activity twice as fast (a ``--speedup``-like duration change)."""
    d = pl.col("dur_ns")
    return tl.gpu.select(pl.when(pl.int_range(pl.len()) % 2 == 0).then(d // 2).otherwise(d)
                         ).to_series()


def _check(tl: Timeline) -> None:
    new = _fresh(tl)  # one timeline for every new call: they share its preparation
    for kw in [*OPTIONS, {"durations": _halved(tl)},
               {"durations": _halved(tl), "no_launch_overhead": True, "overlap_comm": True}]:
        want = ref_replay.replay(_fresh(tl), **kw)
        try:
            assert_frame_equal(replay.replay(new, **kw), want)
        except AssertionError as e:
            raise AssertionError(f"{sorted(kw)}: {e}") from None
    # overlap_comm is the plain replay; the no_launch_overhead row is the CUDA-graph
    # mechanism on top of it (issuing time of each step's region, tests/test_fix_mechanisms)
    got = savings.savings(new).filter(pl.col("change") == "overlap_comm")
    assert set(got["fix"]) <= {"overlap-comm"}  # the whatif --fix that replays it
    # one headline row per change (its rule: tests/test_fix_mechanisms.py)
    assert got.height == 0 or got["bounds_job"].sum() == 1
    got = got.drop("note", "fix", "window_unprofiled_ns", "saving_unprofiled_ns", "bounds_job")
    want = ref_savings(_fresh(tl)).filter(pl.col("change") == "overlap_comm")
    if not (tl.gpu["category"] == "communication").any():
        # nothing to overlap: no replay and no row (mechanisms.replay_args)
        assert got.height == 0 and (want["saving_ns"] == 0).all(), want
        return
    assert_frame_equal(got, want)


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_same_replay_on_sample_scenarios(name: str) -> None:
    _check(samplegen.scenario_timeline(name))


SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_same_replay_on_shared_traces(path: Path) -> None:
    _check(traceparse.load(path))


def test_runs_of_one_stream_across_syncs() -> None:
    # two streams, a blocking sync between their kernels: the state of each stream is
    # carried over the epoch, and the sync returns after the replayed end of the work
    tl = samplegen.scenario_timeline("sync_bound")
    for kw in OPTIONS:
        assert_frame_equal(replay.replay(_fresh(tl), **kw),
                           ref_replay.replay(_fresh(tl), **kw))


def ref_graph_recoverable(tl: Timeline, *, graph_gap_ns: int = 1000) -> pl.DataFrame:
    """graph_recoverable before (polars windows over the multi-key sorted launch table)."""
    from traceparse.analyses.intervals import sort_within
    from traceparse.analyses.launches import launch_table

    grp = ["rank", "device_id", "stream_id"]
    t = sort_within(launch_table(tl), grp, "start_ns")
    t = t.with_columns(prev_end=pl.col("end_ns").shift(1).over(grp))
    t = t.with_columns(prev_end=pl.col("prev_end").cum_max().over(grp))
    gap = (pl.col("start_ns") - pl.col("prev_end")).clip(lower_bound=0)
    bound = pl.col("prev_end").is_not_null() & (pl.col("api_start_ns") >= pl.col("prev_end"))
    in_graph = pl.col("graph_id").is_not_null() | pl.col("api_name").str.contains("GraphLaunch")
    latency = pl.min_horizontal(gap, (pl.col("start_ns") - pl.col("api_start_ns")).clip(0))
    t = t.with_columns(_bound=bound, _gap=pl.when(bound).then(gap).otherwise(0),
                       _rec=pl.when(bound & ~in_graph)
                       .then((latency - graph_gap_ns).clip(lower_bound=0)).otherwise(0))
    return (t.group_by(grp, maintain_order=True)
            .agg(pl.len().cast(pl.Int64).alias("kernels"),
                 pl.col("_bound").sum().cast(pl.Int64).alias("launch_bound_kernels"),
                 pl.col("_gap").sum().cast(pl.Int64).alias("launch_bound_gap_ns"),
                 pl.col("_rec").sum().cast(pl.Int64).alias("graph_recoverable_ns"))
            .sort(grp))


def _check_graphs(tl: Timeline) -> None:
    for gap in (1000, 1):
        assert_frame_equal(launches.graph_recoverable(_fresh(tl), graph_gap_ns=gap),
                           ref_graph_recoverable(_fresh(tl), graph_gap_ns=gap))


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_same_graph_estimate_on_sample_scenarios(name: str) -> None:
    _check_graphs(samplegen.scenario_timeline(name))


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_same_graph_estimate_on_shared_traces(path: Path) -> None:
    _check_graphs(traceparse.load(path))


def test_ops_inside_a_removed_interval_keep_their_cost_beyond_it() -> None:
    """The profiler's cost of ops that began inside host time a fix removes: that much is
    gone with the interval; what the estimate puts beyond the interval's length stays."""
    import numpy as np

    from traceparse.analyses.replay_removed import _rank_union, outside_removed

    times = np.array([10, 20, 30, 40], np.int64)

    def run(s: int, e: int, costs: list[float]) -> tuple[list[int], list[float]]:
        lo = _rank_union(pl.DataFrame({"rank": [0], "start_ns": [s], "end_ns": [e]}))
        t, c = outside_removed(times, np.array(costs), lo, 0)
        return t.tolist(), c.tolist()

    # [15,35) holds the ops at 20 and 30 (5 + 5 <= 20): both gone with it
    assert run(15, 35, [5, 5, 5, 5]) == ([10, 40], [5.0, 5.0])
    # [18,32): 10 + 10 = 20 in 14 ns, 6 left, shared in proportion
    assert run(18, 32, [5, 10, 10, 5]) == ([10, 20, 30, 40], [5.0, 3.0, 3.0, 5.0])
    # another rank's interval removes nothing here
    lo1 = _rank_union(pl.DataFrame({"rank": [1], "start_ns": [0], "end_ns": [100]}))
    assert outside_removed(times, np.ones(4), lo1, 0)[0].tolist() == times.tolist()
