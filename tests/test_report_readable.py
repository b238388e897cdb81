"""What a reader sees in the report and the CLI tables: clocks, bandwidths and FLOP rates in
SI units, identifiers without thousands separators, flags as yes/no, memory peak times
relative to the trace start (never a raw epoch timestamp), phase headings that name the
phases the trace has."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import TRACES
from tests.test_memory import _kineto_like
from traceparse.cli import main
from traceparse.reports.html import fmt_bool, fmt_id, fmt_si, render_html
from traceparse.reports.payload import ReportOptions, build_payload
from traceparse.timeline import Timeline

RESNET = TRACES / "torch" / "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz"
#: a Kineto-like epoch offset (µs since 1970 as ns), as in real torch traces
EPOCH_NS = 1_623_142_623_460_016_000


def test_si_id_bool_formatters() -> None:
    assert fmt_si(3_352_320_000_000, "B/s") == "3.35 TB/s"      # H100 HBM3 datasheet value
    assert fmt_si(1_980_000_000, "Hz") == "1,980 MHz"
    assert fmt_si(1_695_000_000, "Hz") == "1,695 MHz"           # RTX 3090 (resest): not 1.7 GHz
    assert fmt_si(216_145_774_290_091, "FLOP/s") == "216 TFLOP/s"
    assert fmt_si(23_288_058_409, "B/s") == "23.3 GB/s"
    assert fmt_si(0, "B/s") == "0 B/s"
    assert fmt_si(None, "Hz") == ""
    assert fmt_id(60060) == "60060" and fmt_id(None) == ""
    assert fmt_bool(True) == "yes" and fmt_bool(False) == "no" and fmt_bool(None) == ""


def test_device_table_clock_and_bandwidth_in_si_units() -> None:
    from traceparse.reports.build import report_html
    from traceparse.samplegen.scenarios import default_sample

    html = report_html([default_sample()])
    dev = html[html.index('id="devices"'):html.index('id="provenance"')]
    # the sample's H100: 1,980 MHz max clock, 3,352.32 GB/s (TARGET_INFO_GPU values)
    assert ">1,980 MHz<" in dev and ">3.35 TB/s<" in dev
    assert "1,980,000,000" not in dev and "3,352,320,000,000" not in dev
    # summed activity time can exceed the window (streams overlap): not labelled "busy"
    con = sqlite3.connect(default_sample())
    total = sum(con.execute(f"SELECT sum(end - start) FROM {t}").fetchone()[0] or 0
                for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"))
    con.close()
    assert "activity time, summed (ms)" in dev and f">{total / 1e6:,.3f}<" in dev


def _shift(tl: Timeline, off: int) -> Timeline:
    """The same timeline ``off`` ns later (a Kineto epoch clock)."""
    tables = tl.tables()
    tables["memory"] = tables["memory"].with_columns(pl.col("ts_ns") + off)
    tables["ranges"] = tables["ranges"].with_columns(pl.col("start_ns") + off,
                                                     pl.col("end_ns") + off)
    return Timeline(**tables).validate()


def test_memory_peak_time_counts_from_trace_start() -> None:
    # _kineto_like: first event (ProfilerStep#1, Python frame) at 0, peak 36 MiB at 70 ns
    tl = _shift(_kineto_like(), EPOCH_NS)
    p = build_payload(tl, options=ReportOptions())
    row = p["memory"]["peaks"]["rows"][0]
    assert row["peak_at_ns"] == 70 and p["memory"]["t0_ns"] == EPOCH_NS
    html = render_html(p)
    mem = html[html.index('id="memory"'):html.index('<script type="application/json"')]
    assert "peak at (ms from trace start)" in mem
    assert f"{EPOCH_NS + 70:,}" not in mem and str(EPOCH_NS + 70) not in mem
    assert "time since the trace start (s)" in mem  # the chart counts from the same origin


def _resnet_peaks() -> tuple[dict[int, tuple[int, float]], float]:
    """Peak level per Device Id from the trace's own [memory] events (summed Bytes in ts
    order), and the trace start: the first complete event (µs), the profiler's own
    'PyTorch Profiler' span (cat Trace) aside."""
    with gzip.open(RESNET) as f:
        ev = json.load(f)["traceEvents"]
    mem = sorted((e for e in ev if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    level: dict[int, int] = defaultdict(int)
    best: dict[int, tuple[int, float]] = {}
    for e in mem:
        dev = e["args"]["Device Id"]
        level[dev] += e["args"]["Bytes"]
        if level[dev] > best.get(dev, (0, 0.0))[0]:
            best[dev] = (level[dev], e["ts"])
    t0 = min(e["ts"] for e in ev if e.get("ph") == "X" and e.get("cat") != "Trace")
    return best, t0


@pytest.mark.shared
def test_resnet_memory_peak_times_relative_in_cli_and_report() -> None:
    best, t0 = _resnet_peaks()
    # device 0: 2.79 GB at +122 ms; host (-1): 57.8 MB at +245 ms (from the JSON above)
    assert best[0][0] == 2_791_636_480 and round((best[0][1] - t0) / 1e3) == 122
    assert round((best[-1][1] - t0) / 1e3) == 245
    res = CliRunner().invoke(main, ["--no-cache", "memory", str(RESNET)])
    assert res.exit_code == 0, res.output
    lines = {ln.split()[1]: ln for ln in res.output.splitlines()[2:]}
    assert "+122 ms" in lines["0"] and "+245 ms" in lines["-1"]
    assert "1623142" not in res.output  # no epoch seconds
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(RESNET)])
    mem = res.output[res.output.index("Device memory"):]
    assert "dev 0: peak 2.79 GB at +122 ms" in mem and "dev -1: peak 57.8 MB at +245 ms" in mem
    assert "1623142" not in mem  # was: at 1623142623582083000 ns
    from traceparse.loader import load

    p = build_payload(load(RESNET), options=ReportOptions())
    rows = {r["device_id"]: r for r in p["memory"]["peaks"]["rows"]}
    assert rows[0]["peak_allocated_bytes"] == best[0][0]
    assert rows[0]["peak_at_ns"] / 1e3 == pytest.approx(best[0][1] - t0, abs=1)


@pytest.mark.shared
def test_training_trace_phase_heading_names_its_phases() -> None:
    files = sorted((TRACES / "torch").glob("param__dlrm_8rank__worker*"))
    assert len(files) == 8
    from traceparse.reports.build import report_html

    html = report_html(files)
    heading = re.search(r"<h2>Phases: ([^<]*)</h2>", html)
    assert heading is not None and heading.group(1) == "train"  # DLRM training, no serving


def test_fill_and_zero_write_their_output_only() -> None:
    from traceparse.roofline.estimate import memory_op_work

    # fill_ of a [256, 256, 3, 3] fp32 weight (ResNet-50): 589,824 elements written, 4 B each;
    # counting a read of self too put ResNet-50's fill_ point at 145% of the V100 DRAM roof;
    # a fill does no arithmetic: 0 FLOPs (a bandwidth point, issue 26)
    assert memory_op_work("aten::fill_", [[256, 256, 3, 3], []], ["float", "Int"]) == (
        0.0, 2_359_296.0)
    assert memory_op_work("aten::zero_", [[1024]], ["float"]) == (0.0, 4096.0)
    # an out-of-place op still reads its input: div of [32, 2048, 7, 7] by a scalar
    n = 32 * 2048 * 7 * 7
    assert memory_op_work("aten::div", [[32, 2048, 7, 7], []], ["float", "Scalar"]) == (
        float(n), 8.0 * n)


@pytest.mark.shared
def test_dlrm_skew_table_times_count_from_first_gpu_activity() -> None:
    files = sorted((TRACES / "torch").glob("param__dlrm_8rank__worker*"))
    t0, t1 = float("inf"), 0.0  # first kernel/memcpy start and last end over the 8 ranks (µs)
    for f in files:
        with open(f, "rb") as fh:
            ev = json.load(fh)["traceEvents"]
        gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy",
                                                                         "gpu_memset")]
        t0 = min(t0, min(e["ts"] for e in gpu))
        t1 = max(t1, max(e["ts"] + e["dur"] for e in gpu))
    from traceparse.loader import load

    p = build_payload([load(f) for f in files], options=ReportOptions())
    skew = next(t for t in p["comm"]["tables"] if t["title"] == "Largest cross-rank start skews")
    labels = {c["key"]: c["label"] for c in skew["columns"]}
    assert labels["first_start_ns"] == "first start (ms from first activity)"
    assert skew["rows"] and t1 - t0 < 1e6  # the 8 ranks' GPU work spans well under a second
    for r in skew["rows"]:
        assert 0 <= r["first_start_ns"] <= r["last_start_ns"] <= (t1 - t0) * 1e3
        assert r["last_start_ns"] - r["first_start_ns"] == r["skew_ns"]


@pytest.mark.shared
def test_dlrm_devices_table_keeps_the_devices_that_ran_work() -> None:
    files = sorted((TRACES / "torch").glob("param__dlrm_8rank__worker*"))
    want = {}  # (rank, device) -> kernels + copies in that rank's JSON
    for rank, f in enumerate(files):
        with open(f, "rb") as fh:
            ev = json.load(fh)["traceEvents"]
        for e in ev:
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                key = (rank, e["args"]["device"])
                want[key] = want.get(key, 0) + 1
    assert want[(0, 0)] == 261 and want[(1, 1)] == 326 and len(want) == 8
    from traceparse.loader import load
    from traceparse.reports.html import _view

    p = build_payload([load(f) for f in files], options=ReportOptions())
    assert len(p["devices"]) == 64  # every rank lists the node's 8 V100s
    table = _view(p)["device_table"]
    got = {(r["rank"], r["device_id"]): r["activities"] for r in table["rows"]}
    assert got == want and table["hidden"] == 56
    html = render_html(p)
    assert "56 more devices listed in the ranks' traces had no GPU activity" in html


def test_tflop_columns_and_rounded_rates() -> None:
    from traceparse.cli.common import _humanize
    from traceparse.reports.html import fmt_int

    # phases give tflop_per_s already in TFLOP/s: 216 must not print as 0.000000000216 TFLOP/s
    frame = pl.DataFrame({"tflop_per_s": [216.145], "flop_per_s": [2.5e12]})
    out, _ = _humanize(frame, None)
    assert out.row(0) == ("216 TFLOP/s", "2.50 TFLOP/s")
    assert out.columns == ["tflop/s", "flop/s"]
    assert fmt_int(15_556.9) == "15,557" and fmt_int(15_360) == "15,360"  # rounded, as the CLI


@pytest.mark.shared
def test_roofs_of_the_same_height_share_one_label(tmp_path: Path) -> None:
    out = tmp_path / "r.svg"
    res = CliRunner().invoke(main, ["--no-cache", "roofline",
                                    str(TRACES / "nsys" / "resest__report2.sqlite"),
                                    "-o", str(out)])
    assert res.exit_code == 0, res.output
    svg = out.read_text(encoding="utf-8")  # matplotlib writes each text as a comment
    # RTX 3090: bf16 and fp16 tensor peaks are both 81.9 TFLOP/s (gpu_specs.csv)
    assert "<!-- bf16_tensor / fp16_tensor 81.9 TFLOP/s @ 1,954 MHz -->" in svg
    assert "<!-- fp16_tensor 81.9" not in svg and "<!-- bf16_tensor 81.9" not in svg


def test_statistics_rows_are_named_without_the_ns_suffix() -> None:
    from traceparse.loader import load
    from traceparse.samplegen.scenarios import default_sample

    p = build_payload(load(default_sample()), options=ReportOptions())
    # the headers say "(µs)" / "(ms)": the row names need no unit suffix
    assert [r["metric"] for r in p["launches"]["table"]["rows"]] == [
        "launch", "queue", "kernel", "total"]
    assert [r["metric"] for r in p["steps"]["summary_table"]["rows"]] == ["wall", "period",
                                                                     "gpu busy"]
    # the step figure's statistics still come from the raw summary rows
    assert p["steps"]["stats"]["metric"] == "wall_ns"
