"""Host-sync time by the framework op that made the blocking call
(analyses/host_sync.py): hand-made traces with hand-computed answers, then the shared
scenarios' own events."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse.analyses.host_sync import host_sync_by_call, host_sync_by_op


def _tl() -> traceparse.Timeline:
    """k1 [0, 10) launched by API [0, 2) (corr 1). Thread 2 then blocks in
    cudaStreamSynchronize [12, 50) inside aten::_local_scalar_dense [11, 52) inside
    aten::item [10, 55) (depths 1 and 0); k2 [60, 70) launched at [55, 58) (corr 3). The GPU
    is idle over [10, 60): the sync covers [12, 50) of it, 38 ns of host sync. A second
    thread 3 calls cudaDeviceSynchronize [61, 65) with no op around it while k2 runs: no
    host-sync time, so it is not listed."""
    return timeline(
        gpu=gpu([{"name": "k1", "start_ns": 0, "end_ns": 10, "correlation_id": 1},
                 {"name": "k2", "start_ns": 60, "end_ns": 70, "correlation_id": 3}]),
        api=api([{"start_ns": 0, "end_ns": 2, "correlation_id": 1},
                 {"name": "cudaStreamSynchronize", "start_ns": 12, "end_ns": 50,
                  "correlation_id": 2},
                 {"start_ns": 55, "end_ns": 58, "correlation_id": 3},
                 {"name": "cudaDeviceSynchronize", "start_ns": 61, "end_ns": 65,
                  "correlation_id": 4, "thread_id": 3}]),
        ranges=ranges([{"kind": "cpu_op", "name": "aten::item", "start_ns": 10, "end_ns": 55,
                        "depth": 0},
                       {"kind": "cpu_op", "name": "aten::_local_scalar_dense",
                        "start_ns": 11, "end_ns": 52, "depth": 1}]))


def test_outermost_op_names_the_sync() -> None:
    tl = _tl()
    by_call = host_sync_by_call(tl)
    assert by_call.rows() == [("cudaStreamSynchronize", 38)]
    assert host_sync_by_op(tl).rows() == [("aten::item", "cudaStreamSynchronize", 1, 38)]


def test_no_op_recorded() -> None:
    """Without ops (an nsys export, a bare synchronize) the op is null and the call says
    what blocked."""
    tl = _tl()
    tl = traceparse.Timeline(gpu=tl.gpu, api=tl.api, ranges=tl.ranges.clear(),
                             sources=tl.sources).validate()
    assert host_sync_by_op(tl).rows() == [(None, "cudaStreamSynchronize", 1, 38)]


@pytest.mark.shared
@pytest.mark.parametrize("scenario,want", [
    # the planted .item() per iteration and the torch.cuda.synchronize() the runner adds
    ("host_sync-bottleneck", {"aten::item", None}),
    # pageable copies: the blocking copy calls come from .to()
    ("pageable_copy-bottleneck", {"aten::to"}),
])
def test_scenarios_name_their_ops(scenario: str, want: set[str | None]) -> None:
    """Every op named encloses its calls in the trace's own events: the op range on the
    call's thread covers the call's start, and no cpu_op there encloses the named one."""
    tl = traceparse.load(TRACES / "gpu" / "scenarios" / f"{scenario}.json.gz")
    got = host_sync_by_op(tl)
    assert set(got["op"].to_list()) == want
    assert got["host_sync_ns"].sum() == host_sync_by_call(tl)["host_sync_ns"].sum()
    ops = tl.ranges.filter(pl.col("kind").cast(pl.String) == "cpu_op")
    for r in got.filter(pl.col("op").is_not_null()).iter_rows(named=True):
        calls = tl.api.filter(pl.col("name").cast(pl.String) == r["call"])
        named = 0
        for c in calls.iter_rows(named=True):
            around = ops.filter((pl.col("thread_id") == c["thread_id"])
                                & (pl.col("start_ns") <= c["start_ns"])
                                & (pl.col("end_ns") > c["start_ns"]))
            if around.height and around.sort("depth")["name"].cast(pl.String)[0] == r["op"]:
                named += 1
        assert named >= r["calls"]


def test_verdict_names_the_op() -> None:
    """Window [0, 70): compute 20, host sync 38 (the sync inside aten::item), the rest
    launch overhead and idle: host-sync-bound, and the verdict says where the sync came
    from; without the ops it names the call alone."""
    from traceparse.analyses.summary import summarize

    tl = _tl()
    assert summarize(tl)["verdict"].startswith(
        "host-sync-bound: 54.3% of the window is the host blocked in a synchronising call "
        "(mostly cudaStreamSynchronize, from aten::item)")
    bare = traceparse.Timeline(gpu=tl.gpu, api=tl.api, ranges=tl.ranges.clear(),
                               sources=tl.sources).validate()
    assert "(mostly cudaStreamSynchronize)" in summarize(bare)["verdict"]


def test_overlap_with_hand_computed():
    """Calls against the host-sync intervals [10, 20) and [30, 40): the overlap is the
    summed clipped length; touching is not overlapping; a zero-length call inside an
    interval overlaps it by 0 (the interval join's rule: start < end' and end > start')."""
    import numpy as np

    from traceparse.analyses.host_sync import overlap_with

    h0, h1 = np.array([10, 30]), np.array([20, 40])
    s = np.array([0, 15, 20, 12, 35, 40, 5, 25])
    e = np.array([10, 35, 30, 12, 50, 45, 45, 26])
    hit, ov = overlap_with(h0, h1, s, e)
    assert hit.tolist() == [False, True, False, True, True, False, True, False]
    assert ov.tolist() == [0, 10, 0, 0, 5, 0, 20, 0]
