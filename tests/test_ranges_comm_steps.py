"""nvtx_sum (hand-made + oracle), gpu_projection, comm exposure/bandwidth/skew, steps."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import ORACLE, ids, shared_files
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse.analyses.comm import collective_skew, collectives, comm_summary, straggler_summary
from traceparse.analyses.ranges import NO_RANGE, gpu_projection, nvtx_sum
from traceparse.analyses.steps import step_summary, step_table


def test_nvtx_sum_hand_made() -> None:
    # push/pop "step" 0..10 and 20..50; MPI domain "MPI_Send" 60..70 (start/end style)
    tl = timeline(ranges=ranges([
        {"name": "step", "start_ns": 0, "end_ns": 10},
        {"name": "step", "start_ns": 20, "end_ns": 50},
        {"name": "MPI_Send", "domain": "MPI", "start_ns": 60, "end_ns": 70,
         "kind": "nvtx_start_end"},
        {"name": "open", "start_ns": 80, "end_ns": None}]))
    s = nvtx_sum(tl)
    assert s["Range"].to_list() == ["step", "MPI:MPI_Send"]
    assert s["Style"].to_list() == ["PushPop", "StartEnd"]
    r = s.row(0, named=True)
    # total 40 of 50 -> 80.0 %; sample std of [10, 30] = sqrt(2 * 10^2 / 1) = 14.14 -> 14.1
    assert (r["Time (%)"], r["Total Time (ns)"], r["Instances"], r["Avg (ns)"],
            r["StdDev (ns)"]) == pytest.approx((80.0, 40, 2, 20.0, 14.1))


def test_gpu_projection_hand_made() -> None:
    # fwd [0,100) > attn [10,40); kernels 30 ns launched at 20 (attn), 20 ns at 50 (fwd),
    # 50 ns at 200 (no range) -> attn 0.3, (no range) 0.5, fwd 0.2
    tl = timeline(
        ranges=ranges([{"name": "fwd", "start_ns": 0, "end_ns": 100},
                       {"name": "attn", "start_ns": 10, "end_ns": 40}]),
        api=api([{"start_ns": t, "end_ns": t + 2, "correlation_id": i}
                 for i, t in enumerate([20, 50, 200])]),
        gpu=gpu([{"name": "k", "start_ns": 300, "end_ns": 330, "correlation_id": 0},
                 {"name": "k", "start_ns": 330, "end_ns": 350, "correlation_id": 1},
                 {"name": "k", "start_ns": 350, "end_ns": 400, "correlation_id": 2}]))
    p = gpu_projection(tl)
    assert p["range"].to_list() == [NO_RANGE, "attn", "fwd"]
    assert p["gpu_ns"].to_list() == [50, 30, 20]
    assert p["share"].to_list() == pytest.approx([0.5, 0.3, 0.2])


NVTX = [p for p in shared_files("nsys", "*.sqlite")
        if (ORACLE / "nsys" / p.stem / "nvtx_sum.csv").is_file()]


@pytest.mark.shared
@pytest.mark.parametrize("path", NVTX, ids=ids(NVTX))
def test_nvtx_sum_matches_nsys_oracle(path: Path) -> None:
    want = pl.read_csv(ORACLE / "nsys" / path.stem / "nvtx_sum.csv", infer_schema_length=None)
    got = nvtx_sum(traceparse.load(path))
    key = ["Style", "Range", "Total Time (ns)"]
    assert got.height == want.height
    a, b = got.sort(key), want.sort(key)
    for col in want.columns:
        if col in ("Time (%)", "Avg (ns)", "Med (ns)", "StdDev (ns)"):
            assert (a[col] - b[col].cast(pl.Float64)).abs().max() <= 0.05 + 1e-6, col
        else:
            assert a[col].cast(pl.String).to_list() == b[col].cast(pl.String).to_list(), col


def _start_end_files() -> list[Path]:
    out = []
    for p in shared_files("nsys", "*.sqlite"):
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            n = con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType=60").fetchone()[0]
        except sqlite3.OperationalError:  # no NVTX_EVENTS table
            n = 0
        finally:
            con.close()
        if n:
            out.append(p)
    return out


START_END = _start_end_files()


@pytest.mark.shared
@pytest.mark.parametrize("path", START_END, ids=ids(START_END))
def test_gpu_projection_start_end_process_wide(path: Path) -> None:
    # independent count in SQL: kernels whose runtime launch call (same process, same
    # correlationId) starts inside a start/end range (eventType 60) of the same process,
    # on any thread; their time must be what the projection gives start/end ranges, and
    # the projection must still sum to the total kernel time
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n_in, ns_in = con.execute("""
        SELECT COUNT(*), COALESCE(SUM(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL k
        WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN NVTX_EVENTS n
                      ON n.eventType = 60 AND (n.globalTid >> 24) = (r.globalTid >> 24)
                      AND n.start <= r.start AND r.start < n.end
                      WHERE r.correlationId = k.correlationId
                      AND (r.globalTid >> 24) = (k.globalPid >> 24))""").fetchone()
    n_all, ns_all = con.execute(
        "SELECT COUNT(*), SUM(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    p = gpu_projection(traceparse.load(path), kinds=("nvtx_start_end",))
    assert (p["kernels"].sum(), p["gpu_ns"].sum()) == (n_all, ns_all)
    se = p.filter(pl.col("range_kind") == "nvtx_start_end")
    assert (se["kernels"].sum(), se["gpu_ns"].sum()) == (n_in, ns_in)


def test_collectives_exposure_and_bandwidth() -> None:
    # compute [0,100) on device 0; allreduce [60,160) of 25 floats, group 4 -> overlap 40,
    # exposed 60, bytes 100, algbw 100 B / 100 ns = 1.0 GB/s, busbw 1.0 * 2*3/4 = 1.5.
    # allgather kernel by name only on device 1 (no compute there): exposed = all 50.
    tl = timeline(gpu=gpu([
        {"name": "gemm", "start_ns": 0, "end_ns": 100},
        {"name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "start_ns": 60, "end_ns": 160,
         "coll_name": "allreduce", "coll_in_nelems": 25, "coll_out_nelems": 25,
         "coll_dtype": "Float", "coll_group_size": 4, "stream_id": 9},
        {"name": "ncclKernel_AllGather_RING_LL_Sum_int8_t(x)", "start_ns": 0, "end_ns": 50,
         "device_id": 1}]))
    c = collectives(tl)
    assert c["collective"].to_list() == ["allreduce", "allgather"]
    assert c["overlapped_ns"].to_list() == [40, 0]
    assert c["exposed_ns"].to_list() == [60, 50]
    assert c["bytes"].to_list() == [100, None]
    assert c["algbw_gbps"][0] == pytest.approx(1.0)
    assert c["busbw_gbps"][0] == pytest.approx(1.5)
    s = comm_summary(tl).row(0, named=True)
    assert (s["collective"], s["time_ns"], s["exposed_pct"]) == ("allreduce", 100, 60.0)


def test_skew_and_straggler_hand_made() -> None:
    # allreduce #0 starts at 100 (rank 0), 130 (rank 1), 110 (rank 2): skew 30, straggler 1,
    # wait (130-100) + (130-110) = 50. #1 starts at 300, 305, 340: skew 40, straggler 2.
    rows = []
    for rank, starts in ((0, (100, 300)), (1, (130, 305)), (2, (110, 340))):
        rows += [{"rank": rank, "name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)",
                  "start_ns": s, "end_ns": 400 + s // 100} for s in starts]
    s = collective_skew(timeline(gpu=gpu(rows)))
    assert s["seq"].to_list() == [1, 0]
    assert s["skew_ns"].to_list() == [40, 30]
    assert s["straggler_rank"].to_list() == [2, 1]
    assert s["wait_ns"].to_list() == [(340 - 300) + (340 - 305), 50]
    st = straggler_summary(timeline(gpu=gpu(rows)))
    assert st["straggler_rank"].to_list() == [2, 1] and st["calls"].to_list() == [1, 1]
    # what the others waited for each straggler: rank 2 (340-300) + (340-305) = 75,
    # rank 1 (130-100) + (130-110) = 50
    assert st["wait_ns"].to_list() == [75, 50]


DLRM = shared_files("torch", "param__dlrm_8rank__worker*.json")


def _first_nccl_start(path: Path, prefix: str) -> int:
    """Independent of the parser: the earliest ts (us) of a kernel named ``prefix``..."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    ts = [e["ts"] for e in doc["traceEvents"]
          if e.get("cat") == "kernel" and str(e.get("name", "")).startswith(prefix)]
    return round(min(ts) * 1000)


@pytest.mark.shared
def test_dlrm_eight_ranks_skew_and_straggler(tmp_path: Path) -> None:
    assert len(DLRM) == 8
    for f in DLRM:
        (tmp_path / f.name).symlink_to(f)
    tl = traceparse.load(tmp_path)
    skew = collective_skew(tl)
    assert set(skew["participants"].to_list()) == {8}
    first = skew.filter((pl.col("collective") == "alltoall") & (pl.col("seq") == 0))
    row = first.row(0, named=True)
    starts = {int(f.name.split("worker")[1].split("_")[0]):
              _first_nccl_start(f, "ncclKernel_SendRecv") for f in DLRM}
    late = max(starts, key=starts.__getitem__)
    assert row["straggler_rank"] == late
    assert row["skew_ns"] == max(starts.values()) - min(starts.values())
    # the others wait inside the kernel for the straggler, so the kernels END together:
    assert row["end_skew_ns"] * 100 < row["skew_ns"]
    steps = step_table(tl)
    assert steps.height == 8 and steps["step"].unique().to_list() == ["ProfilerStep#10"]
    parts = ["compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns", "warmup_ns",
             "host_sync_ns", "idle_ns"]
    assert (steps.select(pl.sum_horizontal(parts).alias("s"))["s"] == steps["wall_ns"]).all()
    assert (steps["gpu_busy_ns"] <= steps["wall_ns"]).all()


def test_too_few_steps_name_no_outlier() -> None:
    # walls 100, 103, 100.3 (x 1000 ns): median 100,300, deviations 300, 2,700, 0 -> MAD 300;
    # the modified z-score of the 103,000 step is 0.6745 * 2,700 / 300 = 6.07 > 3.5, so
    # without the minimum it is an "outlier" 2.7% above the median, judged by one other
    # step's distance. Three (and four) steps are too few: null, and no count.
    def walls(ws: list[int]) -> pl.DataFrame:
        t, rows = 0, []
        for i, w in enumerate(ws):
            rows.append({"name": f"ProfilerStep#{i}", "kind": "profiler_step",
                         "start_ns": t, "end_ns": t + w})
            t += w
        return step_table(timeline(ranges=ranges(rows), gpu=gpu(
            [{"name": "k", "start_ns": 0, "end_ns": 10}])), attribution=False)

    three = walls([100_000, 103_000, 100_300])
    assert three["outlier"].to_list() == [None, None, None]
    assert step_summary(three).row(1, named=True)["outliers"] is None
    assert walls([100_000, 103_000, 100_300, 100_100])["outlier"].null_count() == 4
    # the same spread with two more steps: median 100,200, deviations 200, 2,800, 100, 100,
    # 0 -> MAD 100; z of 103,000 = 0.6745 * 2,800 / 100 = 18.9, but the step is only 2.8%
    # above the median, under MIN_EFFECT_PCT (5%): jitter, not an outlier
    jitter = walls([100_000, 103_000, 100_300, 100_100, 100_200])
    assert jitter["outlier"].to_list() == [False] * 5
    assert step_summary(jitter).row(1, named=True)["outliers"] == 0
    # limit max(100,200 + 5.19 * 100, 100,200 * 1.05 = 105,210): 105,200 is not above
    # it, 105,300 is
    assert walls([100_000, 105_200, 100_300, 100_100, 100_200])["outlier"].to_list() == [
        False] * 5
    five = walls([100_000, 105_300, 100_300, 100_100, 100_200])
    assert five["outlier"].to_list() == [False, True, False, False, False]
    # (no launch call: each period is its wall) the count is on the period row
    assert step_summary(five).row(1, named=True)["outliers"] == 1
    # the warm-up screen still reads 3 steps (its own rule needs warm-up evidence too)
    tl = timeline(ranges=ranges([{"name": f"ProfilerStep#{i}", "kind": "profiler_step",
                                  "start_ns": s, "end_ns": e} for i, (s, e) in
                                 enumerate([(0, 500), (500, 600), (600, 700)])]),
                  gpu=gpu([{"name": "k", "start_ns": 0, "end_ns": 10}]))
    assert step_table(tl, attribution=False, min_steps=3)["outlier"].to_list() == [
        True, False, False]


def test_steps_hand_made() -> None:
    # five steps: 0..100 (kernels 10..30 and 20..50 -> busy 40), 100..400 (kernel 100..130
    # -> busy 30), then three of 100 ns. Walls [100, 300, 100, 100, 100]: median 100, MAD 0
    # -> the 300 ns step is the only outlier.
    bounds = [(0, 100), (100, 400), (400, 500), (500, 600), (600, 700)]
    tl = timeline(
        ranges=ranges([{"name": f"ProfilerStep#{i}", "kind": "profiler_step", "start_ns": s,
                        "end_ns": e} for i, (s, e) in enumerate(bounds)]),
        gpu=gpu([{"name": "k", "start_ns": 10, "end_ns": 30},
                 {"name": "k", "start_ns": 20, "end_ns": 50, "stream_id": 8},
                 {"name": "k", "start_ns": 100, "end_ns": 130}]))
    s = step_table(tl)
    assert s["wall_ns"].to_list() == [100, 300, 100, 100, 100]
    assert s["gpu_busy_ns"].to_list() == [40, 30, 0, 0, 0]
    assert s["outlier"].to_list() == [False, True, False, False, False]
    assert s["compute_ns"].to_list()[:2] == [40, 30]
    # no launch call links a kernel to a step: each period is its wall
    assert s["period_ns"].to_list() == [100, 300, 100, 100, 100]
    summ = step_summary(s).row(1, named=True)
    assert summ["metric"] == "period_ns"
    assert (summ["steps"], summ["outliers"], summ["p50"], summ["max"]) == (5, 1, 100.0, 300.0)
    # outliers are flagged on the period only: the wall and GPU busy rows give no count
    # (the rule applied to GPU busy 40, 30, 0, 0, 0 would say 2: median 0, MAD 0)
    assert step_summary(s).row(0, named=True)["outliers"] is None
    assert step_summary(s).row(2, named=True)["outliers"] is None
    # the regex path picks NVTX ranges instead
    assert step_table(tl, step_regex=r"#1$", attribution=False)["wall_ns"].to_list() == [300]


def _nvtx_steps(bounds: list[tuple[int, int]], names: list[str] | None = None,
                kind: str = "nvtx_push_pop") -> traceparse.Timeline:
    names = names or [f"step {i}" for i in range(len(bounds))]
    return timeline(
        ranges=ranges([{"name": n, "kind": kind, "start_ns": s, "end_ns": e}
                       for n, (s, e) in zip(names, bounds, strict=True)]),
        gpu=gpu([{"name": "k", "start_ns": 10, "end_ns": 30}]))


def test_nvtx_step_ranges_are_the_steps_without_profiler_steps() -> None:
    """No ProfilerStep: NVTX ranges named as numbered steps, one after another, are the
    steps (an nsys capture's loop); walls [100, 300, 100]."""
    tl = _nvtx_steps([(0, 100), (100, 400), (400, 500)])
    s = step_table(tl, attribution=False)
    assert s["step"].to_list() == ["step 0", "step 1", "step 2"]
    assert s["wall_ns"].to_list() == [100, 300, 100]
    for name in ("train_step_7", "iteration 12", "iter#4", "Step 3", "training step 2",
                 "train-step 3", "decode_step_0", "prefill step 2", "eval iter 5",
                 "fwd_step_1", "inference-step 4"):
        got = step_table(_nvtx_steps([(0, 50), (50, 90)], [name, name]), attribution=False)
        assert got.height == 2, name
    # a step of something inside a step is not one: no phase word, no step
    for name in ("optimizer_step_3", "lr_step 2", "decode_step"):
        got = step_table(_nvtx_steps([(0, 50), (50, 90)], [name, name]), attribution=False)
        assert got.height == 0, name
    # record_function annotations so named count too
    assert step_table(_nvtx_steps([(0, 50), (50, 90)], kind="user_annotation"),
                      attribution=False).height == 2


def test_nvtx_step_ranges_that_overlap_or_stand_alone_are_not_steps() -> None:
    """A nested or concurrent 'step' range is not a step loop; one range is not a loop; a
    name with more than a step number (``step 3 backward``) is not a step; ProfilerStep
    ranges win when present."""
    assert step_table(_nvtx_steps([(0, 100), (50, 80)]), attribution=False).height == 0
    assert step_table(_nvtx_steps([(0, 100)]), attribution=False).height == 0
    assert step_table(_nvtx_steps([(0, 50), (50, 90)], ["step 3 backward"] * 2),
                      attribution=False).height == 0
    both = timeline(ranges=ranges(
        [{"name": "step 0", "kind": "nvtx_push_pop", "start_ns": 0, "end_ns": 50},
         {"name": "step 1", "kind": "nvtx_push_pop", "start_ns": 50, "end_ns": 90},
         {"name": "ProfilerStep#5", "kind": "profiler_step", "start_ns": 0, "end_ns": 90}]),
        gpu=gpu([{"name": "k", "start_ns": 10, "end_ns": 30}]))
    assert step_table(both, attribution=False)["step"].to_list() == ["ProfilerStep#5"]


def test_op_tree_merges_only_the_annotations_that_are_steps() -> None:
    """The op tree names ``step N`` ranges ``step *`` only where the step rule takes them
    as the steps: a loop merges into one node of 2 calls; a nested pair, or the same pair
    beside ProfilerStep ranges, keeps its names."""
    from traceparse.analyses.optree import view_ranges

    def names(tl: traceparse.Timeline) -> list[str]:
        return sorted(view_ranges(tl)["name"].to_list())

    assert names(_nvtx_steps([(0, 50), (50, 90)])) == ["step *", "step *"]
    assert names(_nvtx_steps([(0, 100), (50, 80)])) == ["step 0", "step 1"]
    both = timeline(ranges=ranges(
        [{"name": "step 0", "kind": "nvtx_push_pop", "start_ns": 0, "end_ns": 50},
         {"name": "step 1", "kind": "nvtx_push_pop", "start_ns": 50, "end_ns": 90},
         {"name": "ProfilerStep#5", "kind": "profiler_step", "start_ns": 0, "end_ns": 90}]),
        gpu=gpu([{"name": "k", "start_ns": 10, "end_ns": 30}]))
    assert names(both) == ["ProfilerStep#*", "step 0", "step 1"]


@pytest.mark.shared
def test_decode_step_annotations_are_the_steps() -> None:
    """The sweep's decoder marks each step with ``record_function("decode_step_N")`` and
    has no ProfilerStep: those 20 annotations are its steps, with their own times."""
    from conftest import TRACES

    path = TRACES / "gpu/sweep/decode_b1_eager.json.gz"
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    marks = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and e["name"].startswith("decode_step_")), key=lambda e: e["ts"])
    assert len(marks) == 20 and not any(e["name"].startswith("ProfilerStep") for e in ev)
    s = step_table(traceparse.load(path), attribution=False)
    assert s["step"].to_list() == [e["name"] for e in marks]
    assert s["wall_ns"].to_list() == [round(e["dur"] * 1000) for e in marks]
