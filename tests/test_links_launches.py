"""launch_join, enclosing ranges, launch decomposition and kern_exec_sum (hand-made + oracle)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ORACLE, ids, shared_files
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse.analyses.launches import (
    graph_recoverable,
    kern_exec_sum,
    launch_summary,
    launch_table,
)
from traceparse.cli import main
from traceparse.links import enclosing_ranges, kernel_ranges, launch_join


def test_launch_join_per_process_and_graph_launch() -> None:
    # corr 5 exists in pid 1 and pid 2: each kernel must join its own process's call.
    # corr 9 is a cudaGraphLaunch with two kernels; corr 11 has no call.
    tl = timeline(
        gpu=gpu([{"name": "a", "start_ns": 100, "end_ns": 110, "correlation_id": 5},
                 {"name": "b", "start_ns": 100, "end_ns": 120, "correlation_id": 5,
                  "process_id": 2},
                 {"name": "g1", "start_ns": 200, "end_ns": 210, "correlation_id": 9},
                 {"name": "g2", "start_ns": 210, "end_ns": 230, "correlation_id": 9},
                 {"name": "x", "start_ns": 300, "end_ns": 301, "correlation_id": 11}]),
        api=api([{"start_ns": 40, "end_ns": 60, "correlation_id": 5},
                 {"start_ns": 70, "end_ns": 80, "correlation_id": 5, "process_id": 2,
                  "thread_id": 3},
                 {"start_ns": 150, "end_ns": 190, "correlation_id": 9,
                  "name": "cudaGraphLaunch_v10000"}]))
    j = launch_join(tl)
    assert j.height == 5 and j["name"].cast(pl.String).to_list() == ["a", "b", "g1", "g2", "x"]
    assert j["api_start_ns"].to_list() == [40, 70, 150, 150, None]
    assert j["api_thread_id"].to_list() == [2, 3, 2, 2, None]


def test_enclosing_ranges_innermost_and_threads() -> None:
    # thread 2: A [0,100) > B [10,50), then C [60,90) inside A; thread 3: D [0,100).
    tl = timeline(
        ranges=ranges([{"name": "A", "start_ns": 0, "end_ns": 100},
                       {"name": "B", "start_ns": 10, "end_ns": 50},
                       {"name": "C", "start_ns": 60, "end_ns": 90},
                       {"name": "D", "start_ns": 0, "end_ns": 100, "thread_id": 3}]),
        api=api([{"start_ns": t, "end_ns": t + 1, "correlation_id": i, "thread_id": th}
                 for i, (t, th) in enumerate([(20, 2), (55, 2), (60, 2), (100, 2), (30, 3),
                                              (10, 2)])]))
    e = enclosing_ranges(tl)
    # 20 -> B (level 2); 55 -> A (B closed, C not open); 60 -> C (starts count as inside);
    # 100 -> none (half-open); thread 3 -> D; 10 -> B (a child starting with the call)
    assert e["range_name"].cast(pl.String).to_list() == ["B", "A", "C", None, "D", "B"]
    assert e["range_level"].to_list() == [2, 1, 2, None, 1, 2]


def test_kernel_ranges_equal_starts_parent_first() -> None:
    # P [0,100) and Q [0,40) start together: Q (shorter) is the child. A kernel launched
    # at 5 belongs to Q, one launched at 50 to P.
    tl = timeline(
        ranges=ranges([{"name": "Q", "start_ns": 0, "end_ns": 40},
                       {"name": "P", "start_ns": 0, "end_ns": 100}]),
        api=api([{"start_ns": 5, "end_ns": 6, "correlation_id": 1},
                 {"start_ns": 50, "end_ns": 51, "correlation_id": 2}]),
        gpu=gpu([{"name": "k1", "start_ns": 10, "end_ns": 20, "correlation_id": 1},
                 {"name": "k2", "start_ns": 60, "end_ns": 70, "correlation_id": 2}]))
    assert kernel_ranges(tl)["range_name"].cast(pl.String).to_list() == ["Q", "P"]


def test_start_end_ranges_are_process_wide() -> None:
    # pid 1: start/end "req" [30,200) opened on thread 9; push/pop on thread 2: A [0,100)
    # > B [10,50). pid 2, thread 2: nothing. Launches (pid, thread, t):
    #   (1,2,20): B (thread-local, started 10; req not open yet) level 2
    #   (1,2,40): req (opened 30 > B's 10: started last) level 2 (A, B) + 1 (req) = 3
    #   (1,2,55): req (B closed; req 30 > A 0) level 1 + 1 = 2
    #   (1,5,60): req, thread 5 has no ranges of its own -> level 1
    #   (1,2,100): req (A closed, half-open) level 1
    #   (2,2,60): None (req belongs to process 1 only)
    #   (1,9,200): None (req half-open)
    tl = timeline(
        ranges=ranges([{"name": "A", "start_ns": 0, "end_ns": 100},
                       {"name": "B", "start_ns": 10, "end_ns": 50},
                       {"name": "req", "start_ns": 30, "end_ns": 200, "thread_id": 9,
                        "kind": "nvtx_start_end"}]),
        api=api([{"start_ns": t, "end_ns": t + 1, "correlation_id": i, "process_id": pid,
                  "thread_id": th}
                 for i, (pid, th, t) in enumerate([(1, 2, 20), (1, 2, 40), (1, 2, 55),
                                                   (1, 5, 60), (1, 2, 100), (2, 2, 60),
                                                   (1, 9, 200)])]),
        gpu=gpu([{"name": f"k{i}", "start_ns": 300 + 10 * i, "end_ns": 305 + 10 * i,
                  "correlation_id": i, "process_id": pid}
                 for i, pid in enumerate([1, 1, 1, 1, 1, 2, 1])]))
    want = ["B", "req", "req", "req", "req", None, None]
    e = enclosing_ranges(tl)
    assert e["range_name"].cast(pl.String).to_list() == want
    assert e["range_level"].to_list() == [2, 3, 2, 1, 1, None, None]
    k = kernel_ranges(tl)
    assert k["range_name"].cast(pl.String).to_list() == want
    # push/pop only: the thread-local answers are unchanged by the start/end range
    pp = enclosing_ranges(tl, kinds=("nvtx_push_pop",))
    assert pp["range_name"].cast(pl.String).to_list() == ["B", "B", "A", None, None, None,
                                                           None]


def test_start_end_crossing_and_ties() -> None:
    # process-wide ranges on different threads that cross (not a stack):
    # X [0,100) thread 3, Y [50,150) thread 4, Z [50,80) thread 3 (starts with Y, shorter:
    # the child). Queries on thread 7: 10 -> X; 60 -> Z (last started; Z before Y at the
    # tie because it ends sooner); 90 -> Y (Z closed; Y 50 > X 0); 120 -> Y (X closed);
    # 150 -> None. A push/pop P [50,80) on thread 7 ties Z exactly: the thread-local wins.
    se = [{"name": "X", "start_ns": 0, "end_ns": 100, "thread_id": 3},
          {"name": "Y", "start_ns": 50, "end_ns": 150, "thread_id": 4},
          {"name": "Z", "start_ns": 50, "end_ns": 80, "thread_id": 3}]
    calls = api([{"start_ns": t, "end_ns": t + 1, "correlation_id": i, "thread_id": 7}
                 for i, t in enumerate([10, 60, 90, 120, 150])])
    tl = timeline(ranges=ranges([{**r, "kind": "nvtx_start_end"} for r in se]), api=calls)
    e = enclosing_ranges(tl)
    assert e["range_name"].cast(pl.String).to_list() == ["X", "Z", "Y", "Y", None]
    # open start/end ranges: 10 -> 1; 60 -> 3; 90 -> 2; 120 -> 1
    assert e["range_level"].to_list() == [1, 3, 2, 1, None]
    tl2 = timeline(ranges=ranges([{**r, "kind": "nvtx_start_end"} for r in se]
                                 + [{"name": "P", "start_ns": 50, "end_ns": 80,
                                     "thread_id": 7}]), api=calls)
    assert enclosing_ranges(tl2)["range_name"].cast(pl.String).to_list() == [
        "X", "P", "Y", "Y", None]


def test_start_end_matches_brute_force() -> None:
    # random crossing start/end ranges in 2 processes; every answer must be the range that
    # started last among those containing t (ties: shorter), computed here by a plain loop
    rng = np.random.default_rng(7)
    rows = []
    for i in range(300):
        s = int(rng.integers(0, 5000))
        rows.append({"name": f"r{i}", "start_ns": s, "end_ns": s + int(rng.integers(1, 800)),
                     "process_id": int(rng.integers(1, 3)), "thread_id": int(rng.integers(1, 4)),
                     "kind": "nvtx_start_end"})
    qs = [(int(rng.integers(1, 4)), int(rng.integers(-10, 5900))) for _ in range(500)]
    tl = timeline(ranges=ranges(rows), api=api([
        {"start_ns": t, "end_ns": t + 1, "correlation_id": i, "process_id": pid,
         "thread_id": 1} for i, (pid, t) in enumerate(qs)]))
    got = enclosing_ranges(tl)
    want, lvl = [], []
    for pid, t in qs:
        inside = [r for r in rows if r["process_id"] == pid and r["start_ns"] <= t < r["end_ns"]]
        best = max(inside, key=lambda r: (r["start_ns"], -r["end_ns"]), default=None)
        want.append(best["name"] if best else None)
        lvl.append(len(inside) if inside else None)
    assert got["range_name"].cast(pl.String).to_list() == want
    assert got["range_level"].to_list() == lvl
    assert sum(w is not None for w in want) > 200  # the check exercises real answers


def _two_kernels():
    # API 0..10 -> kernel 15..25 (queue 5); API 30..40 -> kernel 38..48 (queue -2);
    # API 50..60 -> kernel 52..55 (finishes before the call returns: T = 60 - 50 = 10)
    return timeline(
        api=api([{"start_ns": 0, "end_ns": 10, "correlation_id": 1},
                 {"start_ns": 30, "end_ns": 40, "correlation_id": 2},
                 {"start_ns": 50, "end_ns": 60, "correlation_id": 3}]),
        gpu=gpu([{"name": "k", "start_ns": 15, "end_ns": 25, "correlation_id": 1},
                 {"name": "k", "start_ns": 38, "end_ns": 48, "correlation_id": 2},
                 {"name": "k", "start_ns": 52, "end_ns": 55, "correlation_id": 3}]))


def test_launch_table_and_kern_exec_sum() -> None:
    tl = _two_kernels()
    t = launch_table(tl)
    assert t["launch_ns"].to_list() == [10, 10, 10]
    assert t["queue_ns"].to_list() == [5, -2, -8]
    assert t["total_ns"].to_list() == [25, 18, 10]
    r = kern_exec_sum(tl).row(0, named=True)
    assert (r["PID"], r["TID"], r["DevId"], r["Count"], r["QCount"]) == (1, 2, 0, 3, 1)
    # T = [25, 18, 10]: avg 53/3 = 17.67 -> 17.7; median 18; sample std:
    # deviations 7.33, 0.33, -7.67 -> (53.78 + 0.11 + 58.78) / 2 = 56.33 -> 7.5
    assert (r["TAvg (ns)"], r["TMed (ns)"], r["TMin (ns)"], r["TMax (ns)"]) == (17.7, 18.0, 10, 25)
    assert r["TStdDev (ns)"] == 7.5
    # Q only over positive values: one value 5; K = [10, 10, 3]: avg 7.7
    assert (r["QAvg (ns)"], r["QMin (ns)"], r["QStdDev (ns)"]) == (5.0, 5, 0.0)
    assert r["KAvg (ns)"] == 7.7 and r["AStdDev (ns)"] == 0.0
    assert r["API Name"] == "cudaLaunchKernel"


def test_launch_summary_short_kernels() -> None:
    s = launch_summary(_two_kernels())
    row = s.filter(pl.col("metric") == "kernels_shorter_than_launch").row(0, named=True)
    # kernel durations 10, 10, 3 vs launch 10: only the 3 ns kernel is shorter
    assert row["count"] == 1 and row["mean"] == pytest.approx(1 / 3)
    q = s.filter(pl.col("metric") == "queue_ns").row(0, named=True)
    assert q["count"] == 3 and q["p50"] == -2.0 and q["sum"] == -5.0


def test_launch_summary_keeps_graph_nodes_apart() -> None:
    """Two kernels with calls of their own (API 0..10 -> 15..25, API 30..40 -> 38..48) plus
    two graph launches: API 100..400 replaying g1 410..412, g2 412..414, g3 414..416, and
    API 500..600 replaying g1 610..612, g2 612..614. A graph's one call serves every node:
    its 300 ns is no node's launch cost, so the per-kernel rows and the short-kernel share
    count only the two kernels with calls of their own; the graph row counts 2 calls of
    300 and 100 ns (p50 200) replaying 5 kernels, 2.5 per launch."""
    tl = timeline(
        api=api([{"start_ns": 0, "end_ns": 10, "correlation_id": 1},
                 {"start_ns": 30, "end_ns": 40, "correlation_id": 2},
                 {"start_ns": 100, "end_ns": 400, "correlation_id": 3,
                  "name": "cudaGraphLaunch_v10000"},
                 {"start_ns": 500, "end_ns": 600, "correlation_id": 4,
                  "name": "cudaGraphLaunch_v10000"}]),
        gpu=gpu([{"name": "k", "start_ns": 15, "end_ns": 25, "correlation_id": 1},
                 {"name": "k", "start_ns": 38, "end_ns": 48, "correlation_id": 2}]
                + [{"name": f"g{i}", "start_ns": s, "end_ns": s + 2, "correlation_id": c}
                   for c, starts in ((3, (410, 412, 414)), (4, (610, 612)))
                   for i, s in enumerate(starts, 1)]))
    s = {r["metric"]: r for r in launch_summary(tl).iter_rows(named=True)}
    assert s["launch_ns"]["count"] == 2 and s["launch_ns"]["max"] == 10
    assert s["queue_ns"]["sum"] == 5 - 2
    assert s["kernels_shorter_than_launch"]["count"] == 0
    assert s["kernels_shorter_than_launch"]["mean"] == 0.0
    g = s["graph_launches"]
    assert (g["count"], g["sum"], g["mean"]) == (2, 5.0, 2.5)
    assert (g["min"], g["max"], g["p50"]) == (100.0, 300.0, 200.0)
    # without graph launches there is no graph row
    assert "graph_launches" not in launch_summary(_two_kernels())["metric"].to_list()


def test_graph_recoverable_estimate() -> None:
    # k1 5..15 (API 0..4); k2 40..50 (API 30..38): API began at 30 >= 15 -> launch-bound,
    # gap 25, of which launch latency min(25, 40 - 30) = 10 -> recoverable 10 - 1 = 9;
    # k3 50..60 (API 12..20): began before 50 -> not bound.
    tl = timeline(
        api=api([{"start_ns": 0, "end_ns": 4, "correlation_id": 1},
                 {"start_ns": 30, "end_ns": 38, "correlation_id": 2},
                 {"start_ns": 12, "end_ns": 20, "correlation_id": 3}]),
        gpu=gpu([{"name": "k1", "start_ns": 5, "end_ns": 15, "correlation_id": 1},
                 {"name": "k2", "start_ns": 40, "end_ns": 50, "correlation_id": 2},
                 {"name": "k3", "start_ns": 50, "end_ns": 60, "correlation_id": 3}]))
    r = graph_recoverable(tl, graph_gap_ns=1).row(0, named=True)
    assert (r["kernels"], r["launch_bound_kernels"], r["launch_bound_gap_ns"],
            r["graph_recoverable_ns"]) == (3, 1, 25, 9)


KES = [p for p in shared_files("nsys", "*.sqlite")
       if (ORACLE / "nsys" / p.stem / "cuda_kern_exec_sum.csv").is_file()]
KEY = ["PID", "TID", "DevId", "API Name", "Kernel Name"]


@pytest.mark.shared
@pytest.mark.parametrize("path", KES, ids=ids(KES))
def test_kern_exec_sum_matches_nsys_oracle(path) -> None:
    want = pl.read_csv(ORACLE / "nsys" / path.stem / "cuda_kern_exec_sum.csv",
                       infer_schema_length=None)
    got = kern_exec_sum(traceparse.load(path))
    assert got.height == want.height
    a, b = got.sort(KEY), want.sort(KEY)
    for col in want.columns:
        if col in KEY or col in ("Count", "QCount") or "Min" in col or "Max" in col:
            assert a[col].cast(pl.String).to_list() == b[col].cast(pl.String).to_list(), col
        else:  # printed with one decimal
            diff = (a[col] - b[col].cast(pl.Float64)).abs().fill_null(0).max()
            assert a[col].is_null().to_list() == b[col].is_null().to_list(), col
            assert diff is not None and diff <= 0.05 + 1e-6, col  # type: ignore[operator]
    assert got["TAvg (ns)"].is_sorted(descending=True)


@pytest.mark.shared
@pytest.mark.parametrize("path", KES[:3], ids=ids(KES[:3]))
def test_cli_kern_exec_sum_csv_is_the_oracle_text(path) -> None:
    res = CliRunner().invoke(main, ["launches", str(path), "--report", "kern_exec_sum",
                                    "--format", "csv"])
    assert res.exit_code == 0, res.output
    want = (ORACLE / "nsys" / path.stem / "cuda_kern_exec_sum.csv").read_text()
    assert sorted(res.output.splitlines()) == sorted(want.splitlines())
