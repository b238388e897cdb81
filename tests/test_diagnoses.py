"""Issue 14: blocking is not launch overhead, causes cover their gaps, one savings model,
ranks for nsys. Generated timelines with hand-computed answers (times in us), regression
tests on the real traces named in the issue (checked against the files' own events read
with json/sqlite3 here), and invariants over every shared trace."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import TRACES, shared_files

from traceparse import schema
from traceparse.analyses.attribution import breakdown, check_attribution
from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.predict import whatif
from traceparse.analyses.savings import savings
from traceparse.analyses.summary import summarize
from traceparse.timeline import Timeline

US = 1000
LAUNCH = "cudaLaunchKernel"


def _tl(acts: list[dict[str, Any]], calls: list[dict[str, Any]],
        ranges: list[dict[str, Any]] = ()) -> Timeline:  # type: ignore[assignment]
    """acts: stream, start, end (us), corr, name, kind, src/dst; calls: name, start, end,
    corr; ranges: name, start, end (cpu_op ranges of the same thread)."""
    gpu = pl.DataFrame([{
        "rank": 0, "kind": a.get("kind", "kernel"),
        "category": "memory" if a.get("kind") == "memcpy" else "compute",
        "start_ns": a["start"] * US, "end_ns": a["end"] * US,
        "dur_ns": (a["end"] - a["start"]) * US, "device_id": 0, "stream_id": a["stream"],
        "process_id": 1, "correlation_id": a.get("corr"), "name": a.get("name", "k"),
        "src_kind": a.get("src"), "dst_kind": a.get("dst")} for a in acts])
    api = pl.DataFrame([{"rank": 0, "kind": "runtime", "name": c["name"],
                         "start_ns": c["start"] * US, "end_ns": c["end"] * US,
                         "dur_ns": (c["end"] - c["start"]) * US, "process_id": 1,
                         "thread_id": 1, "correlation_id": c.get("corr")} for c in calls])
    rng = pl.DataFrame([{"rank": 0, "kind": "cpu_op", "name": r["name"],
                         "start_ns": r["start"] * US, "end_ns": r["end"] * US,
                         "dur_ns": (r["end"] - r["start"]) * US, "process_id": 1,
                         "thread_id": 1} for r in ranges]) if ranges else None
    tables = {"gpu": schema.conform("gpu", gpu), "api": schema.conform("api", api)}
    if rng is not None:
        tables["ranges"] = schema.conform("ranges", rng)
    return Timeline(**tables).validate()


def _parts(tl: Timeline) -> tuple[int, ...]:
    r = check_attribution(breakdown(tl)).row(0, named=True)
    return tuple(r[k] // US for k in ("window_ns", "compute_ns", "memory_ns",
                                      "launch_overhead_ns", "warmup_ns", "host_sync_ns",
                                      "idle_ns"))


# --------------------------------------------------------------------- generated, by hand

def test_blocking_pageable_d2h_copy_is_host_sync_not_launch() -> None:
    # K1 s7 [10,100) (call [0,5)); cudaMemcpyAsync [20,400) whose DtoH copy to pageable
    # memory runs [390,392); K2 s7 [420,500) (call [405,410)). Window [10,500) = 490.
    # compute 90 + 80 = 170, memory 2. GPU idle [100,390) + [392,420): the copy call blocks
    # until 400 -> host_sync 290 + 8 = 298; K2's call [405,410) -> launch 5; idle
    # [400,405) + [410,420) = 15. (Before issue 14, [100,390) was "launch overhead".)
    tl = _tl([{"stream": 7, "start": 10, "end": 100, "corr": 1},
              {"stream": 7, "start": 390, "end": 392, "corr": 2, "kind": "memcpy",
               "name": "Memcpy DtoH (Device -> Pageable)", "src": "Device", "dst": "Pageable"},
              {"stream": 7, "start": 420, "end": 500, "corr": 3}],
             [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
              {"name": "cudaMemcpyAsync", "start": 20, "end": 400, "corr": 2},
              {"name": LAUNCH, "start": 405, "end": 410, "corr": 3}])
    assert _parts(tl) == (490, 170, 2, 5, 0, 298, 15)
    g = idle_gaps(tl, min_ns=1 * US)
    # [100,390) 290 us is covered by the copy call; [392,420) 28 us: host_sync 8, launch 5,
    # idle 15 -> kind idle; nothing covers 14 us of it, but it began while the copy call
    # was still blocking (until 400): the GPU drained while the host waited -> host_sync
    # named by that call (issue 24; before: unknown)
    assert g.select("start_ns", "dur_ns", "host_sync_ns", "kind", "cause", "cause_name"
                    ).rows() == [(100 * US, 290 * US, 290 * US, "host_sync", "host_sync",
                                  "cudaMemcpyAsync"),
                                 (392 * US, 28 * US, 8 * US, "idle", "host_sync",
                                  "cudaMemcpyAsync")]
    v = summarize(tl, min_gap_ns=1 * US)["verdict"]
    assert v.startswith("host-sync-bound: 60.8% of the window") and "cudaMemcpyAsync" in v


def test_item_sync_names_the_innermost_call() -> None:
    # .item(): aten::item [20,265) > aten::_local_scalar_dense [22,262) > cudaMemcpyAsync
    # [25,260) (DtoH to pageable, copy [200,201)), then cudaStreamSynchronize [262,264).
    # K1 s7 [10,200) (call [0,5)); K2 s7 [310,400) (call [300,305)). Window 390:
    # compute 190 + 90 = 280, memory 1; idle GPU [201,310): copy call until 260 -> host_sync
    # 59, stream sync 2 -> 61; K2 call -> launch 5; idle [260,262) + [264,300) + [305,310)
    # = 2 + 36 + 5 = 43.
    tl = _tl([{"stream": 7, "start": 10, "end": 200, "corr": 1},
              {"stream": 7, "start": 200, "end": 201, "corr": 2, "kind": "memcpy",
               "src": "Device", "dst": "Pageable"},
              {"stream": 7, "start": 310, "end": 400, "corr": 3}],
             [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
              {"name": "cudaMemcpyAsync", "start": 25, "end": 260, "corr": 2},
              {"name": "cudaStreamSynchronize", "start": 262, "end": 264},
              {"name": LAUNCH, "start": 300, "end": 305, "corr": 3}],
             [{"name": "aten::item", "start": 20, "end": 265},
              {"name": "aten::_local_scalar_dense", "start": 22, "end": 262}])
    assert _parts(tl) == (390, 280, 1, 5, 0, 61, 43)
    # the gap [201,310) (109 us, half = 54.5) is covered by the copy call (59), the
    # _local_scalar_dense op (61) and aten::item (64): the innermost (shortest) wins
    g = idle_gaps(tl, min_ns=50 * US).row(0, named=True)
    assert (g["dur_ns"], g["kind"], g["cause"], g["cause_name"]) == (
        109 * US, "host_sync", "host_sync", "cudaMemcpyAsync")


def test_first_launch_module_load_is_warmup() -> None:
    # kA call [0,5) kernel [10,20); first kB launch call [20,6520) (lazy module load)
    # kernel [6525,6530); kB again call [6530,6535) kernel [6540,6545); kA call
    # [6545,6550) kernel [6552,6560). Median call 5 us: the 6500 us first call is warm-up.
    # Window [10,6560) = 6550: compute 10+5+5+8 = 28; warm-up [20,6520) 6500; launch
    # [6530,6535) + [6545,6550) = 10; idle [6520,6525) + [6535,6540) + [6550,6552) = 12.
    tl = _tl([{"stream": 7, "start": 10, "end": 20, "corr": 1, "name": "kA"},
              {"stream": 7, "start": 6525, "end": 6530, "corr": 2, "name": "kB"},
              {"stream": 7, "start": 6540, "end": 6545, "corr": 3, "name": "kB"},
              {"stream": 7, "start": 6552, "end": 6560, "corr": 4, "name": "kA"}],
             [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
              {"name": LAUNCH, "start": 20, "end": 6520, "corr": 2},
              {"name": LAUNCH, "start": 6530, "end": 6535, "corr": 3},
              {"name": LAUNCH, "start": 6545, "end": 6550, "corr": 4}])
    assert _parts(tl) == (6550, 28, 0, 10, 6500, 0, 12)
    # steady state = 6550 - 6500 = 50 us: compute 28 = 56.0%
    v = summarize(tl)["verdict"]
    assert v.startswith("warm-up-dominated: 99.2% of the window is warm-up")
    assert v.endswith("steady state (without warm-up) is compute-bound: 56.0% compute")
    # CUDA graphs cannot remove the module load: the saving stays within the launch
    # overhead and idle time (10 + 12 us), although the GPU's non-busy time (the bound a
    # host change is capped at) holds the 6500 us load too
    s = savings(tl).filter(pl.col("change") == "no_launch_overhead").row(0, named=True)
    assert s["bound_ns"] == 6522 * US and 0 <= s["saving_ns"] <= 22 * US


def test_compile_gap_names_the_inner_compile() -> None:
    # K1 call [0,5) kernel [10,100); FusionExecutorCache::runFusionWithInputs [102,960)
    # around nvrtcCompileProgram [120,900); K2 call [950,955) kernel [960,1000).
    # Window 990: compute 90 + 40 = 130; warm-up (the compile range) 780; launch: the call
    # [950,955) and the rest of runFusionWithInputs before it, which contains K2's launch
    # (nvFuser's host runtime issuing K2): [102,120) + [900,950), 73; idle [100,102) +
    # [955,960) = 7.
    tl = _tl([{"stream": 7, "start": 10, "end": 100, "corr": 1},
              {"stream": 7, "start": 960, "end": 1000, "corr": 2}],
             [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
              {"name": LAUNCH, "start": 950, "end": 955, "corr": 2}],
             [{"name": "FusionExecutorCache::runFusionWithInputs", "start": 102, "end": 960},
              {"name": "nvrtcCompileProgram", "start": 120, "end": 900}])
    assert _parts(tl) == (990, 130, 0, 73, 780, 0, 7)
    g = idle_gaps(tl).row(0, named=True)  # [100,960): both ranges cover > 430 us
    assert (g["dur_ns"], g["kind"], g["cause"], g["cause_name"]) == (
        860 * US, "warmup", "warmup", "nvrtcCompileProgram")


def test_cross_stream_event_wait_is_not_recoverable_by_graphs() -> None:
    # K1 s7 [10,100) (call [0,5)); K2 s13 [100,300) (call [6,10)); K3 s7 launched at
    # [150,155) after K1 ended but waiting on an event of s13: runs [300,350). The GPU is
    # never idle (window [10,350) all compute): no launch overhead, so graphs save nothing,
    # although the per-stream launch-gap estimate sees min(300-100, 300-150) - 1 = 149 us.
    from traceparse.analyses.launches import graph_recoverable, launch_summary

    tl = _tl([{"stream": 7, "start": 10, "end": 100, "corr": 1},
              {"stream": 13, "start": 100, "end": 300, "corr": 2},
              {"stream": 7, "start": 300, "end": 350, "corr": 3}],
             [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
              {"name": LAUNCH, "start": 6, "end": 10, "corr": 2},
              {"name": "cudaStreamWaitEvent", "start": 140, "end": 145},
              {"name": LAUNCH, "start": 150, "end": 155, "corr": 3}])
    assert _parts(tl) == (340, 340, 0, 0, 0, 0, 0)
    assert int(graph_recoverable(tl)["graph_recoverable_ns"].sum()) == 149 * US
    rec = launch_summary(tl).filter(pl.col("metric") == "graph_recoverable_ns").row(0, named=True)
    assert rec["sum"] == 0
    s = savings(tl).filter(pl.col("change") == "no_launch_overhead").row(0, named=True)
    assert (s["saving_ns"], s["bound_ns"]) == (0, 0)


def test_multi_process_nsys_export_has_one_rank_per_process(tmp_path: Path) -> None:
    # the compute_bound sample (pid 4242, device 0) plus a copy of its kernels, copies and
    # calls as pid 5000 on device 1, inserted into the same export with sqlite3
    from traceparse.nsys import reader as nsys
    from traceparse.samplegen.scenarios import SCENARIOS
    from traceparse.samplegen.sqlite import create_table, global_pid, global_tid, write

    path = write(SCENARIOS["compute_bound"](), tmp_path / "two.sqlite")
    con = sqlite3.connect(path)
    g0, g1 = global_pid(4242), global_pid(5000)
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
        cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join({"globalPid": str(g1), "deviceId": "1",
                         "correlationId": "correlationId + 1000"}.get(c, c) for c in cols)
        con.execute(f"INSERT INTO {table} SELECT {sel} FROM {table} WHERE globalPid = {g0}")
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
    sel = ", ".join({"globalTid": str(global_tid(5000, 5000)),
                     "correlationId": "correlationId + 1000"}.get(c, c) for c in cols)
    con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT {sel} "
                "FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    con.commit()
    con.close()
    tl = nsys.read(path)
    assert tl.gpu.select("rank", "process_id", "device_id").unique().sort("rank").rows() == [
        (0, 4242, 0), (1, 5000, 1)]
    assert tl.sources["rank_source"].cast(pl.String).to_list() == ["process order"] * 2
    assert [(p["pid"], p["rank"]) for p in tl.meta["processes"]] == [(4242, 0), (5000, 1)]
    # with nsys' MPI thread names the recorded ranks win over process order: pid 4242 is
    # 'MPI Rank 1', pid 5000 'MPI Rank 0'
    con = sqlite3.connect(path)
    if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'NVTX_EVENTS'").fetchone():
        create_table(con, "NVTX_EVENTS")
    sid = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    con.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                    [(sid + 1, "MPI Rank 1"), (sid + 2, "MPI Rank 0")])
    con.executemany("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, textId) "
                    "VALUES (0, 39, ?, ?)", [(global_tid(4242, 4242), sid + 1),
                                             (global_tid(5000, 5000), sid + 2)])
    con.commit()
    con.close()
    named = nsys.read(path)
    assert named.gpu.select("rank", "process_id").unique().sort("rank").rows() == [
        (0, 5000), (1, 4242)]
    assert named.sources["rank_source"].cast(pl.String).to_list() == [
        "NVTX thread name 'MPI Rank N'"] * 2
    # each rank's attribution is the single-process one (tests/test_attribution_golden.py:
    # window 800, compute 760, memory 30, launch 8, idle 2)
    bd = check_attribution(breakdown(tl)).sort("rank")
    for r in bd.iter_rows(named=True):
        assert (r["window_ns"], r["compute_ns"], r["memory_ns"], r["launch_overhead_ns"],
                r["idle_ns"]) == (800 * US, 760 * US, 30 * US, 8 * US, 2 * US)


# ------------------------------------------------------------------------ real traces

def _torch(name: str) -> Path:
    p = TRACES / "torch" / name
    if not p.is_file():
        pytest.skip("corpus missing")
    return p


def _events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.shared
def test_negative_queue_is_host_sync_in_pageable_copies_not_launch() -> None:
    from traceparse import load

    path = _torch("hta__negative_queue_length_rank0.json.gz")
    ev = _events(path)
    # the file's own events: five cudaMemcpyAsync calls of 139-147 ms whose copies are
    # DtoH to pageable memory lasting at most 2 us
    long_calls = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"
                  and e["name"] == "cudaMemcpyAsync" and e["dur"] > 100_000}
    copies = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "gpu_memcpy"}
    assert len(long_calls) == 5
    assert all(138_000 < c["dur"] < 148_000 for c in long_calls.values())
    assert all(copies[k]["name"] == "Memcpy DtoH (Device -> Pageable)"
               and copies[k]["dur"] <= 2 for k in long_calls)
    launch_p50 = sorted(e["dur"] for e in ev if e.get("cat") == "cuda_runtime"
                        and e["name"] == "cudaLaunchKernel")
    assert launch_p50[len(launch_p50) // 2] <= 5  # cheap launches (us)
    # issue 25: each of those copies sat on its stream behind a kernel that had been
    # launched (right after a cudaStreamWaitEvent of the same thread) over 100 ms before it
    # started: the host waited on the stream, the stream on an event (whose record is not
    # in the file), so the gaps are the stream wait's, not host sync
    launch = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    waits = sorted(e["ts"] for e in ev if e.get("name") == "cudaStreamWaitEvent")
    assert not any(e.get("name") == "cudaEventRecord" for e in ev)
    for k in long_calls:
        copy = copies[k]
        prev = max((e for e in kernels if e["tid"] == copy["tid"] and e["ts"] <= copy["ts"]),
                   key=lambda e: e["ts"])
        call_of_prev = launch[prev["args"]["correlation"]]
        assert prev["ts"] - (call_of_prev["ts"] + call_of_prev["dur"]) > 100_000
        assert any(w < call_of_prev["ts"] for w in waits)
    tl = load(path)
    s = summarize(tl)
    assert s["verdict"].startswith("stream-wait-bound")
    bd = s["sections"]["breakdown"].row(0, named=True)
    assert bd["idle_ns"] > bd["launch_overhead_ns"] * 5
    # the gaps inside those calls are the stream wait's
    streams = {copies[k]["tid"] for k in long_calls}
    assert len(streams) == 1
    inside = idle_gaps(tl).filter(pl.col("cause_name").str.contains(
        f"on stream {streams.pop()}:"))
    assert inside.height >= 5 and set(inside["cause"]) == {"stream_wait"}


@pytest.mark.shared
def test_sglang_largest_gap_is_warmup_not_the_sync_that_ended() -> None:
    from traceparse import load

    path = TRACES / "nsys" / "sglang__baseline-report.sqlite"
    if not path.is_file():
        pytest.skip("corpus missing")
    g = idle_gaps(load(path)).row(0, named=True)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    q = ("SELECT s.value, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
         "ON s.id = r.nameId WHERE r.end > ? AND r.start < ? ORDER BY r.start")
    calls = con.execute(q, (g["start_ns"], g["end_ns"])).fetchall()
    # the trace's own calls: the stream sync ended 12 us into the 511 ms gap; the next CUDA
    # call is cuModuleLoadData 510 ms later, then the first cuLaunchKernel
    assert calls[0][0].startswith("cudaStreamSynchronize")
    assert calls[0][2] - g["start_ns"] < 20 * US
    assert [c[0] for c in calls[1:3]] == ["cuModuleLoadData", "cuLaunchKernel"]
    assert calls[1][1] - g["start_ns"] > 500_000 * US
    top = con.execute(
        "SELECT s.value, COUNT(*) FROM COMPOSITE_EVENTS c JOIN SAMPLING_CALLCHAINS k "
        "ON k.id = c.id AND k.stackDepth = 0 JOIN StringIds s ON s.id = k.symbol "
        "WHERE c.start BETWEEN ? AND ? AND (c.globalTid & 16777215) = 10171 "
        "GROUP BY 1 ORDER BY 2 DESC LIMIT 1", (g["start_ns"], g["end_ns"])).fetchone()
    con.close()
    assert g["dur_ns"] > 510_000 * US
    assert (g["cause"], g["cause_name"]) == ("warmup", "cuModuleLoadData")
    assert g["cause_detail"].startswith(
        f"first CUDA call in the gap; covered by cpu_busy: {top[0]} (libcrypto")


@pytest.mark.shared
def test_rocm_minitoy_first_launch_is_warmup_not_launch_bound() -> None:
    from traceparse import load

    path = _torch("hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    ev = _events(path)
    launches = [e for e in ev if e.get("name") == "hipLaunchKernel"]
    kernel = {e["args"]["correlation"]: e["name"] for e in ev if e.get("cat") == "kernel"}
    slow = max(launches, key=lambda e: e["dur"])
    # the file's own events: one 6.5 ms hipLaunchKernel (the others take ~10 us), the first
    # launch of its kernel (lazy module load)
    assert slow["dur"] > 6_000
    assert sorted(e["dur"] for e in launches)[-2] < 100
    same = [e for e in launches
            if kernel.get(e["args"]["correlation"]) == kernel[slow["args"]["correlation"]]]
    assert min(same, key=lambda e: e["ts"]) is slow
    s = summarize(load(path))
    assert not s["verdict"].startswith("launch-bound")
    assert s["verdict"].startswith("warm-up-dominated")
    bd = s["sections"]["breakdown"].row(0, named=True)
    assert bd["warmup_ns"] >= 6_000 * US > bd["launch_overhead_ns"]


@pytest.mark.shared
def test_dlrm_summary_names_rank7_straggler(tmp_path: Path) -> None:
    from traceparse import load

    files = shared_files("torch", "param__dlrm_8rank__worker*")
    if len(files) != 8:
        pytest.skip("corpus missing")
    for f in files:
        (tmp_path / f.name).symlink_to(f)
    # the files' own events: the first NCCL kernel of each worker; worker 7 starts last
    first = {}
    for f in files:
        ks = [e["ts"] for e in _events(f) if e.get("cat") == "kernel"
              and e["name"].startswith("ncclKernel")]
        first[int(f.name.split("worker")[1][0])] = min(ks)
    assert max(first, key=first.__getitem__) == 7
    s = summarize(load(tmp_path))
    assert "rank 7 straggles" in s["verdict"]
    assert s["sections"]["stragglers"].row(0, named=True)["straggler_rank"] == 7


@pytest.mark.shared
def test_two_process_nsys_has_two_ranks() -> None:
    from traceparse import load

    path = TRACES / "nsys" / "nsys-ai__mfu_2gpu_after.sqlite"
    if not path.is_file():
        pytest.skip("corpus missing")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = con.execute("SELECT (globalPid >> 24) & 16777215, deviceId, COUNT(*) FROM "
                       "CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1, 2 ORDER BY 1").fetchall()
    con.close()
    tl = load(path)
    got = (tl.kernels.group_by("process_id", "device_id", "rank").len()
           .sort("process_id").rows())
    assert [(p, d, n) for p, d, _, n in got] == want
    assert [r for _, _, r, _ in got] == [0, 1]  # process order
    # no rank is recorded: no MPI thread names, and the only environment exported is the
    # launch environment of the session, without RANK
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert con.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 39").fetchone() \
        == (0,)
    env = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV "
                      "WHERE name = 'DeviceEnvironment'").fetchone()[0]
    con.close()
    assert not any(v.split("=")[0] in ("RANK", "LOCAL_RANK") for v in env.split(";"))
    assert tl.sources["rank_source"].cast(pl.String).to_list() == ["process order"] * 2


@pytest.mark.shared
@pytest.mark.parametrize("name", ["hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                  "hta__nccl_data.json.gz",
                                  "hta__negative_queue_length_rank0.json.gz"])
def test_report_savings_equal_whatif(name: str) -> None:
    from traceparse import load
    from traceparse.reports.payload import build_payload

    tl = load(_torch(name))
    p = build_payload(tl)
    recs = {r["id"]: r for r in p["recommendations"]["items"]}
    # every fix: the report, the engine and whatif --fix quote one number (issue 24)
    for rid, flag in (("cuda-graphs", "no_launch_overhead"), ("overlap-comm", "overlap_comm"),
                      ("host-sync", "host_sync"), ("pinned-memory", "pinned_memory"),
                      ("input-pipeline", "input_pipeline"), ("fusion", "fusion"),
                      ("warm-up", "warm_up")):
        engine = [r for r in p["summary"]["savings"] if r["change"] == flag]
        if not engine:
            assert rid not in recs
            continue
        w = whatif(tl, fix=rid).filter(pl.col("scope") == "window")
        best = max(w.iter_rows(named=True),
                   key=lambda r: (r["measured_ns"] - r["predicted_ns"], -r["rank"]))
        saved = best["measured_ns"] - best["predicted_ns"]
        if rid in recs:
            assert recs[rid]["saving_ns"] == saved
        assert max(r["saving_ns"] for r in engine) == saved
    # the launch summary quotes the same engine
    assert p["launches"]["graph_recoverable_ns"] == max(
        r["saving_ns"] for r in p["summary"]["savings"] if r["change"] == "no_launch_overhead")
    # every recommendation saves at most the part it removes on one rank (never a sum)
    bd = breakdown(tl).group_by("rank").agg(pl.col("^.*_ns$").sum())
    most = {c: int(bd[c].max()) for c in bd.columns if c.endswith("_ns")}  # type: ignore[arg-type]
    most["not_busy"] = int(bd.select(pl.sum_horizontal(
        "launch_overhead_ns", "warmup_ns", "host_sync_ns", "idle_ns")).to_series().max())
    part = {"cuda-graphs": "not_busy", "overlap-comm": "communication_ns",
            "host-sync": "not_busy", "overlap-copies": "memory_ns",
            "input-pipeline": "idle_ns"}
    for rid, col in part.items():
        if rid in recs:
            assert recs[rid]["saving_ns"] <= most[col]


# ------------------------------------------------------------------------- invariants

_DLRM = shared_files("torch", "param__dlrm_8rank__worker*")
#: every shared nsys export and Kineto file; the 8 DLRM ranks as one set ("dlrm_8rank")
ALL = ([p.name for p in shared_files("nsys", "*.sqlite")]
       + [p.name for p in shared_files("torch", "*.json*") if p not in _DLRM]
       + (["dlrm_8rank"] if _DLRM else []))


@pytest.mark.shared
@pytest.mark.parametrize("name", ALL)
def test_invariants_on_every_shared_trace(name: str, tmp_path: Path) -> None:
    from traceparse import load

    if name == "dlrm_8rank":
        for f in _DLRM:
            (tmp_path / f.name).symlink_to(f)
        tl = load(tmp_path)
    else:
        kind = "nsys" if name.endswith(".sqlite") else "torch"
        tl = load(TRACES / kind / name)
    if tl.gpu.filter(pl.col("kind").cast(pl.String) != "sync").height == 0:
        return
    bd = check_attribution(breakdown(tl))
    s = savings(tl, breakdown=bd)
    # every saving is within the part it removes, per rank
    assert s["within_bound"].all(), s.filter(~pl.col("within_bound")).rows()
    # a change to the host gives back at most the time the GPU was not busy (issue 24:
    # CUDA graphs remove issuing time, which may overlap kernels, so the bound is that)
    idle = dict(bd.group_by("rank").agg(pl.sum_horizontal(
        "launch_overhead_ns", "warmup_ns", "host_sync_ns", "idle_ns").sum()).iter_rows())
    for r in s.filter(pl.col("change").is_in(["no_launch_overhead", "host_sync",
                                              "input_pipeline"])).iter_rows(named=True):
        assert r["saving_ns"] <= idle[r["rank"]]
    # every gap's cause overlaps its gap
    g = idle_gaps(tl).filter(pl.col("cause") != "unknown")
    assert g["cause_start_ns"].is_not_null().all()
    assert ((g["cause_start_ns"] < g["end_ns"]) & (g["cause_end_ns"] > g["start_ns"])).all()
    # covering causes span at least half the gap (the warm-up rule names the first call
    # and says so in cause_detail; a profiler flush names the call it held up there and
    # covers half the gap itself; the sync-drain rule names the blocking call in flight at
    # the gap's start, which overlaps the gap, and keeps the covering activity in
    # cause_detail; an issuing gap issued in several ops names the one overlapping it most
    # and says so in cause_detail)
    cov = g.filter(pl.col("cause_detail").is_null() | (pl.col("cause") == "profiler"))
    assert g.filter(pl.col("cause_detail").is_not_null())["cause"].is_in(
        ["warmup", "profiler", "host_sync", "issuing"]).all()
    drained = g.filter((pl.col("cause") == "host_sync") & pl.col("cause_detail").is_not_null())
    assert ((drained["cause_start_ns"] <= drained["start_ns"])
            & (drained["cause_end_ns"] > drained["start_ns"])).all()
    ov = (pl.min_horizontal("cause_end_ns", "end_ns")
          - pl.max_horizontal("cause_start_ns", "start_ns"))
    if cov.height:
        assert cov.select((ov * 2 >= pl.col("dur_ns")).all()).item()


# ------------------------------------------------------------------- honest models

def test_predict_refuses_a_calibration_from_another_gpu(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceparse.analyses.calibrate import calibrate, to_json
    from traceparse.analyses.predict import predict
    from traceparse.cli import main
    from traceparse.errors import TraceError
    from traceparse.samplegen.scenarios import default_sample, scenario_timeline

    tl = scenario_timeline("mini_train")
    cal = calibrate(tl)
    model = cal["devices"][0]["device_model"]
    assert predict(tl, cal).height  # same GPU: fine
    cal["devices"][0]["device_model"] = "NVIDIA A100-SXM4-80GB"
    with pytest.raises(TraceError, match=f"{model} \\(the calibration has NVIDIA A100"):
        predict(tl, cal)
    other = predict(tl, cal, allow_other_gpu=True)
    # the window error per rank comes with the per-category errors
    assert set(other["scope"]) >= {"window", "category"}
    path = tmp_path / "a100.json"
    path.write_text(to_json(cal))
    r = CliRunner().invoke(main, ["predict", str(default_sample()), "--calibration",
                                  str(path)])
    assert r.exit_code == 2 and "allow-other-gpu" in r.output
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["predict", str(default_sample()), "--calibration",
                                  str(path), "--allow-other-gpu"])
    assert r.exit_code == 0 and "warning: predicting a trace from" in r.output


@pytest.mark.shared
def test_single_rank_collective_fit_is_marked_and_exported_with_a_warning() -> None:
    from traceparse import load
    from traceparse.analyses.calibrate import calibrate
    from traceparse.analyses.export import export_files

    path = _torch("hta__nccl_data.json.gz")
    # the file is rank 0 of a world of 2: its NCCL kernels wait for a peer not in the trace
    with gzip.open(path, "rt") as f:
        dist = json.load(f)["distributedInfo"]
    assert (dist["rank"], dist["world_size"]) == (0, 2)
    cal = calibrate(load(path))
    fits = [c for d in cal["devices"] for c in d["collectives"]]
    assert fits and all(c["max_ranks_seen"] == 1 and c["includes_peer_wait"] for c in fits)
    files = export_files(cal, "vidur")
    assert "include waiting for the peers" in files["WARNINGS.txt"]
    assert files["WARNINGS.txt"].count("\n") == len(fits)


@pytest.mark.shared
def test_dlrm_report_savings_are_per_rank(tmp_path: Path) -> None:
    # 8 ranks: every saving is one rank's (at most that rank's part or window), never the
    # sum over ranks; the ranks wait for one another in all-to-alls, so cuda-graphs quotes
    # the rank whose replay is the longest (it bounds the job), as whatif prints it
    from traceparse import load
    from traceparse.reports.payload import build_payload

    if len(_DLRM) != 8:
        pytest.skip("corpus missing")
    for f in _DLRM:
        (tmp_path / f.name).symlink_to(f)
    tl = load(tmp_path)
    p = build_payload(tl)
    bd = breakdown(tl).group_by("rank").agg(pl.col("^.*_ns$").sum())
    longest = int(bd["window_ns"].max())  # type: ignore[arg-type]
    for r in p["recommendations"]["items"]:
        assert r["saving_ns"] <= longest, r["id"]
    w = whatif(tl, fix="cuda-graphs").filter(pl.col("scope") == "window")
    slowest = max(w.iter_rows(named=True),
                  key=lambda x: (x["predicted_ns"], x["measured_ns"], -x["rank"]))
    assert p["launches"]["graph_recoverable_ns"] == (slowest["measured_ns"]
                                                     - slowest["predicted_ns"])
    idle = dict(bd.select("rank", pl.sum_horizontal("launch_overhead_ns", "warmup_ns",
                                                    "host_sync_ns", "idle_ns")).iter_rows())
    eng = [r for r in p["summary"]["savings"] if r["change"] == "no_launch_overhead"]
    assert all(r["saving_ns"] <= idle[r["rank"]] for r in eng)
