"""A step's time where the host runs ahead of the GPU: the period, not the wall
(analyses/steps.py ``step_periods``; docs/diff.md)."""

from __future__ import annotations

import gzip
import json
import statistics

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, timeline

from traceparse.analyses.steps import launched_work, step_periods
from traceparse.links import launch_starts


def _steps(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "start_ns": pl.Int64,
                                      "wall_ns": pl.Int64}, orient="row")


def test_periods_tile_the_walls_from_their_finishes() -> None:
    # rank 0: steps at 0 (wall 150), 100 (wall 150), 300 (wall 50): finishes 150, 250, 350;
    # periods 150, 250 - max(100, 150) = 100, 350 - max(300, 250) = 50 (sum 300 = the union
    # [0, 250) + [300, 350)). rank 1: a step at 0 (wall 500) and one at 10 (wall 100) that
    # finished first: 500, then 0.
    out = step_periods(_steps([(0, 0, 150), (0, 100, 150), (0, 300, 50),
                               (1, 0, 500), (1, 10, 100)]))
    assert out["period_ns"].to_list() == [150, 100, 50, 500, 0]


def test_a_host_ahead_of_the_gpu_pays_the_gpu_time_per_step() -> None:
    # the host issues a step every 100 ns, the GPU needs 160 per step: walls 160, 220, 280,
    # 340 (the queue grows by 60 a step), periods 160 then 160 each
    out = step_periods(_steps([(0, 100 * i, 160 + 60 * i) for i in range(4)]))
    assert out["period_ns"].to_list() == [160, 160, 160, 160]


def _launched_tl() -> object:
    """Steps 0 [0, 100) and 1 [100, 200) of rank 0 (the windows passed in); kernel a
    launched at 10 runs 50..90, kernel b launched at 90 runs 120..260, a copy launched at
    150 runs 300..310, kernel c launched at 250 (after both steps) runs 400..410, and
    kernel d has no launch call (correlation 9 matches none)."""
    return timeline(
        gpu=gpu([{"name": "a", "start_ns": 50, "end_ns": 90, "correlation_id": 1},
                 {"name": "b", "start_ns": 120, "end_ns": 260, "correlation_id": 2},
                 {"name": "cp", "kind": "memcpy", "start_ns": 300, "end_ns": 310,
                  "correlation_id": 3},
                 {"name": "c", "start_ns": 400, "end_ns": 410, "correlation_id": 4},
                 {"name": "d", "start_ns": 150, "end_ns": 160, "correlation_id": 9}]),
        api=api([{"start_ns": 10, "end_ns": 12, "correlation_id": 1},
                 {"start_ns": 90, "end_ns": 95, "correlation_id": 2},
                 {"name": "cudaMemcpyAsync", "start_ns": 150, "end_ns": 152,
                  "correlation_id": 3},
                 {"start_ns": 250, "end_ns": 252, "correlation_id": 4}]))


def test_launched_work_belongs_to_the_step_its_call_started_in() -> None:
    tl = _launched_tl()
    assert launch_starts(tl).to_list() == [10, 90, 150, 250, None]  # type: ignore[arg-type]
    w = pl.DataFrame({"_wid": [0, 1], "rank": [0, 0], "start_ns": [0, 100],
                      "end_ns": [100, 200]},
                     schema={"_wid": pl.UInt32, "rank": pl.Int32, "start_ns": pl.Int64,
                             "end_ns": pl.Int64})
    got = launched_work(tl, w).sort("_wid")  # type: ignore[arg-type]
    # step 0: a and b (launched at 10 and 90), done at 260, kernels 40 + 140 ns; step 1:
    # the copy launched at 150, done at 310, no kernel; c (launched at 250, after step 1's
    # end) and d (no call) belong to no step
    assert got.rows() == [(0, 260, 2, 180, 10), (1, 310, 0, 0, 150)]


def _raw_periods(path: object) -> tuple[list[dict], list[float]]:
    """The file's own ProfilerSteps and their periods, from its events: each step's finish
    is the later of its host end and the end of the GPU work whose launch call (by
    correlation id) started inside it."""
    with gzip.open(path, "rt") as f:  # type: ignore[call-overload]
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"].startswith("ProfilerStep")
                    and e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    launch = {e["args"]["correlation"]: e["ts"] for e in ev
              if e.get("cat") in ("cuda_runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    acts = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu = [(launch[c], e["ts"] + e["dur"]) for e in acts
           if (c := e["args"].get("correlation")) in launch]
    done = [max([s["ts"] + s["dur"]] + [end for t, end in gpu
                                         if s["ts"] <= t < s["ts"] + s["dur"]])
            for s in steps]
    # work queued before the recording: on a stream, the activities without a recorded
    # launch that start before its first one with a launch (streams run in launch order)
    first: dict[object, float] = {}
    for e in acts:
        if e["args"].get("correlation") in launch:
            k = (e["args"].get("device"), e["args"].get("stream"))
            first[k] = min(first.get(k, float("inf")), e["ts"])
    queued = max((e["ts"] + e["dur"] for e in acts
                  if e["args"].get("correlation") not in launch
                  and e["ts"] < first.get((e["args"].get("device"), e["args"].get("stream")),
                                          float("-inf"))), default=float("-inf"))
    # a step's own work waited behind that queue from its first launch to the queue's end
    first_launch = [min((t for t, _ in gpu if s["ts"] <= t < s["ts"] + s["dur"]),
                        default=None) for s in steps]
    wait = [0.0 if f is None else max(0.0, queued - max(s["ts"], f))
            for s, f in zip(steps, first_launch, strict=True)]
    run = [max(done[:i], default=float("-inf")) for i in range(len(done))]
    return steps, [d - max(s["ts"] + w, r)
                   for s, d, r, w in zip(steps, done, run, wait, strict=True)]


@pytest.mark.shared
def test_launch_bound_twin_diff_step_is_the_gpu_period() -> None:
    from traceparse import load
    from traceparse.analyses.diff_tail import step_walls

    path = TRACES / "gpu/scenarios/launch_bound-twin.json.gz"
    steps, periods = _raw_periods(path)
    # the host opens a step every ~0.32 ms, the GPU finishes one every ~0.49 ms
    assert statistics.median(s["dur"] for s in steps) < 350
    assert all(480 < p < 500 for p in periods[1:])
    w = step_walls(load(path))
    assert w["period_ns"].to_list() == [round(p * 1000) for p in periods]
    # the walls overlap and grow with the queue: 0.80 ms to 1.40 ms after the first
    assert w["wall_ns"].to_list()[1:] == sorted(w["wall_ns"].to_list()[1:])
    assert w["wall_ns"][5] > 1_300_000


@pytest.mark.shared
def test_gpt2s_b32_phase_step_time_is_the_period_not_the_wall() -> None:
    from traceparse import load
    from traceparse.analyses.phases import phase_steps, phase_summary

    path = TRACES / "gpu/sweep/train_gpt2s_b32.json.gz"
    _, periods = _raw_periods(path)
    truth = json.loads((TRACES / "gpu/sweep/train_gpt2s_b32.truth.json").read_text())
    s = phase_steps(load(path))
    # microsecond floats in the file: equal to the nanosecond (rounding of the sums)
    assert all(abs(a - round(p * 1000)) <= 1
               for a, p in zip(s["period_ns"].to_list(), periods, strict=True))
    row = phase_summary(s).row(0, named=True)
    # the summary read "train x3 133 ms" (the walls: each step's GPU work ends ~55 ms
    # after its host range, behind the previous step's); the periods' median is 77.5 ms,
    # within 1% of the 78.1 ms measured without the profiler. The first step's own
    # kernels waited behind the 849 queued before the recording (no launch call), which
    # end at +41.2 ms: its period leaves that wait out, 77.9 ms, not 119 ms
    assert all(77e6 < p * 1000 < 78e6 for p in periods)
    assert row["step_p50_ns"] == statistics.median(round(p * 1000) for p in periods)
    assert s["wall_ns"].median() > 130e6
    assert abs(row["step_p50_ns"] / 1e6 / truth["step_ms_median"] - 1) < 0.01


def test_steps_table_period_where_the_gpu_falls_behind() -> None:
    # three NVTX steps of 100 ns at 0, 100, 200; each launches (call [s+10, s+15)) one
    # kernel of 160 ns that starts when the previous one ends: [20,180), [180,340),
    # [340,500). Finishes 180, 340, 500: periods 180, 160, 160 (walls stay 100)
    from perf_helpers import api, gpu, ranges, timeline

    from traceparse.analyses.steps import step_summary, step_table

    starts = (0, 100, 200)
    tl = timeline(
        ranges=ranges([{"name": f"step {i}", "start_ns": s, "end_ns": s + 100}
                       for i, s in enumerate(starts)]),
        api=api([{"start_ns": s + 10, "end_ns": s + 15, "correlation_id": i}
                 for i, s in enumerate(starts)]),
        gpu=gpu([{"name": "k", "start_ns": a, "end_ns": a + 160, "correlation_id": i}
                 for i, a in enumerate((20, 180, 340))]))
    t = step_table(tl, attribution=False)
    assert t["wall_ns"].to_list() == [100, 100, 100]
    assert t["period_ns"].to_list() == [180, 160, 160]
    row = step_summary(t).filter(pl.col("metric") == "period_ns").row(0, named=True)
    assert row["p50"] == 160 and row["outliers"] is None


@pytest.mark.shared
def test_steps_table_period_equals_the_phase_period() -> None:
    # one rule, two tables: `steps` and the phase rows give launch_bound-twin the same
    # periods, and both equal the raw JSON's
    from traceparse import load
    from traceparse.analyses.phases import phase_steps
    from traceparse.analyses.steps import step_table

    path = TRACES / "gpu/scenarios/launch_bound-twin.json.gz"
    tl = load(path)
    _, periods = _raw_periods(path)
    assert step_table(tl, attribution=False)["period_ns"].to_list() == \
        phase_steps(tl, attribution=False)["period_ns"].to_list() == \
        [round(p * 1000) for p in periods]


def test_an_activity_belongs_to_one_step_even_where_windows_nest() -> None:
    from traceparse.analyses.steps import step_of_launch

    tl = _launched_tl()
    # step 0 [0, 300) holds step 1 [80, 120): b (launched at 90) goes to step 1, the open
    # step that started last; a (10), the copy (150, after step 1 closed) and c (250) to
    # step 0, the only one open at their calls; d has no call
    w = pl.DataFrame({"_wid": [0, 1], "rank": [0, 0], "start_ns": [0, 80],
                      "end_ns": [300, 120]},
                     schema={"_wid": pl.UInt32, "rank": pl.Int32, "start_ns": pl.Int64,
                             "end_ns": pl.Int64})
    got = step_of_launch(tl, w, ["name"])  # type: ignore[arg-type]
    assert sorted(got.select("_wid", pl.col("name").cast(pl.String)).rows()) == [
        (0, "a"), (0, "c"), (0, "cp"), (1, "b")]


def test_work_queued_before_the_recording_is_not_the_first_steps() -> None:
    from perf_helpers import ranges

    from traceparse.analyses.steps import step_table, unrecorded_queue_end

    # stream 7: kernel u0 [0, 50) without a launch call (queued before the recording),
    # then step 0 [5, 20) launches k0 (call [6, 8)) that waits behind it and runs
    # [60, 90), step 1 [100, 110) launches k1 (call [101, 103)) running [105, 135); an
    # unlinked kernel after k0 on stream 7 (u1 [95, 99)) and one on stream 8 with no
    # recorded launch at all (u2 [0, 500)) say nothing about the queue. Queue end 50:
    # step 0's own work waited from its first launch (6) to 50, 44 ns that are not its:
    # period 90 - 5 - 44 = 41 (not 85); step 1's 135 - 100 = 35
    tl = timeline(
        ranges=ranges([{"name": "step 0", "start_ns": 5, "end_ns": 20},
                       {"name": "step 1", "start_ns": 100, "end_ns": 110}]),
        api=api([{"start_ns": 6, "end_ns": 8, "correlation_id": 1},
                 {"start_ns": 101, "end_ns": 103, "correlation_id": 2}]),
        gpu=gpu([{"name": "u0", "start_ns": 0, "end_ns": 50, "correlation_id": 90},
                 {"name": "k0", "start_ns": 60, "end_ns": 90, "correlation_id": 1},
                 {"name": "u1", "start_ns": 95, "end_ns": 99, "correlation_id": 91},
                 {"name": "k1", "start_ns": 105, "end_ns": 135, "correlation_id": 2},
                 {"name": "u2", "start_ns": 0, "end_ns": 500, "stream_id": 8,
                  "correlation_id": 92}]))
    assert unrecorded_queue_end(tl).rows() == [(0, 50)]  # type: ignore[arg-type]
    t = step_table(tl, attribution=False)  # type: ignore[arg-type]
    assert t["wall_ns"].to_list() == [15, 10]
    assert t["period_ns"].to_list() == [41, 35]
    # a step that first launches after the queue drained did not wait: its period is its
    # own (kineto__resnet50_worker0: queue to +31.8 ms, first launch at +53.4 ms, 211 ms)
    late = timeline(
        ranges=ranges([{"name": "step 0", "start_ns": 0, "end_ns": 100},
                       {"name": "step 1", "start_ns": 100, "end_ns": 200}]),
        api=api([{"start_ns": 53, "end_ns": 55, "correlation_id": 1}]),
        gpu=gpu([{"name": "u0", "start_ns": 0, "end_ns": 30, "correlation_id": 90},
                 {"name": "k0", "start_ns": 60, "end_ns": 90, "correlation_id": 1}]))
    assert unrecorded_queue_end(late).rows() == [(0, 30)]  # type: ignore[arg-type]
    assert step_table(late, attribution=False)["period_ns"].to_list() == [  # type: ignore[arg-type]
        100, 100]


def test_diff_time_per_step_leaves_out_work_queued_before_the_recording() -> None:
    from traceparse.analyses.diff import category_per_step

    # step 0 [0, 100), step 1 [100, 200). Stream 7: u0 [10, 50) has no launch call and
    # runs before the stream's first recorded kernel k0 (call [2, 4), runs [60, 90)): it
    # was queued before the recording and is no step's; u1 [92, 96), unlinked after k0,
    # goes to the step open at its own start, as does u2 [20, 30) on stream 8, which has
    # no recorded launch at all. k1 (call [101, 103), runs [120, 150)) is step 1's.
    # Compute per step: 30 + 4 + 10 = 44 (84 with u0's 40), then 30
    tl = timeline(
        api=api([{"start_ns": 2, "end_ns": 4, "correlation_id": 1},
                 {"start_ns": 101, "end_ns": 103, "correlation_id": 2}]),
        gpu=gpu([{"name": "u0", "start_ns": 10, "end_ns": 50, "correlation_id": 90},
                 {"name": "k0", "start_ns": 60, "end_ns": 90, "correlation_id": 1},
                 {"name": "u1", "start_ns": 92, "end_ns": 96, "correlation_id": 91},
                 {"name": "k1", "start_ns": 120, "end_ns": 150, "correlation_id": 2},
                 {"name": "u2", "start_ns": 20, "end_ns": 30, "stream_id": 8,
                  "correlation_id": 92}]))
    walls = pl.DataFrame({"rank": [0, 0], "start_ns": [0, 100], "end_ns": [100, 200]},
                         schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})
    got = category_per_step(tl, walls)  # type: ignore[arg-type]
    assert got.rows() == [("category", "compute", 44), ("category", "compute", 30)]


def test_diff_time_per_step_of_train_gpt2s_b32_against_its_raw_kernels() -> None:
    """The first step's kernel time is the kernels its own launch calls issued (each
    runtime or driver call's correlation id, read from the JSON), not the 849 kernels of the
    step before the recording that ran during it (+39.6 ms before the rule)."""
    from traceparse import load
    from traceparse.analyses.diff import category_per_step
    from traceparse.analyses.diff_tail import step_walls

    path = TRACES / "gpu" / "sweep" / "train_gpt2s_b32.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path, "rb") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    launches = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})]
    kernels = {e["args"]["correlation"]: e["dur"] for e in ev if e.get("cat") == "kernel"}
    want = []
    for s in steps:
        ids = {e["args"]["correlation"] for e in launches
               if s["ts"] <= e["ts"] < s["ts"] + s["dur"]}
        want.append(sum(kernels.get(i, 0) for i in ids))
    tl = load(path)
    got = category_per_step(tl, step_walls(tl)).filter(pl.col("name") == "compute")
    # Kineto's microseconds with three decimals: within a nanosecond per kernel
    assert len(want) == got.height == 3
    for w, g in zip(want, got["dur_ns"].to_list(), strict=True):
        assert abs(g - w * 1000) < 2500, (g, w)
    assert max(got["dur_ns"]) < 1.01 * min(got["dur_ns"])


def test_a_first_activity_long_after_its_launch_is_queued_behind_unrecorded_work() -> None:
    from perf_helpers import ranges

    from traceparse.analyses.steps import step_table, unrecorded_work_end

    # step 0 [0, 20) launches k0 (call [1, 3)), which starts at 30,000,000: 30 ms after its
    # call returned (> UNRECORDED_QUEUE_NS, 10 ms) on a GPU that ran nothing recorded
    # before it, so the GPU was busy with work the trace does not hold until then
    # (gpu_known_from). k0 runs to 30,000,050. The step's own work waited from its first
    # launch (1) to 30,000,000: period 30,000,050 - (0 + 30,000,000 - 1) = 51 (not
    # 30,000,050); step 1 [30,000,100, 30,000,110) launches k1 (call at 30,000,101) that
    # runs [30,000,105, 30,000,135): period 35
    tl = timeline(
        ranges=ranges([{"name": "step 0", "start_ns": 0, "end_ns": 20},
                       {"name": "step 1", "start_ns": 30_000_100, "end_ns": 30_000_110}]),
        api=api([{"start_ns": 1, "end_ns": 3, "correlation_id": 1},
                 {"start_ns": 30_000_101, "end_ns": 30_000_103, "correlation_id": 2}]),
        gpu=gpu([{"name": "k0", "start_ns": 30_000_000, "end_ns": 30_000_050,
                  "correlation_id": 1},
                 {"name": "k1", "start_ns": 30_000_105, "end_ns": 30_000_135,
                  "correlation_id": 2}]))
    assert unrecorded_work_end(tl).rows() == [(0, 30_000_000)]  # type: ignore[arg-type]
    assert step_table(tl, attribution=False)["period_ns"].to_list() == [  # type: ignore[arg-type]
        51, 35]


def test_vllm_step_period_starts_where_its_gpu_work_could_start() -> None:
    """``tracelens__vllm_prefilldecode_piecewise_graph_execution`` (MI300X): one step, the
    ``execute_8192_...`` annotation. Its first launch call (a copy) is at +2.2 ms; the GPU
    ran nothing recorded until that copy started at +151.2 ms; its last kernel ends at
    +307.7 ms. The period is the host time before its first launch plus the GPU's part:
    read from the JSON, not from traceparse."""
    from traceparse import load
    from traceparse.analyses.phases import phase_steps

    path = TRACES / "torch" / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path, "rb") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in ev if e.get("cat") == "user_annotation"
                and e["name"].startswith("execute_"))
    calls = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
             and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    first = min(gpu, key=lambda e: e["ts"])
    mine = [e for e in gpu if step["ts"] <= calls.get(e["args"]["correlation"], -1)
            < step["ts"] + step["dur"]]
    first_launch = min(calls[e["args"]["correlation"]] for e in mine)
    end = max(e["ts"] + e["dur"] for e in mine)
    assert first["ts"] - calls[first["args"]["correlation"]] > 100_000  # 149 ms in the queue
    want_us = (first_launch - step["ts"]) + (end - first["ts"])
    got = phase_steps(load(path))
    assert got.height == 1
    assert abs(got["period_ns"][0] - want_us * 1000) < 2_000
    assert 158_000 < want_us < 159_500  # against 307.7 ms from the step's start


def _held_tl(extra: list[dict[str, object]] | None = None,
             wait_at: int = 3) -> object:
    from perf_helpers import ranges

    # step 0 [0, 50) (step 1 [40 ms, +10) launches nothing): k0 launched at 1 runs [2, 4)
    # on stream 7; the thread waits on an event
    # (cudaStreamWaitEvent at wait_at, no record call in the trace) and launches k1 to
    # stream 3 at wait_at + 2; k1 starts at 30,000,004 and runs 1,000 ns: held from its
    # call's return to 30,000,004 on a producer the trace does not hold
    return timeline(
        ranges=ranges([{"name": "step 0", "start_ns": 0, "end_ns": 50},
                       {"name": "step 1", "start_ns": 40_000_000, "end_ns": 40_000_010}]),
        api=api([{"start_ns": 1, "end_ns": 2, "correlation_id": 1},
                 {"name": "cudaStreamWaitEvent_v3020", "start_ns": wait_at,
                  "end_ns": wait_at + 1},
                 {"start_ns": wait_at + 2, "end_ns": wait_at + 3, "correlation_id": 2}]),
        gpu=gpu([{"name": "k0", "start_ns": 2, "end_ns": 4, "correlation_id": 1},
                 {"name": "k1", "stream_id": 3, "start_ns": 30_000_004,
                  "end_ns": 30_001_004, "correlation_id": 2}, *(extra or [])]))


def test_a_hold_on_an_unrecorded_event_at_the_capture_start_is_unrecorded_work() -> None:
    from traceparse.analyses.steps import gpu_known_from, step_table

    # the hold [6, 30,000,004) on "producer not in this trace" begins 4 ns after the
    # rank's first activity (k0 at 2), lasts > 10 ms, and nothing recorded runs in it:
    # the GPU ran the unrecorded producer until 30,000,004. The step's period: its work
    # ends at 30,001,004; it waited from its first launch (1) to 30,000,004: 30,001,004 -
    # (0 + 30,000,004 - 1) = 1,001 (not 30,001,004); attribution starts there too
    tl = _held_tl()
    assert gpu_known_from(tl).rows() == [(0, 30_000_004)]  # type: ignore[arg-type]
    t = step_table(tl)  # type: ignore[arg-type]
    assert t["period_ns"].to_list() == [1_001, 10]
    # a recorded kernel running inside the hold: the GPU was not idle, the hold tells
    # nothing of unrecorded work
    busy = _held_tl([{"name": "k2", "stream_id": 9, "start_ns": 10_000, "end_ns": 20_000,
                      "correlation_id": 99}])
    assert gpu_known_from(busy).height == 0  # type: ignore[arg-type]
    # a hold that begins more than 10 ms after the rank's first activity is not at the
    # capture's start: k1's call (and the wait) come 12 ms after k0
    late = _held_tl(wait_at=12_000_000)
    assert gpu_known_from(late).height == 0  # type: ignore[arg-type]


def test_sglang_decode_step_leaves_out_its_hold_on_unrecorded_work() -> None:
    """``tracelens__sglang_Qwen3-8B_decode`` (MI300X): one kernel at +0.08 ms, then a
    ``hipStreamWaitEvent`` whose event was recorded before the capture holds the next
    kernel 463 ms with nothing recorded running; the 32-token decode step's kernels then
    run for 10.45 ms. Read from the JSON: its period is the host time before its first
    launch plus the GPU's part after the hold (474 ms before the rule, 68 tok/s), and its
    attribution starts at the hold's end."""
    from traceparse import load
    from traceparse.analyses.phases import phase_steps

    path = TRACES / "torch" / "tracelens__sglang_Qwen3-8B_decode.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path, "rb") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    step = next(e for e in ev if e.get("cat") == "user_annotation"
                and e["name"].startswith("execute_"))
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                 key=lambda e: e["ts"])
    calls = sorted(e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
                   and e["name"].startswith("hipLaunch"))
    assert any(e["name"] == "hipStreamWaitEvent" for e in ev)
    assert not any("EventRecord" in e["name"] for e in ev)  # its record is not in the trace
    # the first kernel, then nothing for 463 ms: the held kernel starts the GPU's part
    held = gpu[1]
    assert held["ts"] - (gpu[0]["ts"] + gpu[0]["dur"]) > 400_000
    end = max(e["ts"] + e["dur"] for e in gpu)
    want_period_us = (calls[0] - step["ts"]) + (end - held["ts"])
    got = phase_steps(load(path))
    assert got.height == 1 and got["tokens"][0] == 32
    assert abs(got["period_ns"][0] - want_period_us * 1000) < 2_000
    assert abs(got["attributed_ns"][0] - (end - held["ts"]) * 1000) < 2_000
    assert 10_400 < end - held["ts"] < 10_500


def test_the_report_says_where_the_gpu_ran_unrecorded_work() -> None:
    """The phases note of the SGLang decode report names the hold's end (the held kernel's
    start, 463.30 ms after the first kernel in the JSON) and says the step times leave
    the wait out; a trace without such work gets no such sentence."""
    from traceparse import load
    from traceparse.reports.llm_sections import llm_sections
    from traceparse.reports.options import ReportOptions

    path = TRACES / "torch" / "tracelens__sglang_Qwen3-8B_decode.json.gz"
    other = TRACES / "gpu" / "h200" / "gpt_train_decode.json.gz"
    if not (path.exists() and other.exists()):
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path, "rb") as f:
        gpu = sorted(e["ts"] for e in json.load(f)["traceEvents"]
                     if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert 463.2 < (gpu[1] - gpu[0]) / 1000 < 463.4
    note = llm_sections(load(path), ReportOptions())["phases"]["note"]
    assert "until +463 ms on rank 0 (from the first GPU activity)" in note
    plain = llm_sections(load(other), ReportOptions())["phases"]["note"]
    assert "launched before the recording began until" not in plain
