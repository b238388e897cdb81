"""Audit (issue 25): on every shared trace, the tool's conclusions are supported by the
trace's own events, read **independently** of traceparse (``sqlite3`` on the nsys export,
``json`` on the Kineto file; never the tool's timeline or analyses).

Conclusions audited, from the report payload (:func:`traceparse.reports.payload.build_payload`,
the numbers ``summary`` and ``report`` print):

* **the verdict**: its named part and share. A GPU-busy part (compute, communication, copies)
  cannot exceed the union of the GPU activity of that kind over the window (each device's
  first to last activity, summed); a GPU-idle part (launch, warm-up, host sync, idle, stream
  wait) cannot exceed the window's time with no GPU activity; host sync also lies inside host
  API calls of the device's processes.
* **the largest gaps** (the payload's first :data:`TOP_GAPS`): no GPU activity of the device
  runs inside the gap; the blamed call or range exists in the file (name, thread, times) and
  covers the share the cause claims (half of the gap by the covering rule; the gap's start
  for a sync the GPU drained at; a first call in the gap starts inside it; a sampled frame
  its stated percentage); a ``stream_wait`` cause has a stream-wait call of the process
  before the gap ends, and the held activity runs on the named stream no earlier than the
  gap's end; an ``unknown`` cause has no host API call covering half of the gap.
* **fix 1**: its saving is at most its rank's window and the time it removes (the GPU-idle
  time for fixes built on idle time, the gap time of its class for ``stream-wait``, the
  named kernels' time for ``occupancy``/``tensor-cores``, the copies' time for
  ``overlap-copies``), and every kernel or call its evidence names exists in the file (an
  under-filled kernel with the stated grid and block).

The raw readers (``audit_raw.py``) are deliberately small and separate from traceparse's
readers; the rules are in ``conclusions_rules.py``. The one lookup taken from the tool is
which processes form a rank (a multi-process nsys export); every time, name and id comes
from the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from audit_raw import (
    Raw,
    read_raw,
)
from conclusions_rules import _devices, audit_fix, audit_gaps, audit_verdict
from conftest import TRACES, ids, shared_files

NSYS = shared_files("nsys", "*.sqlite")
TORCH = shared_files("torch", "*.json*")
GPU = sorted((TRACES / "gpu").rglob("*.json.gz")) if (TRACES / "gpu").is_dir() else []
#: The H100 nsys captures of a known cause (the repository's own, scrubbed): a training
#: step whose backward runs on autograd's thread, decode with NVTX steps.
H100 = sorted(p for d in ("train_nsys", "decode_nsys") for p in
              (Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures" / d)
              .glob("*_eager.sqlite.gz"))
ALL = NSYS + TORCH + GPU + H100


@pytest.fixture(scope="module")
def conclusions() -> Any:
    """The payload of one file, built once per file (the report's own computation)."""
    from traceparse.loader import load
    from traceparse.reports.payload import build_payload

    memo: dict[Path, tuple[dict[str, Any], dict[int, set[int]]]] = {}

    def get(path: Path) -> tuple[dict[str, Any], dict[int, set[int]]]:
        if path not in memo:
            tl = load(path)
            pids: dict[int, set[int]] = {}
            for r, p in tl.gpu.select("rank", "process_id").unique().iter_rows():
                if p is not None:
                    pids.setdefault(int(r), set()).add(int(p))
            payload = build_payload(tl)
            # `traceparse summary` (10 gaps listed) and the report (50) state one verdict
            from traceparse.analyses.summary import summarize

            payload["_summary_cli_verdict"] = summarize(tl)["verdict"]
            memo[path] = (payload, pids)
        return memo[path]
    return get


@pytest.mark.shared
@pytest.mark.parametrize("path", ALL, ids=ids(ALL))
def test_conclusions_hold_on_the_files_own_events(path: Path, conclusions: Any) -> None:
    payload, rank_pids = conclusions(path)
    raw = read_raw(path)
    devs = _devices(raw, payload, rank_pids)
    problems = (audit_verdict(raw, payload, devs) + audit_gaps(raw, payload, devs)
                + audit_fix(raw, payload, devs))
    for r in payload.get("summary", {}).get("savings", []):
        # a fix replayed without the profiler removes at least what the profiler's removal
        # alone does: never a negative saving
        su = r.get("saving_unprofiled_ns")
        if su is not None and su < 0:
            problems.append(f"{r['change']} rank {r['rank']}: saves {su} ns without the "
                            "profiler")
    cli = payload["_summary_cli_verdict"]
    if cli != payload.get("summary", {}).get("verdict", cli):
        problems.append(f"summary says {cli!r}, the report {payload['summary']['verdict']!r}")
    # the JSON's label is the verdict's own (it said "host-bound" for stream-wait-bound)
    bound = payload.get("recommendations", {}).get("verdict", {}).get("bound")
    if bound is not None and not cli.startswith(f"{bound}:"):
        problems.append(f"the report's bound {bound!r} is not the verdict's: {cli!r}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------- the audit itself fails on false claims


def test_the_audit_catches_false_conclusions() -> None:
    # one device: kernels [0,100) and [400,500); a cudaMemcpy [90,400) on thread 7
    us = 1000
    raw = Raw(gpu=[(1, 0, 7, 0, 100 * us, "kernel", "k", 1, "1x1x1", "32x1x1"),
                   (1, 0, 7, 400 * us, 500 * us, "kernel", "k", 1, "1x1x1", "32x1x1")],
              calls=[(1, 7, "cudaMemcpy", 90 * us, 400 * us)])
    payload: dict[str, Any] = {
        "attribution": {"rows": [{"rank": 0, "device_id": 0, "window_ns": 500 * us}],
                        "totals": {"window_ns": 500 * us}},
        "summary": {"verdict": "host-sync-bound: 60.0% of the window is the host blocked"},
        "gaps": {"table": {"rows": [
            {"rank": 0, "device_id": 0, "start_ns": 100 * us, "end_ns": 400 * us,
             "dur_ns": 300 * us, "cause": "host_sync", "cause_name": "cudaMemcpy",
             "cause_thread_id": 7, "cause_start_ns": 90 * us, "cause_end_ns": 400 * us}]},
                 "by_cause": []},
        "recommendations": {"items": [{"id": "host-sync", "saving_ns": 300 * us,
                                       "window_ns": 500 * us,
                                       "evidence": []}]}}
    devs = _devices(raw, payload, {0: {1}})
    # true: idle 300 of 500 = 60%, covered by the call; saving 300 <= idle 300
    assert audit_verdict(raw, payload, devs) + audit_gaps(raw, payload, devs) \
        + audit_fix(raw, payload, devs) == []
    payload["summary"]["verdict"] = "host-sync-bound: 70.0% of the window is the host blocked"
    assert "the GPU is idle for 60.00%" in audit_verdict(raw, payload, devs)[0]
    payload["gaps"]["table"]["rows"][0]["cause_thread_id"] = 8  # the call is on thread 7
    assert "no call or range 'cudaMemcpy' on thread 8" in audit_gaps(raw, payload, devs)[0]
    payload["gaps"]["table"]["rows"][0].update(cause_thread_id=7, start_ns=50 * us)
    assert "ran activity for 50000 ns inside the gap" in audit_gaps(raw, payload, devs)[0]
    payload["recommendations"]["items"][0]["saving_ns"] = 310 * us
    assert "more than the GPU's idle time 300000 ns" in audit_fix(raw, payload, devs)[0]
    # a stream wait needs its wait call before the gap and the held work on its stream
    payload["gaps"]["table"]["rows"][0].update(
        start_ns=100 * us, cause="stream_wait",
        cause_name="cudaStreamWaitEvent on stream 7: held k back; event x; producer y")
    got = audit_gaps(raw, payload, devs)
    assert got == [f"gap [{100 * us}, {400 * us}) (0, 0) stream_wait "
                   f"{payload['gaps']['table']['rows'][0]['cause_name']!r}: no "
                   "cudaStreamWaitEvent call before the gap ends"]
    raw.calls.append((1, 7, "cudaStreamWaitEvent", 80 * us, 81 * us))
    assert audit_gaps(raw, payload, devs) == []
    # removing syncs gives the host back at most the time it waited in them
    payload["recommendations"]["items"][0]["saving_ns"] = 300 * us
    assert audit_fix(raw, payload, devs) == []
    payload["recommendations"]["items"][0]["evidence"] = [
        "Replaying rank 0 with the fix (whatif --fix host-sync) shortens its window.",
        "Gap of 300 µs on rank 1 (host_sync): cudaMemcpy (thread 7)."]
    assert audit_fix(raw, payload, devs) == [
        f"fix 1 host-sync ({300 * us} ns): evidence quotes a gap of rank 1 for a saving of "
        "rank 0"]
    payload["recommendations"]["items"][0]["evidence"] = []
    raw.calls[0] = (1, 7, "cudaMemcpy", 90 * us, 250 * us)
    assert audit_fix(raw, payload, devs) == [
        f"fix 1 host-sync ({300 * us} ns): saves more than the {161 * us} ns its rank's "
        "host spent in blocking calls"]


def test_the_audit_checks_unrecorded_dispatch() -> None:
    # kernels [0,100) and [400,500); thread 7 launches at [80,90) and [380,390) inside
    # ProfilerStep#1 [0,600), with aten::cat [330,390) its only op in the gap [100,400):
    # 60 us named + 240 us in no range ([100,330) and [390,400)) >= half of 300
    us = 1000
    raw = Raw(gpu=[(1, 0, 7, 0, 100 * us, "kernel", "k", 1, "1x1x1", "32x1x1"),
                   (1, 0, 7, 400 * us, 500 * us, "kernel", "k", 1, "1x1x1", "32x1x1")],
              calls=[(1, 7, "cudaLaunchKernel", 80 * us, 90 * us),
                     (1, 7, "cudaLaunchKernel", 380 * us, 390 * us)],
              ranges=[(1, 7, "ProfilerStep#1", 0, 600 * us),
                      (1, 7, "aten::cat", 330 * us, 390 * us)])
    row = {"rank": 0, "device_id": 0, "start_ns": 100 * us, "end_ns": 400 * us,
           "dur_ns": 300 * us, "cause": "issuing", "cause_name": "aten::cat",
           "cause_thread_id": 7, "cause_start_ns": 330 * us, "cause_end_ns": 390 * us,
           "cause_detail": "unrecorded dispatch: 77% of the gap lies in no recorded range"}
    payload: dict[str, Any] = {
        "attribution": {"rows": [{"rank": 0, "device_id": 0, "window_ns": 500 * us}],
                        "totals": {"window_ns": 500 * us}},
        "gaps": {"table": {"rows": [row]}, "by_cause": []}}
    devs = _devices(raw, payload, {0: {1}})
    assert audit_gaps(raw, payload, devs) == []
    # recorded ops cover the rest of the gap ([100,300) nested: 200 us once): the claim is
    # false, 60 + 40 < 150
    raw.ranges += [(1, 7, "aten::view", 100 * us, 300 * us),
                   (1, 7, "aten::as_strided", 150 * us, 200 * us)]
    assert "cover less than half the gap" in audit_gaps(raw, payload, devs)[0]
    raw.ranges = raw.ranges[:2]
    # no op overlaps the gap at all: named "unrecorded dispatch" (thread 7's time in no
    # range, [100,330) + [390,400) = 240 of 300 us); a false one if ops covered it
    row.update(cause_name="unrecorded dispatch", cause_start_ns=100 * us,
               cause_end_ns=330 * us)
    assert audit_gaps(raw, payload, devs) == []
    raw.ranges.append((1, 7, "aten::view", 100 * us, 300 * us))
    assert "cover less than half the gap" in audit_gaps(raw, payload, devs)[0]
    raw.ranges = raw.ranges[:2]
    # the gap in no step
    raw.ranges[0] = (1, 7, "ProfilerStep#1", 450 * us, 600 * us)
    assert audit_gaps(raw, payload, devs) == [
        f"gap [{100 * us}, {400 * us}) (0, 0) issuing 'unrecorded dispatch': no "
        "ProfilerStep holds the gap"]
