"""Issue 25: diagnoses that hold on traces the tool has never seen: stream waits, under-filled
launches, inputs that do not belong together. Generated timelines with hand-computed
answers, and the shared cases checked against the traces' own events. The host-side rules
(warm-up signals, data loading, communication by family) and the shared SGLang, vLLM,
resest, nvjet and AlexNet cases are in test_diagnoses_unseen_host.py."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from conftest import TRACES
from test_diagnoses import LAUNCH, US, _parts, _tl

from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.streamwait import NO_PRODUCER, stream_waits
from traceparse.analyses.summary import UNRECORDED_PRODUCER, summarize


def _wait_trace(*, wait: bool, record: bool) -> Any:
    # K0 s1 [10,15) (call [0,5)); a first cudaStreamWaitEvent [5,6) (its event recorded
    # before the capture) holds K1 on s2 (call [6,8)) until 990, K1 runs [990,1000);
    # cudaEventRecord [9,10) after K1's launch (K1 is its producer); cudaStreamWaitEvent
    # [20,30) on s3, whose K2 (call [40,45)) runs [1000,1010) after K1; a blocking
    # cudaMemcpy [50,1020) whose copy runs on s3 [1010,1020) behind K2.
    calls = [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
             {"name": LAUNCH, "start": 6, "end": 8, "corr": 2},
             {"name": LAUNCH, "start": 40, "end": 45, "corr": 3},
             {"name": "cudaMemcpy", "start": 50, "end": 1020, "corr": 4}]
    if record:
        calls.append({"name": "cudaEventRecord", "start": 9, "end": 10})
    if wait:
        calls += [{"name": "cudaStreamWaitEvent", "start": 5, "end": 6},
                  {"name": "cudaStreamWaitEvent", "start": 20, "end": 30}]
    return _tl([{"stream": 1, "start": 10, "end": 15, "corr": 1, "name": "K0"},
                {"stream": 2, "start": 990, "end": 1000, "corr": 2, "name": "K1"},
                {"stream": 3, "start": 1000, "end": 1010, "corr": 3, "name": "K2"},
                {"stream": 3, "start": 1010, "end": 1020, "corr": 4, "kind": "memcpy",
                 "name": "Memcpy HtoD", "src": "Pinned", "dst": "Device"}],
               sorted(calls, key=lambda c: c["start"]))


def test_stream_wait_blocks_the_gap_not_the_host() -> None:
    # holds: s2 [max(6, 8), 990) = [8,990) (producer not in the trace); s3 [max(30, 45),
    # min(1000, K1's end 1000)) = [45,1000) (producer K1).
    # Window [10,1020) = 1010: compute 5 + 10 + 10 = 25, memory 10; K2's launch [40,45)
    # and the cudaMemcpy [50,990) lie inside the holds (issued work was held back: the
    # wait, not the host, kept the GPU idle), so launch 0 and host sync 0; idle [15,990)
    # = 975.
    tl = _wait_trace(wait=True, record=True)
    sw = stream_waits(tl).sort("stream_id")
    assert sw.select("stream_id", "start_ns", "end_ns", "producer").rows() == [
        (2, 8 * US, 990 * US, NO_PRODUCER), (3, 45 * US, 1000 * US, "K1 (stream 2)")]
    assert sw["event"][1].startswith("cudaEventRecord")
    assert _parts(tl) == (1010, 25, 10, 0, 0, 0, 975)
    g = idle_gaps(tl).row(0, named=True)  # [15,990): both holds cover it, the inner wins
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (15 * US, 990 * US, "stream_wait")
    assert "stream 3" in g["cause_name"] and "K1 (stream 2)" in g["cause_name"]
    # 975 / 1010 = 96.5%
    assert summarize(tl)["verdict"].startswith("stream-wait-bound: 96.5% of the window")


def test_a_finished_producer_holds_nothing() -> None:
    # K1 moved to [11,14): the event it records is complete long before K2's launch, so
    # the s3 wait holds nothing (K2's late start is not the wait's)
    tl = _wait_trace(wait=True, record=True)
    gpu = tl.gpu.with_columns(
        start_ns=pl.when(pl.col("name") == "K1").then(11 * US).otherwise(pl.col("start_ns")),
        end_ns=pl.when(pl.col("name") == "K1").then(14 * US).otherwise(pl.col("end_ns")))
    tl2 = type(tl)(gpu=gpu.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns")),
                   api=tl.api)
    sw = stream_waits(tl2)
    assert sw.filter(pl.col("stream_id") == 3).height == 0


def test_stream_wait_without_its_record_names_no_producer() -> None:
    tl = _wait_trace(wait=True, record=False)
    assert stream_waits(tl)["producer"].to_list() == [NO_PRODUCER, NO_PRODUCER]
    # the verdict says what "idle" means when the waited work is not in the trace; with
    # the record (and K1 as producer) it does not
    assert summarize(tl)["verdict"].endswith(UNRECORDED_PRODUCER)
    assert UNRECORDED_PRODUCER not in summarize(_wait_trace(wait=True, record=True))["verdict"]
    # the stream-wait fix counts only waits with a producer in the trace: none here
    from traceparse.reports.fixes import fixes_list

    assert "stream-wait" not in {f["id"] for f in fixes_list(tl)[0]}
    with_record = fixes_list(_wait_trace(wait=True, record=True))[0]
    assert with_record[0]["id"] == "stream-wait"


def test_without_a_wait_the_blocking_copy_is_host_sync() -> None:
    # the same trace without the wait calls: the host blocked in cudaMemcpy [50,990) while
    # nothing ran, 940 us of host sync; idle [15,40) + [45,50) = 30.
    tl = _wait_trace(wait=False, record=True)
    assert stream_waits(tl).height == 0
    assert _parts(tl) == (1010, 25, 10, 5, 0, 940, 30)
    assert idle_gaps(tl).row(0, named=True)["cause"] == "host_sync"


def _grid_tl(kernels: list[tuple[str, int, int, tuple[int, int, int], tuple[int, int, int]]],
             sm_count: int) -> Any:
    """kernels: (name, start us, end us, grid, block) on device 0 of a GPU with ``sm_count``
    SMs, each launched 5 us before it starts."""
    import polars as pl

    from traceparse import schema
    from traceparse.timeline import Timeline

    gpu = pl.DataFrame([{
        "rank": 0, "kind": "kernel", "category": "compute", "start_ns": s * US,
        "end_ns": e * US, "dur_ns": (e - s) * US, "device_id": 0, "stream_id": 7,
        "process_id": 1, "correlation_id": i, "name": n, "grid_x": g[0], "grid_y": g[1],
        "grid_z": g[2], "block_x": b[0], "block_y": b[1], "block_z": b[2]}
        for i, (n, s, e, g, b) in enumerate(kernels)])
    api = pl.DataFrame([{"rank": 0, "kind": "runtime", "name": LAUNCH,
                         "start_ns": (s - 5) * US, "end_ns": (s - 4) * US, "dur_ns": US,
                         "process_id": 1, "thread_id": 1, "correlation_id": i}
                        for i, (_, s, _e, _g, _b) in enumerate(kernels)])
    dev = pl.DataFrame([{"rank": 0, "device_id": 0, "name": "test GPU", "sm_count": sm_count}])
    return Timeline(gpu=schema.conform("gpu", gpu), api=schema.conform("api", api),
                    devices=schema.conform("devices", dev)).validate()


def test_one_thread_launch_is_an_occupancy_fix() -> None:
    # K1 grid 1x1x1 block 1x1x1 [100,1100) us on a 108-SM GPU, K2 grid 216 [1100,1110):
    # window 1010 us; the shortest kernel (K2, 10 us) is the launch's fixed cost; K1 leaves
    # 107 of 108 SMs idle: at stake (1000 - 10) us x 107/108 = 980.833 us.
    # K2 has 2 blocks per SM: not under-filled.
    from traceparse.analyses.occupancy import underfilled
    from traceparse.reports.payload import build_payload

    tl = _grid_tl([("K1", 100, 1100, (1, 1, 1), (1, 1, 1)),
                   ("K2", 1100, 1110, (216, 1, 1), (256, 1, 1))], 108)
    u = underfilled(tl)
    assert u["name"].to_list() == ["K1"]
    r = u.row(0, named=True)
    assert (r["grid"], r["block"], r["blocks"], r["sm_count"]) == ("1x1x1", "1x1x1", 1, 108)
    assert r["at_stake_ns"] == round(990 * US * 107 / 108)
    recs = build_payload(tl)["recommendations"]["items"]
    occ = next(x for x in recs if x["id"] == "occupancy")
    assert occ["saving_ns"] == round(990 * US * 107 / 108)
    assert "grid 1x1x1" in occ["evidence"][0] and "108 SMs" in occ["evidence"][0]
    assert recs[0]["id"] == "occupancy"  # the biggest lever on this trace


def _with_op(tl: Any, name: str, dims: str, start_us: int, end_us: int) -> Any:
    """``tl`` with one ``cpu_op`` range on the launching thread (input shapes recorded)."""
    import polars as pl

    from traceparse import schema
    from traceparse.timeline import Timeline

    ranges = pl.DataFrame([{"rank": 0, "kind": "cpu_op", "name": name, "start_ns": start_us * US,
                            "end_ns": end_us * US, "dur_ns": (end_us - start_us) * US,
                            "process_id": 1, "thread_id": 1, "input_dims": dims,
                            "input_types": '["c10::BFloat16"]'}])
    return Timeline(gpu=tl.gpu, api=tl.api, devices=tl.devices,
                    ranges=schema.conform("ranges", ranges)).validate()


def test_a_norm_over_fewer_rows_than_sms_is_not_an_occupancy_fix() -> None:
    # batch-1 decode: layer norm over [1, 1024] launched 1x1x1 (one row, one block) for
    # 1000 us on 108 SMs: the work has one row, so no launch configuration fills more SMs;
    # nothing at stake. Without the op's shape the kernel's name says the same (one block
    # per row). An unnamed kernel with the same grid keeps its 980.8 us.
    from traceparse.analyses.occupancy import underfilled

    kernels = [("vectorized_layer_norm_kernel", 100, 1100, (1, 1, 1), (128, 1, 1)),
               ("K2", 1100, 1110, (216, 1, 1), (256, 1, 1))]
    tl = _grid_tl(kernels, 108)
    assert underfilled(tl).height == 0  # named: grid taken as its rows
    tl = _grid_tl([("K1", *kernels[0][1:]), kernels[1]], 108)
    assert underfilled(tl)["at_stake_ns"].to_list() == [round(990 * US * 107 / 108)]
    # shape recorded: [1, 1024] is one row; [4, 1024] is 4 rows on 2 blocks: the launch
    # reaches half of what the work allows: (1000 - 10) us x (1 - 2/4) = 495 us
    one = _with_op(_grid_tl([("K1", *kernels[0][1:]), kernels[1]], 108),
                   "aten::layer_norm", "[[1, 1024], [1024]]", 90, 99)
    assert underfilled(one).height == 0
    four = _with_op(_grid_tl([("K1", 100, 1100, (2, 1, 1), (128, 1, 1)), kernels[1]], 108),
                    "aten::layer_norm", "[[4, 1024], [1024]]", 90, 99)
    r = underfilled(four).row(0, named=True)
    assert (r["rows"], r["blocks"], r["at_stake_ns"]) == (4, 2, 495 * US)


def test_launches_at_latency_scale_are_not_an_occupancy_fix() -> None:
    # 1-block kernels of 10 and 19 us beside a 10 us full-grid one: the floor (shortest
    # kernel) is 10 us; 19 < 2 x 10 is latency, not work more SMs could share. A 20 us one
    # is work: (20 - 10) us x 107/108 at stake.
    from traceparse.analyses.occupancy import underfilled

    base = [("K2", 1000, 1010, (216, 1, 1), (256, 1, 1))]
    lat = _grid_tl([("K1", 100, 110, (1, 1, 1), (128, 1, 1)),
                    ("K1", 200, 219, (1, 1, 1), (128, 1, 1)), *base], 108)
    assert underfilled(lat, min_share=0.0).height == 0
    work = _grid_tl([("K1", 100, 120, (1, 1, 1), (128, 1, 1)), *base], 108)
    assert underfilled(work, min_share=0.0)["at_stake_ns"].to_list() == [
        round(10 * US * 107 / 108)]


def test_a_full_grid_is_not_an_occupancy_fix() -> None:
    from traceparse.analyses.occupancy import underfilled

    tl = _grid_tl([("K1", 100, 1100, (108, 1, 1), (128, 1, 1))], 108)
    assert underfilled(tl).height == 0


def _job_tl(gpu: str | None, rank: int, rank_source: str, fmt: str, span: tuple[int, int]
            ) -> Any:
    import polars as pl

    from traceparse import schema
    from traceparse.timeline import Timeline

    gpu_rows = pl.DataFrame([{"rank": rank, "kind": "kernel", "category": "compute",
                              "start_ns": span[0], "end_ns": span[1],
                              "dur_ns": span[1] - span[0], "device_id": 0, "name": "k"}])
    dev = pl.DataFrame([{"rank": rank, "device_id": 0, "name": gpu}])
    src = pl.DataFrame([{"rank": rank, "file": "x", "format": fmt, "rank_source": rank_source,
                         "start_ns": span[0], "end_ns": span[1]}])
    return Timeline(gpu=schema.conform("gpu", gpu_rows), devices=schema.conform("devices", dev),
                    sources=schema.conform("sources", src), meta={"format": fmt})


def test_inputs_that_disagree_are_not_one_job() -> None:
    from traceparse.jobcheck import disagreement

    k = "kineto-json"
    a = _job_tl("NVIDIA H100", 0, "distributedInfo", k, (1_000, 5_000))
    b = _job_tl("NVIDIA H100", 1, "distributedInfo", k, (2_000, 6_000))
    assert disagreement(["a.json", "b.json"], [a, b]) is None  # same GPU, ranks 0/1, overlap
    other_gpu = _job_tl("NVIDIA A100", 1, "distributedInfo", k, (2_000, 6_000))
    assert disagreement(["a.json", "c.json"], [a, other_gpu]) == (
        "a.json and c.json are not one job: different GPUs (NVIDIA H100 vs NVIDIA A100); "
        "give --as-one-job to analyse them together anyway")
    same_rank = _job_tl("NVIDIA H100", 0, "distributedInfo", k, (2_000, 6_000))
    assert "both are rank 0" in disagreement(["a.json", "d.json"], [a, same_rank])
    # two files that are both rank 0 only by the readers' default are renumbered, not refused
    d1 = _job_tl("NVIDIA H100", 0, "default", "nsys-sqlite", (0, 10))
    d2 = _job_tl("NVIDIA H100", 0, "default", "nsys-sqlite", (5_000_000, 6_000_000))
    assert disagreement(["a.sqlite", "b.sqlite"], [d1, d2]) is None  # relative clocks
    # epoch clocks that do not overlap: 6000 ns to 3 s 6000 ns is 3 s apart
    late = _job_tl("NVIDIA H100", 1, "distributedInfo", k, (3_000_005_000 + 1_000, 3_000_010_000))
    assert "do not overlap in time (3.00 s apart)" in disagreement(["a.json", "e.json"],
                                                                   [a, late])
    d2.meta["session_start_utc_ns"] = 10**18
    d1.meta["session_start_utc_ns"] = 10**18 + 10**12  # 1000 s later
    assert "do not overlap" in disagreement(["a.sqlite", "b.sqlite"], [d1, d2])


@pytest.mark.shared
def test_unrelated_nsys_exports_exit_2_and_real_rank_sets_load() -> None:
    from click.testing import CliRunner

    from traceparse.cli.main import main

    fuser = TRACES / "nsys/fuser__report1_h200.sqlite"
    ngp = TRACES / "nsys/instant-ngp__report13.sqlite"
    r = CliRunner().invoke(main, ["summary", str(fuser), str(ngp)])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert "different GPUs (NVIDIA H200 vs NVIDIA GeForce RTX 3070)" in r.output
    r = CliRunner().invoke(main, ["summary", "--as-one-job", str(fuser), str(ngp)])
    assert r.exit_code == 0
    # the 8 DLRM ranks (distributedInfo ranks 0-7, one V100 model, overlapping captures) and
    # HTA's two sampled ranks are one job each
    dlrm = sorted(str(p) for p in (TRACES / "torch").glob("param__dlrm_8rank__worker*"))
    assert len(dlrm) == 8
    r = CliRunner().invoke(main, ["summary", *dlrm])
    assert r.exit_code == 0 and "rank 7" in r.output
    sampled = [str(TRACES / f"torch/hta__sampled_rank-{i}.json.gz") for i in (0, 1)]
    assert CliRunner().invoke(main, ["summary", *sampled]).exit_code == 0


def test_a_kernel_launched_with_several_grids_says_so() -> None:
    # K1 launched three times on a 132-SM GPU with grids 4x4 (16 blocks), 4x12 (48) and
    # 4x16 (64), block 384, 100 us each, plus a 10 us K2 with 264 blocks (the floor).
    # Every K1 launch is under-filled; the evidence must not say all three used grid 4x16x1
    # (decode_b1_graph said "720 launches with grid 4x16x1" where the file has 240 of each).
    # At most 64/132 = 48.5% of the SMs busy; at stake 90 x (116 + 84 + 68) / 132 us.
    from traceparse.analyses.occupancy import underfilled
    from traceparse.reports.payload import build_payload

    tl = _grid_tl([("K1", 100, 200, (4, 4, 1), (384, 1, 1)),
                   ("K1", 200, 300, (4, 12, 1), (384, 1, 1)),
                   ("K1", 300, 401, (4, 16, 1), (384, 1, 1)),
                   ("K2", 401, 411, (264, 1, 1), (128, 1, 1))], 132)
    r = underfilled(tl).row(0, named=True)
    assert (r["min_blocks"], r["max_blocks"], r["configs"], r["grid"]) == (16, 64, 3, "4x16x1")
    assert r["at_stake_ns"] == round(90 * US * 116 / 132 + 90 * US * 84 / 132
                                     + 91 * US * 68 / 132)
    occ = next(x for x in build_payload(tl)["recommendations"]["items"]
               if x["id"] == "occupancy")
    assert occ["evidence"][0].startswith(
        "K1: 3 of 3 launches with 16 to 64 blocks in 3 configurations (most time: grid "
        "4x16x1, 64 blocks, block 384x1x1) on a GPU with 132 SMs: at most 48.5% of the SMs")
