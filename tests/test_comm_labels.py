"""Which collective a communication kernel is: the op that launched it, not the kernel name.

NCCL runs all-to-all (and, in the NCCL builds of the shared HTA traces, allreduce, allgather
and reduce-scatter too) as ``ncclKernel_SendRecv_*`` kernels. When the trace carries no
``Collective name`` argument, the collective is the ``c10d::``/``nccl:`` op whose span holds
the kernel's launch call (docs/analyses.md, "Communication"); the kernel name is only the
last resort (a kernel launched before the profiler window has no launch call to look at).
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACES, ids, shared_files
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse import units
from traceparse.analyses.attribution import breakdown
from traceparse.analyses.comm import (
    collective_skew,
    collectives,
    comm_summary,
    concurrency,
    no_collectives_reason,
    straggler_summary,
)

_SENDRECV = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"


def test_launching_op_names_the_collective_hand_made() -> None:
    # thread 2: nccl:all_to_all [10, 90) > c10d::alltoall_base_ [20, 80) > record_param_comms
    # [25, 75) (no Collective name: older PyTorch); c10d::allreduce_ [100, 140).
    # Launches (correlation -> start): 1 -> 50 (inside the alltoall op), 2 -> 110 (inside
    # allreduce_), 3 -> 95 (between the ops: no op holds it), 4: no launch call in the trace.
    # All four kernels are named SendRecv -> alltoall, allreduce, sendrecv, sendrecv.
    tl = timeline(
        ranges=ranges([
            {"name": "nccl:all_to_all", "kind": "user_annotation", "start_ns": 10, "end_ns": 90},
            {"name": "c10d::alltoall_base_", "kind": "cpu_op", "start_ns": 20, "end_ns": 80},
            {"name": "record_param_comms", "kind": "cpu_op", "start_ns": 25, "end_ns": 75},
            {"name": "c10d::allreduce_", "kind": "cpu_op", "start_ns": 100, "end_ns": 140}]),
        api=api([{"start_ns": t, "end_ns": t + 2, "correlation_id": c}
                 for c, t in ((1, 50), (2, 110), (3, 95))]),
        gpu=gpu([{"name": _SENDRECV, "start_ns": 1000 + 100 * c, "end_ns": 1050 + 100 * c,
                  "correlation_id": c} for c in (1, 2, 3, 4)]))
    c = collectives(tl)
    assert c["collective"].to_list() == ["alltoall", "allreduce", "sendrecv", "sendrecv"]
    # a Collective name argument still wins over the op and the kernel name
    named = timeline(ranges=tl.ranges, api=tl.api, gpu=gpu([
        {"name": _SENDRECV, "start_ns": 1100, "end_ns": 1150, "correlation_id": 1,
         "coll_name": "_allgather_base"}]))
    assert collectives(named)["collective"].to_list() == ["allgather"]
    # the op on ANOTHER thread of the process does not name the kernel
    other = timeline(ranges=tl.ranges, api=api([{"start_ns": 50, "end_ns": 52,
                                                 "correlation_id": 1, "thread_id": 9}]),
                     gpu=gpu([{"name": _SENDRECV, "start_ns": 1100, "end_ns": 1150,
                               "correlation_id": 1}]))
    assert collectives(other)["collective"].to_list() == ["sendrecv"]


def test_emit_nvtx_counters_do_not_hide_the_collective_hand_made() -> None:
    # nsys with PyTorch's emit_nvtx: every range name ends in its counters
    # (", op_id = 993361", with shapes also ", sizes = [[4, 8]]"): the launch at 50 is
    # inside "nccl:all_to_all, op_id = 7" [10, 90) -> alltoall; the one at 110 inside
    # "c10d::allreduce_, seq = 3, op_id = 9, sizes = [[4, 8]]" [100, 140) -> allreduce
    tl = timeline(
        ranges=ranges([
            {"name": "nccl:all_to_all, op_id = 7", "kind": "nvtx_push_pop", "start_ns": 10,
             "end_ns": 90},
            {"name": "c10d::allreduce_, seq = 3, op_id = 9, sizes = [[4, 8]]",
             "kind": "nvtx_push_pop", "start_ns": 100, "end_ns": 140}]),
        api=api([{"start_ns": t, "end_ns": t + 2, "correlation_id": c}
                 for c, t in ((1, 50), (2, 110))]),
        gpu=gpu([{"name": _SENDRECV, "start_ns": 1000 + 100 * c, "end_ns": 1050 + 100 * c,
                  "correlation_id": c} for c in (1, 2)]))
    assert collectives(tl)["collective"].to_list() == ["alltoall", "allreduce"]


MFU = shared_files("nsys", "nsys-ai__mfu_2gpu_*.sqlite")


@pytest.mark.shared
@pytest.mark.parametrize("path", MFU, ids=ids(MFU))
def test_nsys_emit_nvtx_alltoall_is_alltoall(path: Path) -> None:
    """nsys-ai's two-GPU runs launch every ``ncclDevKernel_SendRecv`` from inside an
    ``nccl:all_to_all, op_id = N`` NVTX range (read from the SQLite: the kernel's runtime
    call by correlation id, the range on the call's thread holding its start); the comm
    table said "sendrecv" for all of them. The kernels without a launch call (queued before
    the capture) stay "sendrecv"."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT k.correlationId, k.globalPid,"
            " (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
            "  JOIN NVTX_EVENTS n ON n.globalTid = r.globalTid"
            "  AND n.start <= r.start AND n.end >= r.start"
            "  LEFT JOIN StringIds s ON s.id = n.textId"
            "  WHERE r.correlationId = k.correlationId"
            "  AND r.globalTid / 16777216 = k.globalPid / 16777216"
            "  AND coalesce(n.text, s.value) LIKE 'nccl:all_to_all,%')"
            " FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName"
            " WHERE d.value LIKE 'ncclDevKernel_SendRecv%'").fetchall()
    inside = sum(1 for *_, n in rows if n)
    assert inside >= 60 and len(rows) - inside == 2
    s = comm_summary(traceparse.load(path))
    got = dict(zip(s["collective"].to_list(), s["count"].to_list(), strict=True))
    assert got == {"alltoall": inside, "sendrecv": len(rows) - inside}


def test_skew_matches_calls_of_the_launching_op_hand_made() -> None:
    # Two ranks; each runs alltoall then allreduce, both as SendRecv kernels. By kernel name
    # both would be "sendrecv" #0 and #1; by op they are alltoall #0 (starts 1000, 1040:
    # skew 40, straggler rank 1) and allreduce #0 (starts 2000, 2010: skew 10, rank 1).
    rows_r: list[dict[str, Any]] = []
    rows_a: list[dict[str, Any]] = []
    rows_g: list[dict[str, Any]] = []
    for rank, starts in ((0, (1000, 2000)), (1, (1040, 2010))):
        rows_r += [{"rank": rank, "name": "c10d::alltoall_base_", "kind": "cpu_op",
                    "start_ns": 10, "end_ns": 90},
                   {"rank": rank, "name": "c10d::allreduce_", "kind": "cpu_op",
                    "start_ns": 100, "end_ns": 190}]
        rows_a += [{"rank": rank, "start_ns": 50, "end_ns": 52, "correlation_id": 1},
                   {"rank": rank, "start_ns": 150, "end_ns": 152, "correlation_id": 2}]
        rows_g += [{"rank": rank, "name": _SENDRECV, "start_ns": s, "end_ns": 2500 + s // 1000,
                    "correlation_id": c, "device_id": rank} for c, s in ((1, starts[0]),
                                                                           (2, starts[1]))]
    s = collective_skew(timeline(ranges=ranges(rows_r), api=api(rows_a), gpu=gpu(rows_g)))
    assert s.select("collective", "seq", "skew_ns", "straggler_rank").rows() == [
        ("alltoall", 0, 40, 1), ("allreduce", 0, 10, 1)]


# ------------------------------------------------------------------ the real files
_OP = re.compile(r"^(?:c10d::|nccl:)\w*?(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all"
                 r"|broadcast|send|recv)")
_NORM = {"allreduce": "allreduce", "all_reduce": "allreduce", "allgather": "allgather",
         "all_gather": "allgather", "reducescatter": "reducescatter",
         "reduce_scatter": "reducescatter", "alltoall": "alltoall", "all_to_all": "alltoall",
         "broadcast": "broadcast", "send": "sendrecv", "recv": "sendrecv"}


def _raw_collectives(paths: list[Path]) -> Counter[str]:
    """Independent of traceparse: per NCCL kernel, the collective of the innermost
    ``c10d::``/``nccl:`` cpu_op or annotation whose span holds its launch call (same pid and
    tid, joined by correlation), else the kernel name's ``<Coll>``; counted."""
    out: Counter[str] = Counter()
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as fh:
            doc = json.load(fh)
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        calls = {e["args"]["correlation"]: e for e in evs
                 if e.get("cat") in ("cuda_runtime", "cuda_driver")
                 and "correlation" in e.get("args", {})}
        ops = [e for e in evs if e.get("cat") in ("cpu_op", "user_annotation")
               and _OP.match(e.get("name", ""))]
        for k in evs:
            if k.get("cat") != "kernel" or "nccl" not in k.get("name", "").lower():
                continue
            call = calls.get(k["args"].get("correlation"))
            held = [] if call is None else [
                o for o in ops if (o["pid"], o["tid"]) == (call["pid"], call["tid"])
                and o["ts"] <= call["ts"] <= o["ts"] + o["dur"]]
            if held:
                m = _OP.match(max(held, key=lambda o: o["ts"])["name"])
                assert m is not None
                out[_NORM[m.group(1)]] += 1
            else:
                coll = re.search(r"Kernel_([A-Za-z]+)", k["name"])
                assert coll is not None
                out[_NORM.get(coll.group(1).lower(), "sendrecv")] += 1
    return out


OLD_KINETO = [p for p in shared_files("torch", "hta__*.json.gz")
              if p.stem.split(".")[0] in ("hta__negative_queue_length_rank0",
                                          "hta__sampled_rank-0", "hta__sampled_rank-1",
                                          "hta__trace_diff_control")]


@pytest.mark.shared
@pytest.mark.parametrize("path", OLD_KINETO, ids=ids(OLD_KINETO))
def test_collective_counts_equal_the_launching_ops(path: Path) -> None:
    """The shared HTA traces (no Collective name args; every NCCL kernel is a SendRecv
    kernel): the per-collective counts equal the raw events' launching ops, e.g.
    negative_queue_length_rank0: allreduce 10, alltoall 45, allgather 10, reducescatter 10,
    and 5 SendRecv kernels launched before the window -> sendrecv 5 (not sendrecv 80)."""
    s = comm_summary(traceparse.load(path))
    got = Counter(dict(zip(s["collective"].to_list(), s["count"].to_list(), strict=True)))
    assert got == _raw_collectives([path])


DLRM = shared_files("torch", "param__dlrm_8rank__worker*.json")


@pytest.mark.shared
def test_dlrm_alltoall_is_alltoall(tmp_path: Path) -> None:
    """DLRM's 8 ranks: the 40 SendRecv kernels are c10d::alltoall_base_ (nccl:all_to_all),
    the 24 AllReduce kernels c10d::allreduce_; the worst skew (7.624 ms, rank 7 last) is
    the first all-to-all."""
    assert len(DLRM) == 8
    for f in DLRM:
        (tmp_path / f.name).symlink_to(f)
    tl = traceparse.load(tmp_path)
    s = comm_summary(tl)
    got = Counter(dict(zip(s["collective"].to_list(), s["count"].to_list(), strict=True)))
    assert got == _raw_collectives(DLRM) == Counter({"alltoall": 40, "allreduce": 24})
    worst = collective_skew(tl).row(0, named=True)
    assert (worst["collective"], worst["seq"], worst["straggler_rank"]) == ("alltoall", 0, 7)


# ------------------------------------------------------------------ no collectives
def test_no_collectives_names_the_peer_copies_hand_made() -> None:
    # 3 PtoP copies of 10 ns (communication in the breakdown) and a compute kernel, no NCCL
    # kernel: comm has no rows, and its reason counts the copies: 3 x 10 = 30 ns.
    tl = timeline(gpu=gpu([{"name": "gemm", "start_ns": 0, "end_ns": 100}] + [
        {"name": "Memcpy PtoP", "kind": "memcpy", "copy_kind": "PtoP", "start_ns": s,
         "end_ns": s + 10} for s in (200, 300, 400)]))
    assert collectives(tl).height == 0
    assert no_collectives_reason(tl) == (
        "no NCCL/RCCL collective kernels in the trace; its communication is 3 peer-to-peer "
        "copies (30 ns, in the breakdown's communication), which are not collectives")
    plain = timeline(gpu=gpu([{"name": "gemm", "start_ns": 0, "end_ns": 100}]))
    assert no_collectives_reason(plain).endswith("so no communication to analyse")


P2P = shared_files("nsys", "p2p-acc__mpiV100.sqlite")


@pytest.mark.shared
@pytest.mark.parametrize("path", P2P, ids=ids(P2P))
def test_p2p_acc_peer_copies_are_named(path: Path) -> None:
    """p2p-acc's MPI ranks exchange 27 peer copies (copyKind 10, 40,736 ns in the sqlite:
    13,536 + 13,568 + 13,632 on ranks 1-3) and launch no NCCL kernel: comm must not say
    there is no communication when the breakdown shows those copies."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        n, total = db.execute("SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY"
                              " WHERE copyKind = 10").fetchone()
    tl = traceparse.load(path)
    assert collectives(tl).height == 0
    why = no_collectives_reason(tl)
    assert f"{n} peer-to-peer copies ({units.duration(total)}," in why
    assert (n, total) == (27, 40736)


# ------------------------------------------------------------------ concurrent collectives
def test_concurrency_hand_made() -> None:
    # device 0: compute [0, 50); allreduce [0, 100) on stream 20 and alltoall [80, 120) on
    # stream 21. Kernel time 100 + 40 = 140, union [0, 120) = 120 -> concurrent 20.
    # Exposed per kernel 50 + 40 = 90; union not under compute 120 - 50 = 70 -> 20 more.
    tl = timeline(gpu=gpu([
        {"name": "gemm", "start_ns": 0, "end_ns": 50},
        {"name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)", "start_ns": 0, "end_ns": 100,
         "stream_id": 20},
        {"name": "ncclDevKernel_AllToAll_RING(x)", "start_ns": 80, "end_ns": 120,
         "stream_id": 21}]))
    assert concurrency(tl) == {"concurrent_ns": 20, "concurrent_exposed_ns": 20}
    assert comm_summary(tl)["exposed_ns"].sum() == 90
    from traceparse.reports.sections import comm_section

    note = comm_section(tl)["note"]  # type: ignore[index]
    assert ("for 20 ns: each kernel counts that time, so the exposed column adds up to "
            "20 ns more than the breakdown's exposed communication") in note
    one = timeline(gpu=gpu([{"name": "ncclKernel_AllReduce_RING_LL_Sum_float(x)",
                             "start_ns": 0, "end_ns": 100}]))
    assert "same time" not in comm_section(one)["note"]  # type: ignore[index]


def _us_to_ns(v: Any) -> int:
    return v * 1000 if isinstance(v, int) else round(Decimal(repr(v)) * 1000)


def _length(iv: list[tuple[int, int]]) -> int:
    """Length of the union of ``iv``."""
    total, end = 0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total, end = total + e - s, e
        elif e > end:
            total, end = total + e - end, e
    return total


NEG = shared_files("torch", "hta__negative_queue_length_rank0.json.gz")


@pytest.mark.shared
@pytest.mark.parametrize("path", NEG, ids=ids(NEG))
def test_concurrent_collectives_real(path: Path) -> None:
    """hta negative_queue_length_rank0 runs NCCL kernels on streams 84, 285 and 363 of one
    GPU; from the raw events: summed per-kernel exposed time 187.792 ms, the wall time of
    NCCL kernels with no compute kernel running 185.317 ms (the breakdown's communication),
    2.475 ms apart. The report's note names that difference."""
    with gzip.open(path, "rt") as fh:
        evs = json.load(fh)["traceEvents"]
    kern = [(e["pid"], _us_to_ns(e["ts"]), _us_to_ns(e["ts"]) + _us_to_ns(e["dur"]),
             "nccl" in e["name"].lower()) for e in evs if e.get("cat") == "kernel"]
    per_kernel = wall = 0
    for pid in {k[0] for k in kern}:
        comp = [(s, e) for p, s, e, c in kern if p == pid and not c]
        comm = [(s, e) for p, s, e, c in kern if p == pid and c]
        comp_len = _length(comp)
        # a kernel's exposed time: |kernel \ compute| = |compute + kernel| - |compute|
        per_kernel += sum(_length([*comp, (s, e)]) - comp_len for s, e in comm)
        wall += _length([*comp, *comm]) - comp_len
    tl = traceparse.load(path)
    c = comm_summary(tl)
    assert int(c["exposed_ns"].sum()) == per_kernel == 187_792_000
    bd = breakdown(tl)
    assert int(bd["communication_ns"].sum()) == wall == 185_317_000
    assert concurrency(tl)["concurrent_exposed_ns"] == per_kernel - wall


@pytest.mark.shared
def test_dlrm_straggler_wait_equals_raw_starts(tmp_path: Path) -> None:
    """DLRM: the i-th NCCL kernel of each kind on each worker is one call; per call the
    ranks that started before the last one waited (last start - own start). Summed over the
    calls rank 7 started last: 35.552 ms (the verdict's 'the other ranks waited'), while its
    summed skew (what only the first rank of each call waited) is 9.241 ms."""
    assert len(DLRM) == 8
    starts: dict[tuple[str, int], dict[int, int]] = {}
    for f in DLRM:
        rank = int(f.name.split("worker")[1].split("_")[0])
        with open(f) as fh:
            evs = json.load(fh)["traceEvents"]
        seen: Counter[str] = Counter()
        for e in sorted((e for e in evs if e.get("cat") == "kernel"
                         and e["name"].startswith("ncclKernel_")), key=lambda e: e["ts"]):
            kind = e["name"].split("_")[1]
            starts.setdefault((kind, seen[kind]), {})[rank] = e["ts"] * 1000
            seen[kind] += 1
    skew: Counter[int] = Counter()
    wait: Counter[int] = Counter()
    for call in starts.values():
        last = max(call, key=call.__getitem__)
        skew[last] += call[last] - min(call.values())
        wait[last] += sum(call[last] - t for t in call.values())
    for f in DLRM:
        (tmp_path / f.name).symlink_to(f)
    st = straggler_summary(traceparse.load(tmp_path))
    got = {r["straggler_rank"]: (r["skew_ns"], r["wait_ns"]) for r in st.iter_rows(named=True)}
    assert got == {r: (skew[r], wait[r]) for r in skew}
    assert got[7] == (9_241_000, 35_552_000)


# ------------------------------------------------------------------ mismatched calls
def test_kernels_that_cannot_be_one_call_blame_no_one_hand_made() -> None:
    # allreduce #0: rank 0 [100, 120), rank 1 [130, 200): rank 0's kernel ended before rank
    # 1's started, impossible for one allreduce (rank 0 needs rank 1's data) -> same_call
    # false, no straggler. #1: rank 0 [300, 400), rank 1 [340, 401): min end 400 >= last
    # start 340 -> same_call true, skew 40, straggler rank 1, wait 40. A sendrecv pair that
    # ends apart cannot be checked (one side may only send) -> null, straggler kept.
    ar = "ncclKernel_AllReduce_RING_LL_Sum_float(x)"
    sr = "ncclDevKernel_SendRecv(x)"
    rows = [{"rank": 0, "name": ar, "start_ns": 100, "end_ns": 120},
            {"rank": 1, "name": ar, "start_ns": 130, "end_ns": 200, "device_id": 1},
            {"rank": 0, "name": ar, "start_ns": 300, "end_ns": 400},
            {"rank": 1, "name": ar, "start_ns": 340, "end_ns": 401, "device_id": 1},
            {"rank": 0, "name": sr, "start_ns": 500, "end_ns": 510},
            {"rank": 1, "name": sr, "start_ns": 520, "end_ns": 530, "device_id": 1}]
    tl = timeline(gpu=gpu(rows))
    s = collective_skew(tl)
    assert s.select("collective", "seq", "skew_ns", "same_call", "straggler_rank",
                    "wait_ns").rows() == [("allreduce", 1, 40, True, 1, 40),
                                          ("sendrecv", 0, 20, None, 1, 20),
                                          ("allreduce", 0, 30, False, None, None)]
    st = straggler_summary(tl)
    assert st.select("straggler_rank", "calls", "skew_ns", "wait_ns").rows() == [
        (1, 2, 60, 60)]


SAMPLED = shared_files("torch", "hta__sampled_rank-*.json.gz")


@pytest.mark.shared
def test_sampled_ranks_mismatched_calls_blame_no_one(tmp_path: Path) -> None:
    """hta sampled_rank-0 and -1 (two ranks of a 128-rank job) hold different calls: rank
    0's 2nd all-to-all [30, 93] ms ends with rank 1's 1st [35, 93] ms, so pairing them by
    order put rank 0's 1st (ended at 30 ms) beside rank 1's 1st. From the raw kernels: the
    i-th pairs where one kernel ends before the other starts are not one call; the rest
    (allreduce #0 and #3, allgather #0 and #1) are rank 1's 4 calls, 27.0 ms of skew. Before
    the check, rank 1 was blamed for 8 calls, 381 ms."""
    assert len(SAMPLED) == 2
    seqs: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
    for f in SAMPLED:
        with gzip.open(f, "rt") as fh:
            doc = json.load(fh)
        rank = doc["distributedInfo"]["rank"]
        ops = [e for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "user_annotation")
               and _OP.match(e.get("name", ""))]
        calls = {e["args"]["correlation"]: e for e in doc["traceEvents"]
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        seen: Counter[str] = Counter()
        for k in sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                         and "nccl" in e["name"].lower()), key=lambda e: e["ts"]):
            call = calls[k["args"]["correlation"]]
            held = [o for o in ops if (o["pid"], o["tid"]) == (call["pid"], call["tid"])
                    and o["ts"] <= call["ts"] <= o["ts"] + o["dur"]]
            m = _OP.match(max(held, key=lambda o: o["ts"])["name"])
            assert m is not None
            coll = _NORM[m.group(1)]
            s, e = _us_to_ns(k["ts"]), _us_to_ns(k["ts"]) + _us_to_ns(k["dur"])
            seqs.setdefault((coll, seen[coll]), {})[rank] = (s, e)
            seen[coll] += 1
    one_call = {key: min(e for _, e in v.values()) >= max(s for s, _ in v.values())
                for key, v in seqs.items() if len(v) == 2}
    for f in SAMPLED:
        (tmp_path / f.name).symlink_to(f)
    tl = traceparse.load(tmp_path)
    got = {(r["collective"], r["seq"]): r["same_call"]
           for r in collective_skew(tl).iter_rows(named=True)}
    assert got == one_call
    assert sorted(k for k, ok in one_call.items() if ok) == [
        ("allgather", 0), ("allgather", 1), ("allreduce", 0), ("allreduce", 3)]
    skew = sum(max(s for s, _ in seqs[k].values()) - min(s for s, _ in seqs[k].values())
               for k, ok in one_call.items() if ok)
    st = straggler_summary(tl)
    assert st.select("straggler_rank", "calls", "skew_ns").rows() == [(1, 4, skew)]


@pytest.mark.shared
def test_two_ranks_state_the_wait_once() -> None:
    """With two ranks the only rank that waits is the first to arrive: the summed skew and
    the others' wait are one figure, and the verdict says it once."""
    from traceparse.analyses.summary import summarize

    path = TRACES / "nsys/nsys-ai__mfu_2gpu_after.sqlite"
    if not path.is_file():
        pytest.skip("nsys-ai__mfu_2gpu_after not in ../shared")
    tl = traceparse.load(path)
    top = straggler_summary(tl).row(0, named=True)
    assert top["wait_ns"] == top["skew_ns"]
    v = summarize(tl)["verdict"]
    assert "of summed skew the other rank waited" in v and "first rank to arrive" not in v
