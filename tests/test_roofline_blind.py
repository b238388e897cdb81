"""A page without any tensor-core counter (a ``SpeedOfLight_RooflineChart`` page, a
``--metrics`` page without tensor metrics) counts only the FP pipes' FLOPs: a lower bound on
the kernel's FLOPs. Compute-bound (intensity >= ridge) survives a lower bound, memory- and
latency-bound do not; a kernel with 0 FP FLOPs did not do "no FP or tensor work".

Before: the H200 cuDNN flash attention (bf16 tensor, 634 TFLOP/s, 70 % of its dense roof on
the raw page) read "fp32, 5.19 TFLOP/s, memory-bound" on the roofline-chart page of the same
run, and its bf16 GEMM "0 FLOPs counted (no FP or tensor work)".
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from tests.ncu_rows import ID, ROW, S
from traceparse.roofline.build import build
from traceparse.roofline.model import BLIND_NOTE, BLIND_ZERO


def _launch(lid: int, name: str, ffma: int, dur_ns: int, dram: int,
            tensor: bool) -> list[str]:
    rows = [(S.format("fadd"), "inst", "0"), (S.format("fmul"), "inst", "0"),
            (S.format("ffma"), "inst", f"{ffma:,}"), ("gpu__time_duration.sum", "ns",
                                                       f"{dur_ns:,}"),
            ("dram__bytes.sum", "byte", f"{dram:,}")]
    if tensor:  # the page sees the tensor pipe (and it ran no MMA)
        rows.append(("sm__inst_executed_pipe_tensor.sum", "inst", "0"))
    return [ROW.format(lid, name, *r) for r in rows]


def _points(tmp: Path, *, tensor: bool) -> pl.DataFrame:
    page = tmp / "page.csv"
    page.write_text(ID + "\n" + "\n".join(
        # mem: 2 x 1,000,000 FLOPs / 1,000 ns = 2e12 FLOP/s; 1e6 B / 1e-6 s = 1e12 B/s;
        #      intensity 2 FLOP/B < ridge 1e13 / 2e12 = 5 -> memory (DRAM at 50 % of roof)
        _launch(0, "mem", 1_000_000, 1_000, 1_000_000, tensor)
        # comp: 2 x 10,000,000 / 10,000 ns = 2e12 FLOP/s; 1e5 B / 1e-5 s = 1e10 B/s;
        #       intensity 200 >= 5 -> compute (20 % of the FP32 roof, not latency)
        + _launch(1, "comp", 10_000_000, 10_000, 100_000, tensor)
        # zero: 0 FP FLOPs
        + _launch(2, "zero", 0, 1_000, 1_000_000, tensor)) + "\n")
    roofs = tmp / "roofs.json"
    roofs.write_text(json.dumps({"fp32": 1e13, "dram": 2e12}))
    pts, _c, _n = build(traceparse.load(page), ceilings_file=roofs)
    return pts


def test_tensor_blind_page_keeps_compute_drops_memory(tmp_path: Path) -> None:
    p = {r["kernel_name"]: r for r in _points(tmp_path, tensor=False).iter_rows(named=True)}
    assert p["mem"]["flop_per_s"] == pytest.approx(2e12)
    assert p["mem"]["ai_dram"] == pytest.approx(2.0) and p["mem"]["ridge"] == pytest.approx(5.0)
    assert p["mem"]["placed"] and p["mem"]["bound"] is None and p["mem"]["note"] == BLIND_NOTE
    assert p["comp"]["ai_dram"] == pytest.approx(200.0) and p["comp"]["bound"] == "compute"
    assert not p["zero"]["placed"] and p["zero"]["note"] == BLIND_ZERO


def test_page_that_sees_the_tensor_pipe_keeps_its_bounds(tmp_path: Path) -> None:
    p = {r["kernel_name"]: r for r in _points(tmp_path, tensor=True).iter_rows(named=True)}
    assert p["mem"]["bound"] == "memory" and p["mem"]["note"] is None
    assert p["comp"]["bound"] == "compute" and p["comp"]["note"] is None
    assert p["zero"]["note"].startswith("0 FLOPs counted (no FP or tensor work)")


H200 = TRACES / "gpu" / "h200"


def _page_items(path: Path) -> dict[tuple[str, str, str], float]:
    """(kernel, body item, metric label) -> value in base units, read with csv only."""
    scale = {"cycle/nsecond": 1e9, "Ghz": 1e9, "Gbyte/s": 1e9, "Gbyte/second": 1e9,
             "Tbyte/second": 1e12, "Mbyte/second": 1e6, "inst": 1.0, "inst/cycle": 1.0}
    out = {}
    with gzip.open(path, "rt") as f:
        for r in csv.DictReader(f):
            v = r["Metric Value"].replace(",", "")
            if r["Metric Unit"] in scale and v:
                out[(r["Kernel Name"], r["Body Item Label"], r["Metric Name"])] = \
                    float(v) * scale[r["Metric Unit"]]
    return out


@pytest.mark.shared
def test_h200_roofline_page_does_not_call_tensor_kernels_memory_bound() -> None:
    page = H200 / "ncu_kernels.roofline.csv.gz"
    pts, _c, _n = build(traceparse.load(page))
    items = _page_items(page)
    sp = "Single Precision Achieved Value"
    for r in pts.filter(pl.col("placed")).iter_rows(named=True):
        k = r["kernel_name"]
        # ncu's chart formula over the page's own items: (FFMA ops + FADD + FMUL) x SM clock
        want = (items[(k, sp, "Predicated-On FFMA Operations Per Cycle")]
                + items[(k, sp, "Predicated-On FADD Thread Instructions Executed Per Cycle")]
                + items[(k, sp, "Predicated-On FMUL Thread Instructions Executed Per Cycle")]
                ) * items[(k, sp, "SM Frequency")]
        assert r["precision"] == "fp32" and r["flop_per_s"] == pytest.approx(want, rel=1e-9)
        assert r["bound"] is None and r["note"] == BLIND_NOTE
    gemm = pts.filter(pl.col("kernel_name").str.starts_with("nvjet")).row(0, named=True)
    assert not gemm["placed"] and gemm["note"] == BLIND_ZERO
    # the raw page of the same run sees the tensor counters: the two tensor kernels are
    # bf16_tensor and compute-bound, the two FP32 kernels keep "memory"
    raw, _c, _n = build(traceparse.load(H200 / "ncu_kernels.raw.csv.gz"))
    got = dict(zip(raw["precision"], raw["bound"], strict=False))
    # (the layer norm also does fp16 work: one point at fp32 + fp16 FLOPs, docs/roofline.md)
    assert got == {"bf16_tensor": "compute", "fp32": "memory", "fp32+fp16": "memory"}


@pytest.mark.shared
def test_imma_gemm_on_a_roofline_page_is_not_latency_bound() -> None:
    pts, _c, _n = build(traceparse.load(TRACES / "ncu" / "panjd-cutlass__report80.roofline.csv"))
    b2b = pts.filter(pl.col("kernel_name").str.contains("B2bGemm")).row(0, named=True)
    assert b2b["placed"] and b2b["bound"] is None and b2b["note"] == BLIND_NOTE
    gemm = pts.filter(~pl.col("kernel_name").str.contains("B2bGemm")).row(0, named=True)
    assert gemm["note"] == BLIND_ZERO


def test_chart_draws_fp_only_points_with_their_arrow(tmp_path: Path) -> None:
    from traceparse.roofline.chart import render

    roofs = pl.DataFrame({"name": ["fp32", "dram"], "kind": ["compute", "memory"],
                          "value": [1e13, 2e12]})
    blind = render(_points(tmp_path, tensor=False), roofs, fmt="svg").decode()
    seen = render(_points(tmp_path, tensor=True), roofs, fmt="svg").decode()
    assert "a lower bound, the kernel" in blind and "a lower bound" not in seen
