"""Memory timeline and peaks: generated Kineto-style frames (recorded totals), generated
nsys exports, and uvm-pytorch__report4.sqlite against an independent replay of its events."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import TRACES
from tests.nsys_extra import add_table, write_base
from traceparse import schema
from traceparse.analyses import memory as MM
from traceparse.nsys.reader import read
from traceparse.timeline import Timeline

UVM = TRACES / "nsys" / "uvm-pytorch__report4.sqlite"
MB = 1 << 20


def _kineto_like() -> Timeline:
    """Two steps; ops: aten::a [10, 40) and aten::b [60, 90) in step 1, aten::a [110, 140)
    in step 2; [memory] events with Kineto's own totals (allocated, reserved)."""
    ev = [  # ts, bytes, total allocated, total reserved
        (5, 4 * MB, 4 * MB, 20 * MB),        # before step 1: level 4 MB
        (15, 8 * MB, 12 * MB, 20 * MB),      # in aten::a: 12
        (30, -8 * MB, 4 * MB, 20 * MB),      # 4
        (70, 32 * MB, 36 * MB, 40 * MB),     # in aten::b: 36 (peak of step 1), reserve 40
        (80, -16 * MB, 20 * MB, 40 * MB),    # 20
        (120, 2 * MB, 22 * MB, 40 * MB),     # in aten::a (step 2): 22
        (130, -2 * MB, 20 * MB, 40 * MB),    # 20
    ]
    mem = schema.conform("memory", pl.DataFrame({
        "rank": [0] * len(ev), "device_id": [0] * len(ev), "ts_ns": [e[0] for e in ev],
        "kind": ["alloc" if e[1] > 0 else "free" for e in ev], "bytes": [e[1] for e in ev],
        "allocated_bytes": [e[2] for e in ev], "reserved_bytes": [e[3] for e in ev],
        "source": ["kineto [memory]"] * len(ev)}))
    rng = [("profiler_step", "ProfilerStep#1", 0, 100, None),
           ("profiler_step", "ProfilerStep#2", 100, 200, None),
           ("cpu_op", "aten::a", 10, 40, 0), ("cpu_op", "aten::b", 60, 90, 0),
           ("cpu_op", "aten::empty", 65, 75, 1), ("cpu_op", "aten::a", 110, 140, 0),
           # a Python frame around everything: ops under it are still top-level ops
           ("python_function", "train.py(7): main", 0, 200, 0)]
    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0] * len(rng), "kind": [r[0] for r in rng], "name": [r[1] for r in rng],
        "start_ns": [r[2] for r in rng], "end_ns": [r[3] for r in rng],
        "dur_ns": [r[3] - r[2] for r in rng], "thread_id": [1] * len(rng),
        "depth": [r[4] for r in rng]}, schema_overrides={"depth": pl.Int32}))
    return Timeline(memory=mem, ranges=ranges).validate()


def test_kineto_like_peaks_per_device_step_op() -> None:
    tl = _kineto_like()
    p = MM.peaks(tl)
    assert p["peak_allocated_bytes"].to_list() == [36 * MB]
    assert p["peak_ts_ns"].to_list() == [70]
    assert p["peak_reserved_bytes"].to_list() == [40 * MB]
    assert p["final_allocated_bytes"].to_list() == [20 * MB]
    assert p["replayed"].to_list() == [False]
    s = MM.step_peaks(tl).sort("start_ns")
    # step 1 starts at level 0 (first event at 5): peak 36; step 2 starts at 20, peak 22
    assert s["step"].to_list() == ["ProfilerStep#1", "ProfilerStep#2"]
    assert s["start_allocated_bytes"].to_list() == [0, 20 * MB]
    assert s["peak_allocated_bytes"].to_list() == [36 * MB, 22 * MB]
    assert s["rise_bytes"].to_list() == [36 * MB, 2 * MB]
    assert s["peak_reserved_bytes"].to_list() == [40 * MB, 40 * MB]
    o = MM.op_peaks(tl)
    # aten::b: starts at 4, peaks 36 -> rise 32; aten::a: 12-4 = 8 and 22-20 = 2
    rows = {r["name"]: r for r in o.iter_rows(named=True)}
    assert set(rows) == {"aten::a", "aten::b"}  # aten::empty is nested, not top-level
    assert rows["aten::b"]["max_rise_bytes"] == 32 * MB
    assert rows["aten::a"]["instances"] == 2
    assert rows["aten::a"]["max_rise_bytes"] == 8 * MB
    assert rows["aten::a"]["peak_allocated_bytes"] == 22 * MB
    assert rows["aten::a"]["total_rise_bytes"] == 10 * MB


def test_nsys_generated_alloc_free_replay(tmp_path: Path) -> None:
    p = write_base(tmp_path / "m.sqlite", [("k", 1_000, 2_000)])
    cols = ["start", "globalPid", "deviceId", "contextId", "address", "pc", "bytes", "memKind",
            "memoryOperationType", "name", "correlationId"]
    gp = 4242 << 24
    add_table(p, "CUDA_GPU_MEMORY_USAGE_EVENTS", cols, [
        (100, gp, 0, 1, 0xA000, 0, 1000, 2, 0, None, 1),   # alloc 1000 -> 1000
        (200, gp, 0, 1, 0xB000, 0, 500, 4, 0, None, 2),    # managed 500 -> 1500
        (300, gp, 0, 1, 0xA000, 0, 1000, 2, 1, None, 3),   # free 1000 -> 500
        (400, gp, 1, 1, 0xC000, 0, 64, 2, 0, None, 4),     # other device
    ])
    tl = read(p)
    assert tl.memory["kind"].cast(pl.String).to_list() == ["alloc", "alloc", "free", "alloc"]
    assert tl.memory["bytes"].to_list() == [1000, 500, -1000, 64]
    assert tl.memory["process_id"].to_list() == [4242] * 4
    pk = MM.peaks(tl)
    assert pk["device_id"].to_list() == [0, 1]
    # device memory = Device kinds only: 1000 -> (managed 500 not device memory) -> 0;
    # the managed 500 B is beside it, not in it
    assert pk["peak_allocated_bytes"].to_list() == [1000, 64]
    assert pk["final_allocated_bytes"].to_list() == [0, 64]
    assert pk["not_device_peak_bytes"].to_list() == [500, None]
    kinds = MM.peaks(tl, by_kind=True).filter(pl.col("device_id") == 0)
    assert dict(zip(kinds["memory_kind"], kinds["peak_allocated_bytes"], strict=True)) == {
        "Device": 1000, "Managed": 500}


@pytest.mark.shared
def test_uvm_peak_matches_independent_replay() -> None:
    con = sqlite3.connect(f"file:{UVM}?mode=ro", uri=True)
    level = peak = 0
    peak_ts = None
    n = 0
    # device memory: memKind 2 Device, 3 Array, 5 Device Static (ENUM_CUDA_MEM_KIND); the
    # 20.57 GB of kind 4 (Managed: unified memory, on an 11.5 GB RTX 2080 Ti) is not
    managed = 0
    for start, size, op, kind in con.execute(
            "SELECT start, bytes, memoryOperationType, memKind FROM "
            "CUDA_GPU_MEMORY_USAGE_EVENTS WHERE deviceId = 0 ORDER BY start, rowid"):
        if kind not in (2, 3, 5):
            managed += size if op == 0 else -size
            continue
        level += size if op == 0 else -size
        n += 1
        if level > peak:
            peak, peak_ts = level, start
    con.close()
    assert n == 3822 and peak == 1_091_821 and managed == 20_568_866_816
    tl = read(UVM)
    pk = MM.peaks(tl)
    assert pk["events"].to_list() == [n]
    assert pk["peak_allocated_bytes"].to_list() == [peak]
    assert pk["peak_ts_ns"].to_list() == [peak_ts]
    assert pk["final_allocated_bytes"].to_list() == [level]
    assert pk["not_device_peak_bytes"].to_list() == [managed]  # only allocs: peak = sum
    assert tl.devices["memory_bytes"][0] < managed  # more than the GPU has: not its memory


def _mem_export(tmp_path: Path) -> Path:
    p = write_base(tmp_path / "cli.sqlite", [("k", 1_000, 2_000)])
    cols = ["start", "globalPid", "deviceId", "contextId", "address", "pc", "bytes", "memKind",
            "memoryOperationType"]
    add_table(p, "CUDA_GPU_MEMORY_USAGE_EVENTS", cols, [
        (100, 0, 0, 1, 1, 0, 300, 2, 0), (150, 0, 0, 1, 2, 0, 200, 2, 0),
        (300, 0, 0, 1, 1, 0, 300, 2, 1)])
    return p


def test_cli_memory_csv_and_force(tmp_path: Path) -> None:
    import csv
    import io

    from click.testing import CliRunner

    from traceparse.cli import main

    p = _mem_export(tmp_path)
    res = CliRunner().invoke(main, ["--no-cache", "memory", str(p), "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["rank"], r["device_id"], r["peak_allocated_bytes"], r["final_allocated_bytes"])
            for r in rows] == [("0", "0", "500", "200")]
    out = tmp_path / "m.csv"
    out.write_text("keep")
    res = CliRunner().invoke(main, ["--no-cache", "memory", str(p), "-o", str(out)])
    assert res.exit_code == 2 and "--force" in res.output
    assert out.read_text() == "keep"
    res = CliRunner().invoke(main, ["--no-cache", "memory", str(p), "-o", str(out), "--force",
                                    "--format", "json", "--by", "timeline"])
    assert res.exit_code == 0
    import json
    assert [r["allocated_bytes"] for r in json.loads(out.read_text())] == [300, 500, 200]


RESNET = TRACES / "torch" / "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz"


@pytest.mark.shared
def test_resnet50_step_peaks_from_its_memory_events() -> None:
    """The ResNet-50 trace's [memory] events (sizes only, no totals) mapped here the way the
    memory schema defines them, then step peaks checked against a replay written here."""
    import gzip
    import json

    from traceparse.loader import load

    doc = json.loads(gzip.decompress(RESNET.read_bytes()))
    ev = doc["traceEvents"] if isinstance(doc, dict) else doc
    mem = sorted((e for e in ev if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    assert len(mem) == 12838
    frame = schema.conform("memory", pl.DataFrame({
        "rank": [0] * len(mem), "device_id": [e["args"]["Device Id"] for e in mem],
        "ts_ns": [round(e["ts"] * 1000) for e in mem],
        "kind": ["alloc" if e["args"]["Bytes"] > 0 else "free" for e in mem],
        "bytes": [e["args"]["Bytes"] for e in mem], "source": ["kineto [memory]"] * len(mem)}))
    tl = load(RESNET)
    tl = Timeline(**{**tl.tables(), "memory": frame}, meta=tl.meta).validate()
    got = MM.step_peaks(tl).filter(pl.col("device_id") == 0).sort("start_ns")
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: e["ts"])
    assert got["step"].to_list() == [e["name"] for e in steps]
    gpu = [(round(e["ts"] * 1000), e["args"]["Bytes"]) for e in mem
           if e["args"]["Device Id"] == 0]
    for row, st in zip(got.iter_rows(named=True), steps, strict=True):
        s, e = round(st["ts"] * 1000), round((st["ts"] + st["dur"]) * 1000)
        level = sum(b for t, b in gpu if t < s)
        peak = level
        for t, b in gpu:
            if s <= t < e:
                level += b
                peak = max(peak, level)
        assert (row["start_allocated_bytes"], row["peak_allocated_bytes"]) == (
            sum(b for t, b in gpu if t < s), peak), row["step"]


def test_recorded_level_before_the_first_event_is_its_total_minus_its_bytes() -> None:
    """Kineto's Total Allocated counts what was allocated before the capture: the first
    event (ts 20, +2 MB, total 10 MB) says 8 MB were there already, so a step [0, 100) that
    peaks at 12 MB rose 4 MB, not 12 (before: "rise 12 MB", the weights counted as the step's)."""
    ev = [(20, 2 * MB, 10 * MB), (30, 2 * MB, 12 * MB), (40, -4 * MB, 8 * MB)]
    mem = schema.conform("memory", pl.DataFrame({
        "rank": [0] * 3, "device_id": [0] * 3, "ts_ns": [e[0] for e in ev],
        "kind": ["alloc", "alloc", "free"], "bytes": [e[1] for e in ev],
        "allocated_bytes": [e[2] for e in ev], "reserved_bytes": [16 * MB] * 3,
        "source": ["kineto [memory]"] * 3}))
    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0], "kind": ["profiler_step"], "name": ["ProfilerStep#1"], "start_ns": [0],
        "end_ns": [100], "dur_ns": [100], "thread_id": [1], "depth": [None]},
        schema_overrides={"depth": pl.Int32}))
    s = MM.step_peaks(Timeline(memory=mem, ranges=ranges).validate()).row(0, named=True)
    # level at 0 = 10 MB - 2 MB = 8 MB; peak 12 MB; rise 12 - 8 = 4 MB
    assert (s["start_allocated_bytes"], s["peak_allocated_bytes"], s["rise_bytes"]) == \
        (8 * MB, 12 * MB, 4 * MB)


def test_device_peak_counts_the_level_before_a_first_free() -> None:
    """A capture that opens on a free: the first event (ts 20, -6 MB, total 10 MB) says
    16 MB were allocated before it, more than any total recorded after (12 MB at ts 30).
    The device's peak is 16 MB at ts 20 (it was 12 MB at ts 30: the level the device held
    when the capture began was left out); a window over it already counted that level."""
    ev = [(20, -6 * MB, 10 * MB), (30, 2 * MB, 12 * MB), (40, -4 * MB, 8 * MB)]
    mem = schema.conform("memory", pl.DataFrame({
        "rank": [0] * 3, "device_id": [0] * 3, "ts_ns": [e[0] for e in ev],
        "kind": ["free", "alloc", "free"], "bytes": [e[1] for e in ev],
        "allocated_bytes": [e[2] for e in ev], "reserved_bytes": [16 * MB] * 3,
        "source": ["kineto [memory]"] * 3}))
    p = MM.peaks(Timeline(memory=mem).validate()).row(0, named=True)
    assert (p["peak_allocated_bytes"], p["peak_ts_ns"]) == (16 * MB, 20)
    assert p["final_allocated_bytes"] == 8 * MB
    # opening on an allocation leaves the recorded maximum as the peak (10 + 2 = 12 MB)
    up = mem.with_columns(pl.Series("bytes", [2 * MB, 2 * MB, -4 * MB]))
    q = MM.peaks(Timeline(memory=up).validate()).row(0, named=True)
    assert (q["peak_allocated_bytes"], q["peak_ts_ns"]) == (12 * MB, 30)


@pytest.mark.shared
def test_sglang_decode_step_did_not_add_152_gb() -> None:
    """TraceLens SGLang decode (MI300X): the profiled step starts with 151.8 GB already
    allocated (weights, KV cache); its rise is what the step added, from the raw events."""
    import gzip
    import json

    from traceparse import load

    path = TRACES / "torch" / "tracelens__sglang_decode_capture_bs_32_rank0.json.gz"
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    mem = sorted((e["ts"], e["args"]) for e in ev if e.get("name") == "[memory]")
    first = mem[0][1]
    before = first["Total Allocated"] - first["Bytes"]  # 151,811,957,760 - 262,144
    step = next(e for e in ev if e.get("name") == "ProfilerStep#134")
    inside = [a["Total Allocated"] for t, a in mem if step["ts"] <= t < step["ts"] + step["dur"]]
    assert mem[0][0] >= step["ts"]  # the step starts before the first event
    s = MM.step_peaks(load(path)).filter(pl.col("device_id") == 9).row(0, named=True)
    assert s["start_allocated_bytes"] == before == 151_811_695_616
    assert s["peak_allocated_bytes"] == max(inside)
    assert s["rise_bytes"] == max(inside) - before == 9_986_048
