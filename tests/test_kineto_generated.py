"""Kineto parser on small hand-made traces with hand-computed expectations, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import traceparse
import traceparse.kineto.ranks
from traceparse.errors import TraceError
from traceparse.kineto.ranks import read_dir
from traceparse.kineto.reader import read
from traceparse.timeline import Timeline

BASE = 1_735_632_360_000_000_000


def _write(path: Path, doc: object, *, gz: bool = False) -> Path:
    text = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _modern() -> dict:
    ev = [
        # cpu_op 10.5 us .. 30.5 us on thread 7 with a nested op (depth 1)
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 7,
         "ts": 10.5, "dur": 20.0,
         "args": {"External id": 1, "Input Dims": [[4, 8], [8, 2]],
                  "Input type": ["float", "float"],
                  "Concrete Inputs": ["", ""], "Sequence number": 9, "Call stack": "a.py(1)"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 100, "tid": 7,
         "ts": 11.0, "dur": 5.0, "args": {"External id": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 7,
         "ts": 12.001, "dur": 3.0, "args": {"External id": 2, "correlation": 77}},
        # kernel: ts 4203669603771.648 us relative -> base + 4203669603771648 ns; 6.88 us
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
         "pid": 0, "tid": 7, "ts": 4203669603771.648, "dur": 6.88,
         "args": {"External id": 2, "device": 0, "stream": 7, "correlation": 77,
                  "grid": [8, 1, 1], "block": [544, 1, 1], "registers per thread": 96,
                  "shared memory": 87568}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
         "pid": 0, "tid": 7, "ts": 50.0, "dur": 1.001,
         "args": {"device": 0, "stream": 7, "correlation": 78, "bytes": 4096}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 100, "tid": 7,
         "ts": 10.0, "dur": 100.0, "args": {}},
        {"ph": "s", "cat": "ac2g", "id": 77, "pid": 100, "tid": 7, "ts": 12.001},
        {"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 7,
         "ts": 13.0},
    ]
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE,
            "distributedInfo": {"rank": 3, "world_size": 4, "backend": "nccl"},
            "deviceProperties": [{"id": 0, "name": "AMD Radeon Graphics", "warpSize": 64,
                                  "numSms": 104, "totalGlobalMem": 68702699520,
                                  "computeMajor": 9, "computeMinor": 0}],
            "traceEvents": ev}


def test_modern_relative_trace(tmp_path: Path) -> None:
    tl = traceparse.load(_write(tmp_path / "t.pt.trace.json.gz", _modern(), gz=True))
    k = tl.gpu.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert k["start_ns"] == BASE + 4_203_669_603_771_648
    assert k["dur_ns"] == 6_880
    assert k["rank"] == 3 and k["process_id"] == 100 and k["correlation_id"] == 77
    assert k["category"] == "communication"
    assert (k["grid_x"], k["block_x"], k["registers_per_thread"]) == (8, 544, 96)
    assert k["static_smem_bytes"] == 87568
    m = tl.gpu.filter(pl.col("kind") == "memcpy").row(0, named=True)
    assert (m["copy_kind"], m["src_kind"], m["dst_kind"], m["bytes"]) == (
        "HtoD", "Pageable", "Device", 4096)
    assert m["dur_ns"] == 1_001 and m["process_id"] is None  # correlation 78 never launched
    api = tl.api.row(0, named=True)
    assert api["start_ns"] == BASE + 12_001 and api["kind"] == "runtime"
    r = tl.ranges.sort("start_ns")
    assert r["kind"].cast(pl.String).to_list() == ["profiler_step", "cpu_op", "cpu_op"]
    assert r["depth"].to_list() == [0, 1, 2]
    mm = r.row(1, named=True)
    assert json.loads(mm["input_dims"]) == [[4, 8], [8, 2]]
    assert json.loads(mm["input_types"]) == ["float", "float"]
    assert mm["sequence_number"] == 9 and json.loads(mm["payload"]) == {"Call stack": "a.py(1)"}
    dev = tl.devices.row(0, named=True)
    assert (dev["vendor"], dev["sm_count"], dev["compute_major"]) == ("amd", 104, 9)
    # 9 events: 6 parsed, flow + metadata + instant skipped
    ing = tl.ingest
    assert int(ing["count"].sum()) == 9
    assert int(ing.filter(pl.col("outcome") == "parsed")["count"].sum()) == 6
    assert tl.meta["world_size"] == 4 and tl.meta["correlation_link"]["linked"] == 1


def test_legacy_bare_list_absolute_decimal(tmp_path: Path) -> None:
    # PyTorch 1.8 style: capitalised cats, string tids, bare list; absolute decimal us that a
    # float64 cannot hold: 1694128201545123.456 us -> 1694128201545123456 ns exactly.
    ev = [
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7",
         "ts": "__TS__", "dur": 2.5,
         "args": {"device": 0, "correlation": 5, "external id": 1}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": "9",
         "ts": 1694128201545120, "dur": 1, "args": {"correlation": 5, "external id": 1}},
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 9, "tid": "9",
         "ts": 1694128201545100, "dur": 100},
        {"ph": "X", "cat": "gpu_user_Annotation", "name": "fwd", "pid": 0, "tid": 7,
         "ts": 1694128201545110, "dur": 50},
    ]
    text = json.dumps(ev).replace('"__TS__"', "1694128201545123.456")
    p = tmp_path / "rank_2.json"
    p.write_text(text)
    tl = read(p)
    k = tl.gpu.row(0, named=True)
    assert k["start_ns"] == 1_694_128_201_545_123_456
    assert k["dur_ns"] == 2_500 and k["end_ns"] == 1_694_128_201_545_125_956
    assert k["stream_id"] == 7 and k["external_id"] == 1 and k["process_id"] == 9
    assert tl.sources["rank"][0] == 2 and tl.sources["rank_source"][0] == "file name"
    kinds = set(tl.ranges["kind"].cast(pl.String))
    assert kinds == {"profiler_step", "gpu_user_annotation"}


def test_collective_args_from_record_param_comms(tmp_path: Path) -> None:
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
         "ts": 100, "dur": 50, "args": {"External id": 40, "Collective name": "allreduce",
                                        "In msg nelems": 1024, "Out msg nelems": 1024,
                                        "dtype": "Float", "Group size": 8,
                                        "Process Group Name": "0"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 120, "dur": 5, "args": {"correlation": 3}},  # no External id: time enclosure
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float",
         "pid": 0, "tid": 20, "ts": 130, "dur": 10, "args": {"correlation": 3, "stream": 20}},
    ]
    tl = read(_write(tmp_path / "c.json", {"traceEvents": ev}))
    k = tl.gpu.row(0, named=True)
    assert (k["coll_name"], k["coll_in_nelems"], k["coll_dtype"], k["coll_group_size"],
            k["coll_pg"]) == ("allreduce", 1024, "Float", 8, "0")


def test_read_dir_rank_by_file_order(tmp_path: Path) -> None:
    for name in ("b.json", "a.json"):
        _write(tmp_path / name, {"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}]})
    tl = read_dir(tmp_path)
    assert tl.sources.sort("rank")["file"].to_list() == ["a.json", "b.json"]
    assert set(tl.sources["rank_source"].cast(pl.String)) == {"file order"}


@pytest.mark.parametrize(("content", "message"), [
    (b"{\"traceEvents\": [", "invalid JSON"),
    (b"[1, 2]", "expected event objects"),
    (b"{\"foo\": 1}", "no traceEvents"),
    (b"{\"traceEvents\": {}}", "expected a list"),
    (b"42", "not a trace"),
    (b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": [1], \"dur\": 1}]}",
     "expected a number"),
])
def test_bad_input_is_one_line_trace_error(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as err:
        read(p)
    assert "\n" not in str(err.value)


def test_truncated_gzip(tmp_path: Path) -> None:
    blob = gzip.compress(json.dumps(_modern()).encode())
    p = tmp_path / "cut.json.gz"
    p.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        read(p)


def test_gzip_bomb_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b"[" + b" " * 5_000_000 + b"]"))
    monkeypatch.setenv("TRACEPARSE_MAX_JSON_BYTES", "1000000")
    with pytest.raises(TraceError, match="gzip bomb"):
        read(p)


def test_exact_times_edge_values(tmp_path: Path) -> None:
    """The fast exact path (only the times float64 cannot hold are quoted as text before
    decoding) agrees with exact decimal arithmetic, for numbers and text alike.

    Worked out by hand (ns = round(us * 1000), ties to even):
      1694128201545123.456 -> 1694128201545123456   (16-digit ts with a fraction: text)
      0.045 dur -> 45; 7 dur -> 7000; 2.5 dur -> 2500 (floats/ints below 2**43 us)
      1694128201545125.4565 (4 decimals, text) -> ...125456 (tie -> even 6)
      1.5e3 dur (exponent, text) -> 1500000; 1694128201545126 (int) -> ...126000
      -0.000 dur is zero (kept, 0 ns); -1.5 dur is skipped as a negative duration.
    """
    times = [("a", "1694128201545123.456", "0.045"), ("b", "1694128201545124.1", "7"),
             ("c", "1694128201545125.4565", "1.5e3"), ("d", "1694128201545126", "2.5"),
             ("e", "1694128201545127.000", "-0.000"), ("f", "1694128201545128.5", "-1.5")]
    body = ", ".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "{n}", "pid": 1, "tid": 1, "ts": {ts}, '
        f'"dur": {dur}}}' for n, ts, dur in times)
    text = '{"traceEvents": [' + body + "]}"
    path = tmp_path / "edge.json"
    path.write_text(text)
    tl = read(path)
    got = tl.ranges.sort("start_ns").select("name", "start_ns", "dur_ns").rows()
    assert got == [("a", 1694128201545123456, 45), ("b", 1694128201545124100, 7000),
                   ("c", 1694128201545125456, 1500000), ("d", 1694128201545126000, 2500),
                   ("e", 1694128201545127000, 0)]
    skipped = tl.ingest.filter(pl.col("reason") == "negative duration")
    assert skipped["count"].sum() == 1


def test_read_dir_shared_pool_matches_serial(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Five small ranks parsed by one helper process plus this one (the pool threshold is
    lowered to 0) give the same timeline as a serial parse: rank k has one kernel of
    k + 1 us, so the gpu durations sorted by rank are 1000, 2000, ... 5000 ns."""
    for k in range(5):
        _write(tmp_path / f"rank_{k}.json", {"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10,
             "dur": k + 1}]})
    serial = read_dir(tmp_path, workers=1)
    monkeypatch.setattr(traceparse.kineto.ranks, "PARALLEL_MIN_BYTES", 0)
    shared = read_dir(tmp_path, workers=2)
    assert shared.gpu.sort("rank")["dur_ns"].to_list() == [1000, 2000, 3000, 4000, 5000]
    for table in ("gpu", "api", "ranges", "devices", "ingest", "sources"):
        assert getattr(shared, table).equals(getattr(serial, table)), table
    assert shared.meta == serial.meta
    assert shared.meta["ranks"] == [0, 1, 2, 3, 4]
    (tmp_path / "rank_2.json").write_bytes(b'{"traceEvents": [')
    with pytest.raises(TraceError, match="invalid JSON"):
        read_dir(tmp_path, workers=2)


def test_read_dir_shares_once_a_core_was_idle(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The 1-minute load average says no core is free (idle_cores 0): the last file is
    parsed here, and when a core was idle meanwhile (idle_since 1.0) the other four are
    shared with one helper; when none was (0.0), all five stay in this process. Both give
    the serial timeline."""
    import os

    reader = traceparse.kineto.ranks
    for k in range(5):
        _write(tmp_path / f"rank_{k}.json", {"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10,
             "dur": k + 1}]})
    serial = read_dir(tmp_path, workers=1)
    monkeypatch.setattr(reader, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(reader, "idle_cores", lambda: 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    shared_jobs: list[list[tuple[str, int]]] = []
    real_shared = reader._read_shared

    def spy(jobs: list[tuple[str, int]], helpers: int) -> list[Timeline]:
        shared_jobs.append(jobs)
        assert helpers == 1
        return real_shared(jobs, helpers)

    monkeypatch.setattr(reader, "_read_shared", spy)
    for idle, want in ((1.0, [[0, 1, 2, 3]]), (0.0, [])):
        shared_jobs.clear()
        monkeypatch.setattr(reader, "idle_since", lambda mark, idle=idle: idle)
        got = read_dir(tmp_path)
        assert [[i for _p, i in jobs] for jobs in shared_jobs] == want
        assert got.gpu.sort("rank")["dur_ns"].to_list() == [1000, 2000, 3000, 4000, 5000]
        for table in ("gpu", "api", "ranges", "devices", "ingest", "sources"):
            assert getattr(got, table).equals(getattr(serial, table)), table
        assert got.meta == serial.meta


def test_idle_since_counts_idle_ticks_per_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """150 idle ticks over 1 s at 100 ticks/s: 1.5 cores were idle; no mark (no
    /proc/stat) counts none."""
    import os

    reader = traceparse.kineto.ranks
    monkeypatch.setattr(reader, "_idle_mark", lambda: (1150, 11.0))
    monkeypatch.setattr(os, "sysconf", lambda name: 100)
    assert reader.idle_since((1000, 10.0)) == 1.5
    assert reader.idle_since(None) == 0.0
