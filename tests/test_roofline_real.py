"""Roofline on every shared real file, checked against what the files themselves say.

* ncu: every one of the 34 shared CSVs gives points or says exactly which counters are
  missing; achieved FP32 FLOP/s and DRAM bandwidth equal the values ncu printed (roofline
  chart pages: its "Achieved Value" items; raw pages: the derived per-cycle metrics times the
  clock; ``--metrics`` pages: add + mul + 2*fma over the cycle time), read here with the csv
  module, not with traceparse.
* The int8 IMMA GEMMs (panjd-cutlass) are int8 tensor work, never an fp32/fp64 point.
* A timeline/ncu GPU mismatch is a warning.
* Shape estimates: GEMM/conv ops with shapes counted in the JSON directly; the kernel time
  they own found by launch containment, computed here independently.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import ids, shared_files
from traceparse.cli.main import main
from traceparse.loader import load
from traceparse.roofline.build import build

NCU = shared_files("ncu", "*.csv")
ALL_NCU = [p.name for p in NCU]

#: Files whose pages carry no FLOP counter at all (checked by listing their metrics: only the
#: SpeedOfLight/launch/occupancy sections, no sass_thread_inst_executed_op_* nor ops_path).
NO_FLOP_COUNTERS = {
    "cs599k__rmsnorm_matrix_v2-float4.details.csv", "cs599k__silu-pytorch_profile.details.csv",
    "cs599k__silu-pytorch_profile.raw.csv", "cs599k__silu-pytorch_profile.raw_base.csv",
    "esmm__profile.details.csv", "esmm__profile.raw.csv", "esmm__profile.raw_base.csv",
    "fuzigrad__output.details.csv", "fuzigrad__output.raw.csv", "fuzigrad__output.raw_base.csv",
    "panjd-cutlass__report80.details.csv", "rsmall__rmsnorm.details.csv",
    "rsmall__sgemm.details.csv", "sglang__profile.details.csv",
}
#: Files whose kernels ran on tensor pipes the captured sections do not count FLOPs for
#: (pipe activity only): int8 IMMA GEMMs, bf16 HMMA flash attention.
TENSOR_NOT_COUNTED = {"panjd-cutlass__report80.raw.csv", "panjd-cutlass__report80.raw_base.csv",
                      "meinie__torch_sdpa_flash__gqa_bf16_b32_ctx8k_p64.ncu.csv"}
UNITS = {"byte/second": 1.0, "Kbyte/second": 1e3, "Mbyte/second": 1e6, "Gbyte/second": 1e9,
         "Tbyte/second": 1e12, "cycle/nsecond": 1e9, "cycle/usecond": 1e6,
         "cycle/second": 1.0, "inst": 1.0, "inst/cycle": 1.0, "Ghz": 1e9, "Mhz": 1e6,
         "Gbyte/s": 1e9, "Mbyte/s": 1e6, "Tbyte/s": 1e12}


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith('"ID"'))
    rows = list(csv.reader("".join(lines[start:]).splitlines()))
    return rows[0], [r for r in rows[1:] if r and r[0].strip().isdigit()]


def _printed_roofline(path: Path) -> dict[int, dict[str, float]]:
    """Per launch: FP32 achieved FLOP/s and DRAM B/s from the chart's 'Single Precision
    Achieved Value' items, as ncu printed them."""
    head, rows = _rows(path)
    ix = {h: i for i, h in enumerate(head)}
    vals: dict[int, dict[str, float]] = {}
    for r in rows:
        if r[ix["Body Item Label"]] != "Single Precision Achieved Value":
            continue
        v = float(r[ix["Metric Value"]].replace(",", "")) * UNITS[r[ix["Metric Unit"]]]
        vals.setdefault(int(r[0]), {})[r[ix["Metric Name"]]] = v
    out = {}
    for lid, m in vals.items():
        ops = (m["Predicated-On FFMA Operations Per Cycle"]
               + m.get("Predicated-On FADD Thread Instructions Executed Per Cycle", 0.0)
               + m.get("Predicated-On FMUL Thread Instructions Executed Per Cycle", 0.0))
        if ops == ops:  # nan: an empty ncu result
            out[lid] = {"fp32": ops * m["SM Frequency"], "dram": m["DRAM Bandwidth"]}
    return out


def _printed_raw(path: Path) -> dict[int, dict[str, float]]:
    """Per launch (raw_base page, base units): FP32 FLOP/s = (ffma x2 + fadd + fmul per
    cycle) x SMSP clock and dram__bytes.sum.per_second."""
    head, rows = _rows(path)
    ix = {h: i for i, h in enumerate(head)}
    s = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"

    def g(r: list[str], name: str) -> float | None:
        i = ix.get(name)
        return float(r[i].replace(",", "")) if i is not None and r[i].strip() else None

    out = {}
    for r in rows:
        fma = g(r, "derived__smsp__sass_thread_inst_executed_op_ffma_pred_on_x2")
        hz = g(r, "smsp__cycles_elapsed.avg.per_second")
        if fma is None or hz is None or fma != fma:  # absent, or nan (an empty ncu result)
            continue
        ops = fma + (g(r, s.format("fadd")) or 0.0) + (g(r, s.format("fmul")) or 0.0)
        out[int(r[0])] = {"fp32": ops * hz, "dram": g(r, "dram__bytes.sum.per_second") or 0.0}
    return out


def test_corpus_has_34_ncu_files() -> None:
    if not NCU:
        pytest.skip("no corpus")
    assert len(NCU) == 34


@pytest.mark.shared
@pytest.mark.parametrize("path", NCU, ids=ids(NCU))
def test_every_ncu_csv_places_points_or_names_missing_counters(path: Path) -> None:
    points, _ceil, _notes = build(load(path), by="launch")
    assert points.height > 0
    unplaced = points.filter(~pl.col("placed"))
    assert unplaced["note"].null_count() == 0  # every kernel off the chart says why
    if path.name in NO_FLOP_COUNTERS:
        assert points["placed"].sum() == 0
        assert all(n.startswith("no FLOP counters in this page: capture --section "
                                "SpeedOfLight_RooflineChart") or "empty result" in n
                   for n in unplaced["note"])
    elif path.name in TENSOR_NOT_COUNTED:
        assert points["placed"].sum() == 0
        assert all("tensor pipe" in n and "FLOPs not counted" in n for n in unplaced["note"]
                   if "empty result" not in n)
    else:
        assert points["placed"].sum() >= 1
    # nothing is ever called fp64 unless its FP64 FLOP/s is the largest counted rate
    assert points.filter((pl.col("precision") == "fp64") & ~pl.col("placed")).height == 0


ROOFLINE_PAGES = [p for p in NCU if p.name.endswith(".roofline.csv") or "RooflineChart" in p.name]
RAW_BASE = [p for p in NCU if p.name.endswith(".raw_base.csv")
            and p.name not in NO_FLOP_COUNTERS and "panjd" not in p.name]


@pytest.mark.shared
@pytest.mark.parametrize("path", ROOFLINE_PAGES, ids=ids(ROOFLINE_PAGES))
def test_roofline_pages_reproduce_ncu_achieved_values(path: Path) -> None:
    want = _printed_roofline(path)
    assert want
    n = load(path).ncu
    for lid, w in want.items():
        r = n.filter(pl.col("launch_id") == lid).row(0, named=True)
        assert r["fp32_flop_per_s"] == pytest.approx(w["fp32"], rel=5e-3, abs=1.0)
        assert r["dram_bytes_per_s"] == pytest.approx(w["dram"], rel=5e-3)


@pytest.mark.shared
@pytest.mark.parametrize("path", RAW_BASE, ids=ids(RAW_BASE))
def test_raw_pages_reproduce_ncu_rates(path: Path) -> None:
    want = _printed_raw(path)
    assert want
    n = load(path).ncu
    for lid, w in want.items():
        r = n.filter(pl.col("launch_id") == lid).row(0, named=True)
        assert r["fp32_flop_per_s"] == pytest.approx(w["fp32"], rel=1e-6)
        assert r["dram_bytes_per_s"] == pytest.approx(w["dram"], rel=1e-6)


@pytest.mark.shared
def test_metrics_page_counts_over_cycle_time() -> None:
    """leleucas bert (--metrics, no duration): FP32 FLOP/s = (fadd + fmul + 2 ffma) /
    (sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second)."""
    path = next(p for p in NCU if p.name == "leleucas__bert_nsight.csv")
    head, rows = _rows(path)
    ix = {h: i for i, h in enumerate(head)}
    m: dict[int, dict[str, float]] = {}
    for r in rows:
        if r[ix["Section Name"]] == "Command line profiler metrics":
            unit = r[ix["Metric Unit"]]
            scale = {"cycle/nsecond": 1e9, "cycle/usecond": 1e6, "Kbyte": 1e3, "Mbyte": 1e6,
                     "Gbyte": 1e9}.get(unit, 1.0)
            m.setdefault(int(r[0]), {})[r[ix["Metric Name"]]] = \
                float(r[ix["Metric Value"]].replace(",", "")) * scale
    s = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
    n = load(path).ncu
    checked = 0
    for lid, v in m.items():
        t = v["sm__cycles_elapsed.avg"] / v["sm__cycles_elapsed.avg.per_second"]
        want = (v[s.format("fadd")] + v[s.format("fmul")] + 2 * v[s.format("ffma")]) / t
        got = n.filter(pl.col("launch_id") == lid)["fp32_flop_per_s"][0]
        assert got == pytest.approx(want, rel=1e-9)
        checked += 1
    assert checked == 26


@pytest.mark.shared
@pytest.mark.parametrize("name", ["panjd-cutlass__report80.raw.csv",
                                  "panjd-cutlass__report80.raw_base.csv"])
def test_imma_gemm_is_int8_tensor_not_fp32(name: str) -> None:
    """The CUTLASS int8 GEMMs: sm__pipe_tensor_op_imma_cycles_active 21-28% of peak (active),
    no tensor FLOP counter in the page -> int8 tensor, not placed, the note says what was
    measured and which section counts the FLOPs."""
    path = next(p for p in NCU if p.name == name)
    head, rows = _rows(path)
    col = head.index("sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active")
    imma = {int(r[0]): float(r[col]) for r in rows}
    assert min(imma.values()) > 20
    pts, _, _ = build(load(path), by="launch")
    assert pts["precision"].to_list() == ["int8_tensor"] * 3
    assert not pts["placed"].any()
    for r in pts.iter_rows(named=True):
        assert f"IMMA tensor pipe {imma[r['launch_id']]:.0f}% active" in r["note"]
        assert "SpeedOfLight_HierarchicalTensorRooflineChart" in r["note"]


@pytest.mark.shared
def test_bf16_flash_attention_is_tensor_work_not_fp64() -> None:
    path = next(p for p in NCU if p.name.startswith("meinie__"))
    pts, _, _ = build(load(path), by="launch")
    flash = pts.filter(pl.col("kernel_name").str.contains("flash"))
    assert flash.height > 0 and set(flash["precision"]) == {"tensor"}
    assert all("HMMA tensor pipe" in n for n in flash["note"])


SGLANG_NSYS = shared_files("nsys", "sglang__baseline-report.sqlite")


@pytest.mark.shared
def test_gpu_mismatch_warns_and_keeps_one_gpu(tmp_path: Path) -> None:
    """sglang: the nsys timeline ran on A100-SXM4-80GB, the ncu file on an H800: warn, and
    every ceiling comes from the H800 (ncu-measured, or datasheet at the ncu clock)."""
    ncu_csv = next(p for p in NCU if p.name == "sglang__profile.raw.csv")
    tl, n = load(SGLANG_NSYS[0]), load(ncu_csv)
    _, ceil, notes = build(tl, ncu=n)
    assert "NVIDIA H800" in notes["gpu_mismatch"] and "A100" in notes["gpu_mismatch"]
    assert notes["ceiling_table_row"] == "H800 SXM5 80GB"
    assert all(("H800" in s) or s.startswith("measured") for s in ceil["source"])
    r = CliRunner().invoke(main, ["roofline", str(SGLANG_NSYS[0]), "--ncu", str(ncu_csv),
                                  "--format", "csv"])
    assert r.exit_code == 0
    assert "warning: ncu measured on NVIDIA H800 but the timeline ran on NVIDIA A100" \
        in r.stderr


# ------------------------------------------------------------------ shape estimates

TORCH = {p.name: p for p in shared_files("torch", "*")}
GEMM = {"aten::mm", "aten::addmm", "aten::bmm"}
#: Event categories: 2022+ Kineto names, 2021 names.
CPU_OP, RUNTIME, KERNEL = {"cpu_op", "Operator"}, {"cuda_runtime", "Runtime"}, {"kernel", "Kernel"}


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        data = json.load(fh)
    return data["traceEvents"] if isinstance(data, dict) else data


def _gemm_kernel_time_us(ev: list[dict[str, Any]], names: set[str]) -> tuple[int, float]:
    """(GEMM ops with shapes, kernel time in us of kernels whose launch lies inside one of
    them, by innermost cpu_op) computed from the JSON events alone."""
    ops = [e for e in ev if e.get("cat") in CPU_OP and e.get("ph") == "X"]
    n_gemm = sum(1 for e in ops if e["name"] in names and e.get("args", {}).get("Input Dims"))
    by_tid: dict[Any, list[tuple[float, float, str]]] = {}
    for e in ops:
        by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for v in by_tid.values():
        v.sort()
    launch = {e["args"]["correlation"]: (e["tid"], e["ts"]) for e in ev
              if e.get("cat") in RUNTIME and "correlation" in e.get("args", {})}
    total = 0.0
    for k in ev:
        if k.get("cat") not in KERNEL or k["args"].get("correlation") not in launch:
            continue
        tid, ts = launch[k["args"]["correlation"]]
        spans = by_tid.get(tid, [])
        i = bisect.bisect_right(spans, (ts, float("inf"), "")) - 1
        while i >= 0 and not (spans[i][0] <= ts <= spans[i][1]):
            i -= 1
        if i >= 0 and spans[i][2] in names:
            total += k["dur"]
    return n_gemm, total


@pytest.mark.shared
def test_trace_diff_control_gets_gemm_points() -> None:
    """2022 trace (kernel External id == correlation id): 1,776 mm/addmm/bmm ops with shapes
    (1,092 + 594 + 90, counted in the JSON); their kernels link through the launch."""
    path = TORCH["hta__trace_diff_control.json.gz"]
    n_gemm, want_us = _gemm_kernel_time_us(_events(path), GEMM)
    assert n_gemm == 1776
    pts, _, notes = build(load(path))
    g = pts.filter(pl.col("kernel_name").is_in(list(GEMM)) & pl.col("placed"))
    assert g["time_ns"].sum() == pytest.approx(want_us * 1e3)
    assert set(g["kernel_name"]) == GEMM
    # fp32 inputs but faster than A100's 19.5 TFLOP/s FP32 roof: TF32 tensor cores, decided
    # per op (364 of them); the 1,190 ops under the roof stay fp32 with a note
    mm = {r["precision"]: r for r in g.filter(pl.col("kernel_name") == "aten::mm")
          .iter_rows(named=True)}
    assert mm["tf32_tensor"]["flop_per_s"] > 19.5e12 and mm["tf32_tensor"]["launches"] == 364
    assert mm["fp32"]["flop_per_s"] < 19.5e12 and mm["fp32"]["launches"] == 1190
    assert mm["fp32"]["note"].startswith("fp32 inputs under the FP32 roof, while other ops")
    cov = notes["coverage"]
    assert cov["estimated_ns"] >= want_us * 1e3 and cov["measured_ns"] == 0
    assert cov["estimated_ns"] + cov["not_placed_ns"] == pytest.approx(cov["total_ns"])


@pytest.mark.shared
def test_resnet50_convolutions_are_placed() -> None:
    """2021 ResNet-50: 318 forward convolutions (aten::cudnn_convolution with shapes, counted
    in the JSON) are all estimated; with their backward, GEMMs and memory-bound ops the
    roofline places most of the 591.5 ms of kernel time (it placed 0.47 ms before)."""
    path = TORCH["kineto__resnet50_worker0.1623143089861.pt.trace.json.gz"]
    ev = _events(path)
    convs = [e for e in ev if e.get("cat") in CPU_OP and e["name"] == "aten::cudnn_convolution"
             and e.get("args", {}).get("Input Dims")]
    assert len(convs) == 318
    kernel_us = sum(e["dur"] for e in ev if e.get("cat") in KERNEL)
    _n_conv, conv_us = _gemm_kernel_time_us(ev, {"aten::cudnn_convolution"})
    pts, _, notes = build(load(path))
    conv = pts.filter(pl.col("kernel_name") == "aten::cudnn_convolution").row(0, named=True)
    assert conv["time_ns"] == pytest.approx(conv_us * 1e3)
    cov = notes["coverage"]
    assert cov["total_ns"] == pytest.approx(kernel_us * 1e3)
    assert cov["estimated_ns"] > 0.8 * cov["total_ns"]


@pytest.mark.shared
def test_report_roofline_banner_coverage_and_gpu_title(tmp_path: Path) -> None:
    """The report's roofline: mismatch banner, coverage line, unplaced reasons, and a chart
    titled with the ncu GPU (H800) and its clock, never the timeline's A100."""
    ncu_csv = next(p for p in NCU if p.name == "sglang__profile.raw.csv")
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", str(SGLANG_NSYS[0]), "--ncu", str(ncu_csv), "-o",
                                  str(out)])
    assert r.exit_code == 0, r.output
    html = out.read_text(encoding="utf-8")
    sec = html[html.index('<section id="roofline">'):]
    sec = sec[:sec.index("</section>")]
    assert "GPU mismatch:</strong> ncu measured on NVIDIA H800" in sec
    assert "<strong>Coverage:</strong> kernel time" in sec
    # flash_fwd_kernel printed nan for every counter (ncu did not profile it)
    assert "not placed (1): ncu recorded no values for this launch" in sec
    assert "Roofline: H800 SXM5 80GB @ " in sec and "MHz SM clock" in sec
    assert "roofline of A100" not in sec


@pytest.mark.shared
@pytest.mark.parametrize("name,row", [
    # deviceProperties: "AMD Radeon Graphics", computeMajor/Minor 9/0 (gfx90a), 104 CUs,
    # 68,702,699,520 bytes = 64 GiB per GCD: an MI250 GCD (= MI210)
    ("hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "MI250 GCD / MI210"),
    # empty name, 9/4 (gfx942), 304 CUs, 192 GiB: MI300X
    ("tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz", "MI300X"),
    ("tracelens__sglang_Qwen3-8B_decode.json.gz", "MI300X"),
])
def test_amd_devices_resolve_from_gfx_cus_and_memory(name: str, row: str) -> None:
    path = TORCH[name]
    with gzip.open(path, "rt") as fh:
        props = json.load(fh)["deviceProperties"][0]
    assert props["name"] in ("AMD Radeon Graphics", "", "AMD Instinct MI300X")
    _, ceil, notes = build(load(path))
    assert notes["ceiling_table_row"] == row and ceil.height > 0


@pytest.mark.shared
def test_unknown_gpu_says_use_gpu(tmp_path: Path) -> None:
    path = TORCH["hta__sampled_rank-0.json.gz"]  # no deviceProperties at all
    _, ceil, notes = build(load(path))
    assert ceil.height == 0 and "--gpu NAME" in notes["gpu_unknown"]


@pytest.mark.shared
def test_resnet50_per_step_split_and_mfu() -> None:
    """Per ProfilerStep: kernel time = kernels starting in the step (summed from the JSON
    here), placed + not placed = kernel time, bound parts <= placed, MFU in (0, 1]."""
    path = TORCH["kineto__resnet50_worker0.1623143089861.pt.trace.json.gz"]
    ev = _events(path)
    steps = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in ev
                   if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X")
    assert len(steps) == 6
    want = {name: sum(k["dur"] for k in ev if k.get("cat") in KERNEL and s <= k["ts"] < e)
            for s, e, name in steps}
    _, _, notes = build(load(path))
    got = {r["step"]: r for r in notes["steps"]}
    assert set(got) == set(want)
    for name, us in want.items():
        r = got[name]
        assert r["kernel_ns"] == pytest.approx(us * 1e3)
        assert r["placed_ns"] + r["not_placed_ns"] == pytest.approx(r["kernel_ns"])
        assert r["compute_ns"] + r["memory_ns"] + r["latency_ns"] <= r["placed_ns"] + 1
        assert 0 < r["mfu"] <= 1 and r["achieved_flop_per_s"] > 0


@pytest.mark.shared
def test_half_precision_counts_hfma2_as_four_like_ncu() -> None:
    """rsmall rmsnorm raw_base (ncu 2023+ prints derived ..._hfma_pred_on_x4): FP16 FLOP/s =
    (hadd_x2 + hmul_x2 + hfma_x4) x SMSP clock, i.e. packed HFMA2 = 4 FLOPs, and the FP16 roof
    = derived__sm__..._hfma_pred_on_x4 x SM clock."""
    path = next(p for p in NCU if p.name == "rsmall__rmsnorm.raw_base.csv")
    head, rows = _rows(path)
    ix = {h: i for i, h in enumerate(head)}
    d = "derived__{}__sass_thread_inst_executed_op_{}_pred_on_{}"

    def g(r: list[str], name: str) -> float:
        try:  # ncu prints "no data" for a derived metric with no events: nothing counted
            return float(r[ix[name]])
        except (KeyError, ValueError):
            return 0.0

    n = load(path).ncu
    for r in rows:
        want = ((g(r, d.format("smsp", "hadd", "x2")) + g(r, d.format("smsp", "hmul", "x2"))
                 + g(r, d.format("smsp", "hfma", "x4")))
                * g(r, "smsp__cycles_elapsed.avg.per_second"))
        peak = g(r, d.format("sm", "hfma", "x4")) * g(r, "sm__cycles_elapsed.avg.per_second")
        got = n.filter(pl.col("launch_id") == int(r[0])).row(0, named=True)
        assert want > 0 and got["fp16_flop_per_s"] == pytest.approx(want, rel=1e-9)
        assert got["peak_fp16_flop_per_s"] == pytest.approx(peak, rel=1e-9)


@pytest.mark.shared
def test_nsys_without_ncu_or_shapes_is_one_line_error(tmp_path: Path) -> None:
    out = tmp_path / "r.png"
    r = CliRunner().invoke(main, ["roofline", str(SGLANG_NSYS[0]), "-o", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert "no kernel placed on the roofline, no chart written" in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.shared
def test_dlrm_rank_without_steps_gets_gemm_points_and_a_whole_trace_split() -> None:
    """param DLRM rank 0 (2023 trace, 23 GEMM ops with shapes, counted in the JSON): GEMM
    points now exist; with no ProfilerStep the split covers the whole trace per rank."""
    path = next(p for n, p in TORCH.items() if n.startswith("param__dlrm_8rank__worker0"))
    ev = _events(path)
    n_gemm, gemm_us = _gemm_kernel_time_us(ev, GEMM)
    assert n_gemm == 23
    pts, _, notes = build(load(path))
    g = pts.filter(pl.col("kernel_name").is_in(list(GEMM)) & pl.col("placed"))
    assert g.height > 0 and g["time_ns"].sum() == pytest.approx(gemm_us * 1e3)
    steps = notes["steps"]
    kernel_us = sum(e["dur"] for e in ev if e.get("cat") in KERNEL)
    assert sum(s["kernel_ns"] for s in steps) == pytest.approx(kernel_us * 1e3)
