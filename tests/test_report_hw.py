"""Report sections for GPU metrics, memory and graphs: the same numbers as the analyses and
``summary`` (one computation), figures present, trace strings escaped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import TRACES
from tests.test_memory import _kineto_like
from traceparse.analyses import memory as MM
from traceparse.analyses import metrics as M
from traceparse.nsys.reader import read
from traceparse.reports.html import render_html
from traceparse.reports.payload import ReportOptions, build_payload, rows
from traceparse.timeline import Timeline

RESEST = TRACES / "nsys" / "resest__report2.sqlite"
UVM = TRACES / "nsys" / "uvm-pytorch__report4.sqlite"


@pytest.mark.shared
def test_resest_report_gpu_metrics_and_counter_lanes() -> None:
    tl = read(RESEST)
    p = build_payload(tl, options=ReportOptions())
    gm = p["gpu_metrics"]
    want = rows(M.kernel_metrics(tl).head(ReportOptions().top_n))
    got = gm["table"]["rows"]
    assert [r["name"] for r in got] == [r["name"] for r in want]
    for g, w in zip(got, want, strict=True):
        for key in ("sm_active_pct", "tensor_active_pct", "dram_bytes", "gpc_clock_hz"):
            assert g[key] == pytest.approx(w[key])
    assert gm["sampled_khz"] == pytest.approx(10.0)
    labels = {s["label"] for s in gm["counters"]["series"]}
    assert labels == {"SM active", "Tensor active", "DRAM read+write", "GPC clock"}
    assert gm["caveat"] and "96.3%" in gm["caveat"]
    html = render_html(p)
    for anchor in ('id="gpu-metrics"', 'id="counter-lanes"', 'id="hw-caveat"'):
        assert anchor in html
    assert "sampled at 10 kHz" in html
    unread = {r["source"]: r for r in p["unread_tables"]["rows"]}
    # OS-runtime calls are read (gap causes use them); their call chains are not
    with sqlite3.connect(f"file:{RESEST}?mode=ro", uri=True) as db:
        chains = db.execute("SELECT COUNT(*) FROM OSRT_CALLCHAINS").fetchone()[0]
        osrt = db.execute("SELECT COUNT(*) FROM OSRT_API").fetchone()[0]
    assert "OSRT_API" not in unread
    assert unread["OSRT_CALLCHAINS"]["count"] == chains == 1120
    assert unread["OSRT_CALLCHAINS"]["outcome"] == "not read"
    assert tl.ranges.filter(pl.col("kind").cast(pl.String) == "osrt").height == osrt == 667
    assert unread["StringIds"]["outcome"] == "lookup"
    assert 'id="unread-tables"' in html


@pytest.mark.shared
def test_uvm_report_memory_section() -> None:
    tl = read(UVM)
    p = build_payload(tl, options=ReportOptions())
    mem = p["memory"]
    peak = MM.peaks(tl)
    assert mem["peaks"]["rows"][0]["peak_allocated_bytes"] == peak["peak_allocated_bytes"][0]
    series = mem["series"][0]
    assert max(series["allocated_bytes"]) == peak["peak_allocated_bytes"][0]
    html = render_html(p)
    assert 'id="memory"' in html and html.count("<svg") >= 2


def test_kineto_like_report_steps_ops_and_escaping() -> None:
    tl = _kineto_like()
    tl.ranges = tl.ranges.with_columns(
        pl.when(pl.col("name") == "aten::b").then(pl.lit("<script>alert(1)</script>"))
        .otherwise(pl.col("name").cast(pl.String)).cast(pl.Categorical).alias("name"))
    tl = Timeline(**{n: f for n, f in tl.tables().items()}).validate()
    p = build_payload(tl, options=ReportOptions())
    mem = p["memory"]
    steps = {r["step"]: r for r in mem["steps"]["rows"]}
    assert steps["ProfilerStep#1"]["peak_allocated_bytes"] == 36 << 20
    ops = {r["name"]: r for r in mem["ops"]["rows"]}
    assert ops["<script>alert(1)</script>"]["max_rise_bytes"] == 32 << 20
    html = render_html(p)
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_chrome_counter_tracks(tmp_path: Path) -> None:
    import orjson

    from tests.nsys_extra import add_metrics, add_table, write_base
    from traceparse.reports.chrome import to_chrome

    # kernel at 10 us, its launch call at 5 us, first metric sample at 4 us
    p = write_base(tmp_path / "c.sqlite", [("k", 10_000, 10_200)])
    add_metrics(p, {"SM Active": [(4_000, 10), (10_000, 90), (10_100, 50)]})
    add_table(p, "CUDA_GPU_MEMORY_USAGE_EVENTS", ["start", "globalPid", "deviceId",
              "contextId", "address", "pc", "bytes", "memKind", "memoryOperationType"],
              [(4_500, 0, 0, 1, 1, 0, 4096, 2, 0), (10_150, 0, 0, 1, 1, 0, 4096, 2, 1)])
    doc = orjson.loads(to_chrome(read(p)))
    assert doc["otherData"]["base_ns"] == 4_000  # the first sample, before any activity
    c = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    sm = [(e["ts"], e["args"]["value"]) for e in c if e["name"] == "SM Active (%)"]
    assert sm == [(0.0, 10.0), (6.0, 90.0), (6.1, 50.0)]
    mem = [(e["ts"], e["args"]["allocated"]) for e in c if e["name"] == "memory (bytes)"]
    assert mem == [(0.5, 4096), (6.15, 0)]
    assert {e["pid"] for e in c} == {0}


def test_report_gpu_metrics_per_step_and_range(tmp_path: Path) -> None:
    from tests.test_gpu_metrics import _export
    from traceparse import schema

    tl = read(_export(tmp_path))
    rng = [("nvtx_push_pop", "step 1", 1_000, 1_250), ("nvtx_push_pop", "step 2", 1_250, 1_500)]
    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0, 0], "kind": [r[0] for r in rng], "name": [r[1] for r in rng],
        "start_ns": [r[2] for r in rng], "end_ns": [r[3] for r in rng],
        "dur_ns": [r[3] - r[2] for r in rng]}))
    tl = Timeline(**{**tl.tables(), "ranges": ranges}, meta=tl.meta).validate()
    gm = build_payload(tl, options=ReportOptions())["gpu_metrics"]
    steps = {r["step"]: r["sm_active_pct"] for r in gm["steps"]["rows"]}
    # step 1: 10, 20 for 100 ns each + 30 for 50 ns -> 4500 / 250 = 18
    # step 2: 30 for 50 ns + 40, 50 for 100 ns each -> 10500 / 250 = 42
    assert steps == {"step 1": pytest.approx(18.0), "step 2": pytest.approx(42.0)}
    assert [r["name"] for r in gm["ranges"]["rows"]] == ["step 1", "step 2"]
    html = render_html(build_payload(tl, options=ReportOptions()))
    assert "Per step" in html and "Per NVTX range" in html


def test_memory_counter_lane_on_the_timeline_axis() -> None:
    """The report timeline carries a device-memory counter lane (as the Chrome export's
    ``memory (bytes)`` track), drawn in the timeline's plot box: same figure width and the
    same left/right edges, so the time axes line up; host memory stays in its section."""
    import re

    from traceparse.reports import figures, hw_figures

    series = [{"rank": 0, "device_id": 0, "ts_ns": [1_000, 5_000, 9_000],
               "allocated_bytes": [2**30, 3 * 2**30, 2**30], "reserved_bytes": [None] * 3},
              {"rank": 0, "device_id": -1, "ts_ns": [1_000], "allocated_bytes": [2**20],
               "reserved_bytes": [None]}]
    mem = hw_figures.memory_lanes(series, window_start_ns=0, window_ns=10_000)
    tl = figures.timeline_overview({"categories": ["compute"], "window_ns": 10_000, "lanes": [
        {"rank": 0, "device_id": 0, "stream_id": 7, "segments": [[0, 4_000, 0, 1.0]]}]})

    def box(svg: str) -> tuple[str, str]:
        w = re.search(r'<svg[^>]*width="([\d.]+)pt"', svg)
        # the first axes' background patch: "M x0 y0 L x1 y0 ..."
        ax = re.search(r'<g id="patch_2">\s*<path d="M ([\d.]+) [\d.]+\s*L ([\d.]+)', svg)
        assert w and ax, svg[:500]
        return w.group(1), ax.group(1) + "-" + ax.group(2)
    assert box(mem) == box(tl)
    assert "GPU0" in mem and "host" not in mem


@pytest.mark.shared
def test_report_timeline_has_the_memory_lane() -> None:
    from traceparse import load

    gpt = TRACES / "gpu" / "h200" / "gpt_train_decode.json.gz"
    if not gpt.is_file():
        pytest.skip("no H200 GPT capture in the corpus")
    tl = load(gpt)
    assert MM.device_levels(tl).filter(pl.col("device_id") >= 0).height > 0
    html = render_html(build_payload(tl))
    i = html.index('<section id="timeline">')
    sec = html[i:html.index("</section>", i)]
    assert 'id="memory-lanes"' in sec and sec.count("<svg") == 2


def test_memory_lane_before_the_first_event_is_the_initial_level() -> None:
    """A window that ends before the device's first memory event: the lane holds the level
    the capture started with (``initial_bytes``), not 0 GiB (the SGLang MI300X capture's
    11 us window drew an empty 0-0.001 GiB lane beside 141 GiB allocated)."""
    from traceparse.reports import hw_figures

    # events at 5 and 8 us; the window is [0, 2) us; the first event allocated 1 GiB of a
    # 4 GiB total -> 3 GiB before it
    s = {"rank": 0, "device_id": 0, "ts_ns": [5_000, 8_000],
         "allocated_bytes": [4 * 2**30, 5 * 2**30], "reserved_bytes": [None, None],
         "initial_bytes": 3 * 2**30}
    assert hw_figures.lane_levels(s, 0, 2_000) == ([0.0, 0.002], [3.0, 3.0])
    # an event inside the window [0, 6) us: 3 GiB until 5 us, then 4 GiB
    assert hw_figures.lane_levels(s, 0, 6_000) == ([0.0, 0.005, 0.006], [3.0, 4.0, 4.0])
    # an event before the window (window starts at 6 us): its level holds
    assert hw_figures.lane_levels(s, 6_000, 1_000) == ([0.0, 0.001], [4.0, 4.0])


@pytest.mark.shared
def test_sglang_capture_memory_lane_holds_the_allocated_level() -> None:
    import gzip
    import json

    from traceparse import load
    from traceparse.reports import hw_figures

    path = TRACES / "torch/tracelens__sglang_decode_capture_bs_32_rank0.json.gz"
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    mem = sorted((e for e in ev if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    kern = [e for e in ev if e.get("cat") == "kernel"]
    # every memory event comes after the last kernel ends: the GPU window holds none
    assert mem[0]["ts"] > max(k["ts"] + k["dur"] for k in kern)
    before = mem[0]["args"]["Total Allocated"] - mem[0]["args"]["Bytes"]
    payload = build_payload(load(path))
    s = next(x for x in payload["memory"]["series"] if x["device_id"] >= 0)
    assert s["initial_bytes"] == before == 151_811_695_616
    tl = payload["timeline"]
    _, ys = hw_figures.lane_levels(s, tl["window_start_ns"], tl["window_ns"])
    assert ys == [before / 2**30] * 2


@pytest.mark.shared
def test_timeline_lane_without_a_stream_is_named_so() -> None:
    # alexnet's device-wide synchronisation rows carry no stream: their lane read "sNone"
    from traceparse import load
    from traceparse.reports import figures

    tl = load(TRACES / "torch" / "hta__alexnet_benchmark_trace.json.gz")
    lanes = build_payload(tl)["timeline"]["lanes"]
    labels = [figures.lane_label(r, False) for r in lanes]
    assert "GPU0 no stream" in labels and not any("None" in x for x in labels)
    assert (tl.gpu["stream_id"].null_count() > 0)
    svg = figures.timeline_overview(build_payload(tl)["timeline"])
    assert "sNone" not in svg and "no stream" in svg
