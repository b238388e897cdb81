"""Golden attribution tests: each scenario's breakdown worked out by hand (times in us).

Rules (analyses/attribution.py): window = first to last non-sync activity; priority
compute > communication > memory > launch overhead > warm-up > host sync > idle; a launch
window is [api.start, min(api.end, activity.start)) of a non-blocking call; a blocking call
(synchronise, synchronous or pageable copy) is host sync for its whole duration.
"""

from __future__ import annotations

import polars as pl
import pytest

from traceparse.analyses.attribution import (
    breakdown,
    breakdown_windows,
    check_attribution,
)
from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.steps import range_windows
from traceparse.samplegen.scenarios import scenario_timeline

US = 1000

# compute_bound (us):
#   memcpy HtoD s14 [100,120) call [80,95)     K1 s7 [120,420) call [96,100)
#   K4 s13 [300,520) call [101,104)            K2 s7 [530,830) call [510,525)
#   K3 s7 [830,890) call [526,529)             memcpy DtoH s14 [890,900) call [530,533)
#   window [100,900) = 800
#   compute = [120,520) U [530,890) = 400 + 360 = 760
#   memory  = [100,120) + [890,900) = 30 (no compute there)
#   gap [520,530): launch windows K2 [510,525) and K3 [526,529) cover 5 + 3 = 8 -> launch 8
#   idle = [525,526) + [529,530) = 2.        760 + 30 + 8 + 2 = 800
# memory_bound:
#   HtoD s14 [100,600) call [90,95); K s7 [200,300); memset s7 [600,650);
#   DtoH s14 [700,1100) call [640,660).  window [100,1100) = 1000
#   compute = 100; memory = [100,200)+[300,650)+[700,1100) = 100+350+400 = 850
#   gap [650,700): DtoH call [640,660) covers [650,660) -> launch 10, idle 40.  sum 1000
# launch_bound:
#   X s13 [102,114) call [90,100); k_i s7 [112+10i, 115+10i) call [100+10i, 110+10i), i=0..9
#   window [102,205) = 103
#   compute = [102,115) (X U k0) + k1..k9 9*3 = 13 + 27 = 40
#   gaps [115+10i, 122+10i) for i=0..8 (9 x 7 us): call i+1 covers [115+10i,120+10i) and
#   call i+2 covers [120+10i,122+10i) while i+2 <= 9; gap i=8 [195,202) has only call 9
#   ([190,200)) -> 5 launch + 2 idle.  launch = 8*7 + 5 = 61, idle = 2.  40+61+2 = 103
# comm_bound:
#   K1 s7 [100,300); NCCL s20 [250,700); K2 s7 [700,800); DtoD copy s14 [650,720)
#   window [100,800) = 700; compute = 200 + 100 = 300
#   comm [250,700): under compute [250,300) = 50 (overlapped), exposed [300,700) = 400
#   copy [650,720) is under comm [650,700) and compute [700,720) -> memory 0
#   comm_overlap_pct = 50 / (50 + 400) * 100 = 11.11...;  300 + 400 = 700
# sync_bound:
#   K1 s7 [100,200) call [90,95); K2 s13 [150,250) call [96,99);
#   cudaDeviceSynchronize [100,252) (a SYNCHRONIZATION row, not busy);
#   K3 s7 [410,510) call [400,405); sync cudaMemcpy DtoH s7 [510,520) call [412,522);
#   K4 s7 [710,760) call [700,705); cudaStreamSynchronize [706,761)
#   window [100,760) = 660 (the stream sync row ending at 761 does not extend it)
#   compute = [100,250) + [410,510) + [710,760) = 150 + 100 + 50 = 300; memory = 10
#   gap [250,410): cudaDeviceSynchronize still blocks [250,252) -> host_sync 2;
#     K3 call [400,405) -> launch 5, idle 153 (the memcpy call starts at 412)
#   gap [520,710): the blocking cudaMemcpy [412,522) covers [520,522) -> host_sync 2;
#     K4 call [700,705) -> launch 5; cudaStreamSynchronize [706,761) -> host_sync 4;
#     idle 190 - 2 - 5 - 4 = 179
#   launch 10, host_sync 8, idle 332;  300 + 10 + 10 + 8 + 332 = 660
GOLDEN = {
    #                 window compute memory comm  launch warmup sync idle overlapped
    "compute_bound": (800, 760, 30, 0, 8, 0, 0, 2, 0),
    "memory_bound": (1000, 100, 850, 0, 10, 0, 0, 40, 0),
    "launch_bound": (103, 40, 0, 0, 61, 0, 0, 2, 0),
    "comm_bound": (700, 300, 0, 400, 0, 0, 0, 0, 50),
    "sync_bound": (660, 300, 10, 0, 10, 0, 8, 332, 0),
}
COLS = ["window_ns", "compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns",
        "warmup_ns", "host_sync_ns", "idle_ns", "overlapped_comm_ns"]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_breakdown(name: str) -> None:
    b = check_attribution(breakdown(scenario_timeline(name)))
    assert b.height == 1
    row = b.row(0, named=True)
    assert (row["rank"], row["device_id"]) == (0, 0)
    assert tuple(row[c] for c in COLS) == tuple(v * US for v in GOLDEN[name])


def test_comm_overlap_pct() -> None:
    b = breakdown(scenario_timeline("comm_bound"))
    assert b["comm_overlap_pct"][0] == pytest.approx(100 * 50 / 450)
    assert breakdown(scenario_timeline("compute_bound"))["comm_overlap_pct"][0] is None


def test_explicit_window() -> None:
    # compute_bound restricted to [400,600) us: compute [400,520)+[530,600) = 190,
    # gap [520,530) -> launch 8, idle 2; memory none.  190 + 8 + 2 = 200
    b = breakdown(scenario_timeline("compute_bound"), window=(400 * US, 600 * US))
    row = b.row(0, named=True)
    assert (row["window_ns"], row["compute_ns"], row["launch_overhead_ns"], row["idle_ns"],
            row["memory_ns"]) == (200 * US, 190 * US, 8 * US, 2 * US, 0)
    # a window before any activity is all idle (launch calls start at 80 us)
    b = breakdown(scenario_timeline("compute_bound"), window=(0, 50 * US))
    assert b["idle_ns"][0] == 50 * US and b["window_ns"][0] == 50 * US


def test_breakdown_per_step_sums_and_names() -> None:
    tl = scenario_timeline("mini_train")
    wins = range_windows(tl, r"^step \d+$")
    assert wins["window_name"].to_list() == ["step 0", "step 1", "step 2"]
    b = check_attribution(breakdown_windows(tl, wins))
    assert b["window_name"].to_list() == ["step 0", "step 1", "step 2"]
    assert (b["window_ns"] == wins["window_end_ns"] - wins["window_start_ns"]).all()
    # every step runs two all-reduces; the second is exposed (nothing left to overlap)
    assert (b["communication_ns"] > 0).all() and (b["overlapped_comm_ns"] > 0).all()


def test_breakdown_by_stream() -> None:
    # comm_bound per stream: stream 20 (NCCL [250,700)) window 450: compute on *its* stream
    # is 0, so all 450 us are exposed communication.
    from traceparse.analyses.attribution import breakdown_by_stream

    b = check_attribution(breakdown_by_stream(scenario_timeline("comm_bound")))
    s20 = b.filter(pl.col("stream_id") == 20).row(0, named=True)
    assert (s20["window_ns"], s20["communication_ns"]) == (450 * US, 450 * US)


# Gaps, by hand (us). sync_bound, min 1 us: [520,710) 190: the blocking cudaMemcpy
# [412,522) covers [520,522) (host_sync 2), K4's call [700,705) launch 5, the stream sync
# [706,761) covers [706,710) (host_sync 4), idle 179. The memcpy ended 2 us into the gap: it
# covers 2 of 190 us and explains nothing; host_postprocess [522,700) covers 178 >= 95 ->
# cpu_work. Then [250,410) 160: cudaDeviceSynchronize [100,252) blocks 2 us, K3's call
# [400,405) launch 5, idle 153; host_postprocess [252,400) covers 148 >= 80 -> cpu_work.
def test_gaps_sync_bound() -> None:
    g = idle_gaps(scenario_timeline("sync_bound"), min_ns=1 * US)
    assert g.select("start_ns", "end_ns", "launch_overhead_ns", "host_sync_ns", "idle_ns",
                    "kind", "cause", "cause_name", "cause_start_ns", "cause_end_ns").rows() == [
        # each gap begins while a blocking call waits (the synchronous cudaMemcpy [412, 522)
        # at 520, cudaDeviceSynchronize [100, 252) at 250): the GPU drained while the host
        # waited, so the sync, not host_postprocess after it, is the cause (issue 24)
        (520 * US, 710 * US, 5 * US, 6 * US, 179 * US, "idle", "host_sync", "cudaMemcpy_v3020",
         412 * US, 522 * US),
        (250 * US, 410 * US, 5 * US, 2 * US, 153 * US, "idle", "host_sync",
         "cudaDeviceSynchronize_v3020", 100 * US, 252 * US),
    ]
    assert set(g["cause_detail"]) == {
        "the GPU drained while the host waited; then cpu_work: host_postprocess"}
    # above 170 us only the first remains
    assert idle_gaps(scenario_timeline("sync_bound"), min_ns=170 * US).height == 1


def test_gaps_cpu_work_and_launch_kinds() -> None:
    # launch_bound: nine 7 us gaps; the first eight are all launch overhead, the last
    # ([195,202)) is 5 launch + 2 idle -> still kind launch_overhead (5 > 2). Each gap is
    # covered by launch calls (call i+1 [110+10i, 120+10i) covers 5 of 7 us); the gap is
    # mostly launch overhead, so the host was issuing the next kernel -> issuing.
    g = idle_gaps(scenario_timeline("launch_bound"), min_ns=1 * US)
    assert g.height == 9
    assert g["launch_overhead_ns"].sum() == 61 * US and g["idle_ns"].sum() == 2 * US
    assert set(g["kind"]) == {"launch_overhead"} and set(g["cause"]) == {"issuing"}
    assert set(g["cause_name"]) == {"cudaLaunchKernel_v7000"}
    # mini_train: the gaps between steps start while loss.item()'s stream sync is waiting,
    # but the sync returns early in the gap; the "dataloader" range that follows covers it:
    # data-loading evidence, so input_pipeline (it wins over the sync-drain rule)
    g = idle_gaps(scenario_timeline("mini_train"), min_ns=100 * US)
    assert g.height == 2 and set(g["cause_name"]) == {"dataloader"}
    assert set(g["cause"]) == {"input_pipeline"}
    assert ((g["cause_end_ns"] - g["start_ns"]) * 2 >= g["dur_ns"]).all()


def test_gaps_cpu_work_range() -> None:
    # sync_bound without its sync calls: gap [250,410) overlaps host_postprocess [252,400)
    # by 148 us -> cpu_work; gap [520,710) overlaps host_postprocess [522,700) -> cpu_work.
    tl = scenario_timeline("sync_bound")
    tl.api = tl.api.filter(~pl.col("name").cast(pl.String).str.contains("Synchronize|Memcpy_"))
    g = idle_gaps(tl, min_ns=1 * US)
    assert g.select("start_ns", "cause", "cause_name").rows() == [
        (520 * US, "cpu_work", "host_postprocess"), (250 * US, "cpu_work", "host_postprocess")]


def test_empty_timeline() -> None:
    from traceparse.timeline import Timeline

    assert breakdown(Timeline()).height == 0
    assert idle_gaps(Timeline()).height == 0
