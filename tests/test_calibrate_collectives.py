"""Calibration's collective calls are matched as ``collective_skew`` matches them.

``calibrate`` takes a collective call's duration as the minimum of its kernels over the
ranks (the others include waiting for the straggler). Calls are paired by order (the *i*-th
kernel of a collective in a process group on each rank), and a pair whose kernels cannot be
one call (in an all-to-all-dependent collective one kernel ended before the other started)
has no call duration: its minimum is one rank's kernel of some other call. The pairing and
that check are one definition, :func:`traceparse.analyses.comm.matched_calls`, shared with
``collective_skew`` (docs/calibration.md, "Collectives").
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import shared_files
from perf_helpers import gpu, timeline

import traceparse
from traceparse.analyses.calibrate import calibrate, collective_fits, collective_instances
from traceparse.analyses.comm import collective_skew

AR = "ncclKernel_AllReduce_RING_LL_Sum_float(x)"
SR = "ncclDevKernel_SendRecv(x)"


def _by_coll(cal: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {c["collective"]: c for c in cal["devices"][0]["collectives"]}


def test_unmatched_calls_are_left_out_of_the_fit_hand_made() -> None:
    # allreduce #0: rank 0 [100, 110) 10 ns, rank 1 [102, 109) 7 ns: overlap -> one call,
    #   duration min(10, 7) = 7.
    # allreduce #1: rank 0 [200, 230) 30 ns, rank 1 [240, 245) 5 ns: rank 0 ended at 230
    #   before rank 1 started at 240 -> not one call; before, min(30, 5) = 5 was a "call".
    # allreduce #2: rank 0 [300, 320) 20 ns, rank 1 [310, 319) 9 ns -> one call, 9.
    # -> instances 2 (durations 7, 9: P50 8), unmatched_calls 1, max_ranks_seen 2.
    # sendrecv #0: rank 0 [500, 510), rank 1 [520, 524): apart, but a send/recv pair cannot
    #   be checked (one side may only send) -> kept: min(10, 4) = 4.
    rows = [{"rank": 0, "name": AR, "start_ns": 100, "end_ns": 110},
            {"rank": 1, "name": AR, "start_ns": 102, "end_ns": 109, "device_id": 1},
            {"rank": 0, "name": AR, "start_ns": 200, "end_ns": 230},
            {"rank": 1, "name": AR, "start_ns": 240, "end_ns": 245, "device_id": 1},
            {"rank": 0, "name": AR, "start_ns": 300, "end_ns": 320},
            {"rank": 1, "name": AR, "start_ns": 310, "end_ns": 319, "device_id": 1},
            {"rank": 0, "name": SR, "start_ns": 500, "end_ns": 510},
            {"rank": 1, "name": SR, "start_ns": 520, "end_ns": 524, "device_id": 1}]
    tl = timeline(gpu=gpu(rows))
    inst = collective_instances(tl)
    assert inst.filter(inst["collective"] == "allreduce").select(
        "seq", "dur_ns", "ranks", "same_call").rows() == [
        (0, 7, 2, True), (1, 5, 2, False), (2, 9, 2, True)]
    # the same verdict per call as collective_skew's
    skew = {(r["collective"], r["seq"]): r["same_call"]
            for r in collective_skew(tl).iter_rows(named=True)}
    assert skew == {(r["collective"], r["seq"]): r["same_call"]
                    for r in inst.iter_rows(named=True)}
    fits = {c["collective"]: c for c in collective_fits(inst)}
    ar = fits["allreduce"]
    assert (ar["instances"], ar["unmatched_calls"], ar["max_ranks_seen"]) == (2, 1, 2)
    assert ar["duration_ns"] == {"p50": 8.0, "p95": 7 + 0.95 * (9 - 7)}
    sr = fits["sendrecv"]
    assert (sr["instances"], sr["unmatched_calls"], sr["duration_ns"]["p50"]) == (1, 0, 4.0)
    cal = _by_coll(calibrate(tl))
    assert cal["allreduce"]["instances"] == 2 and cal["allreduce"]["unmatched_calls"] == 1


def test_all_calls_unmatched_keeps_the_entry_without_durations_hand_made() -> None:
    # allreduce seen on 2 ranks, its one pair apart ([0, 10) and [20, 30)): no call duration
    # -> instances 0, unmatched 1, durations null, no fit; seen on 2 ranks, so not peer wait.
    rows = [{"rank": 0, "name": AR, "start_ns": 0, "end_ns": 10},
            {"rank": 1, "name": AR, "start_ns": 20, "end_ns": 30, "device_id": 1}]
    c = collective_fits(collective_instances(timeline(gpu=gpu(rows))))[0]
    assert (c["instances"], c["unmatched_calls"], c["max_ranks_seen"],
            c["includes_peer_wait"], c["fit"]) == (0, 1, 2, False, None)
    assert c["duration_ns"] == {"p50": None, "p95": None}


SAMPLED = shared_files("torch", "hta__sampled_rank-*.json.gz")
_OP = re.compile(r"^nccl:(\w+)$")
_NORM = {"all_reduce": "allreduce", "_all_gather_base": "allgather",
         "all_to_all": "alltoall"}


@pytest.mark.shared
def test_sampled_ranks_calibrate_only_calls_that_can_be_one(tmp_path: Path) -> None:
    """hta sampled_rank-0 and -1 (2 ranks of a 128-rank job, as one timeline: a rank
    directory) label every ``ncclKernel_SendRecv`` by the ``nccl:`` op that launched it.
    From the raw kernels (gzip + json): of the 10 order-paired calls, allreduce #1 and #2 and
    all 4 all-to-alls have one rank's kernel ending before the other's starts. Before, they
    were calibrated as 2-rank calls with the minimum of the two: allreduce 4 instances,
    P50/P95 11.10/17.05 ms; alltoall 4 instances, P50 35.1 ms. After: allreduce 2 calls
    (8.37 and 13.84 ms: P50 11.10 ms, P95 13.56 ms), 2 unmatched; alltoall 0 calls, 4
    unmatched; allgather unchanged (2 calls)."""
    assert len(SAMPLED) == 2
    seqs: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for f in SAMPLED:
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        ev = doc["traceEvents"]
        ops = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")
               and _OP.match(e.get("name", ""))]
        calls = {e["args"]["correlation"]: e for e in ev
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        seen: Counter[str] = Counter()
        for k in sorted((e for e in ev if e.get("cat") == "kernel"
                         and "nccl" in e["name"].lower()), key=lambda e: e["ts"]):
            call = calls[k["args"]["correlation"]]
            held = [o for o in ops if (o["pid"], o["tid"]) == (call["pid"], call["tid"])
                    and o["ts"] <= call["ts"] <= o["ts"] + o["dur"]]
            m = _OP.match(max(held, key=lambda o: o["ts"])["name"])
            assert m is not None
            coll = _NORM[m.group(1)]
            # microsecond floats with whole-microsecond values in this trace
            s, d = round(k["ts"] * 1000), round(k["dur"] * 1000)
            seqs.setdefault((coll, seen[coll]), []).append((s, s + d))
            seen[coll] += 1
    raw: dict[str, dict[str, object]] = {}
    for (coll, _), v in sorted(seqs.items()):
        r = raw.setdefault(coll, {"durs": [], "unmatched": 0})
        if min(e for _, e in v) >= max(s for s, _ in v):
            r["durs"].append(min(e - s for s, e in v))  # type: ignore[attr-defined]
        else:
            r["unmatched"] += 1  # type: ignore[operator]
    for f in SAMPLED:
        (tmp_path / f.name).symlink_to(f)
    got = _by_coll(calibrate(traceparse.load(tmp_path)))
    assert sorted(got) == sorted(raw) == ["allgather", "allreduce", "alltoall"]
    for coll, r in raw.items():
        durs = np.asarray(r["durs"], dtype=np.float64)
        c = got[coll]
        assert (c["instances"], c["unmatched_calls"], c["max_ranks_seen"]) == (
            durs.size, r["unmatched"], 2), coll
        want = ({"p50": float(np.percentile(durs, 50)), "p95": float(np.percentile(durs, 95))}
                if durs.size else {"p50": None, "p95": None})
        assert c["duration_ns"] == want, coll
    assert (got["allreduce"]["instances"], got["allreduce"]["unmatched_calls"]) == (2, 2)
    assert got["allreduce"]["duration_ns"]["p50"] == pytest.approx(11_104_000)
    assert (got["alltoall"]["instances"], got["alltoall"]["unmatched_calls"]) == (0, 4)
