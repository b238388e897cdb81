"""TF32 is decided per op, not per op name: an fp32 op runs on TF32 tensor cores only when
its own FLOP/s exceed the FP32 roof (physically the only way). Before, the H200 GEMM sweep's
36 fp32 ``aten::mm`` (18 on FP32 pipes at 51 TFLOP/s, 18 with TF32 at 412 TFLOP/s) made one
point "tf32_tensor, 90.9 TFLOP/s, 18.4 % of roof": false for both halves, and step MFUs of
5.5-10 % against the TF32 roof. fp32 ops under the FP32 roof of a name that also has ops
above it may have run either way: they say so, and keep a bound only where both roofs agree.
"""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from traceparse.roofline.build import build
from traceparse.roofline.estimate import FP32_OR_TF32_NOTE, TF32_NOTE, estimated_points


def test_two_fp32_mm_ops_on_both_sides_of_the_fp32_roof() -> None:
    ranges = pl.DataFrame({
        "rank": [0, 0], "kind": ["cpu_op"] * 2, "name": ["aten::mm"] * 2,
        "external_id": [1, 2], "input_dims": ["[[128, 256], [256, 512]]"] * 2,
        "input_types": ['["float", "float"]'] * 2, "concrete_inputs": [None, None]},
        schema_overrides={"rank": pl.Int32})
    # each op: 2 * 128 * 512 * 256 = 33,554,432 FLOPs; op 1 in 10 us = 3.36e12 FLOP/s (under
    # the 1e13 FP32 roof), op 2 in 1 us = 3.36e13 FLOP/s (over it: TF32)
    gpu = pl.DataFrame({"rank": [0, 0], "kind": ["kernel"] * 2, "external_id": [1, 2],
                        "dur_ns": [10_000, 1_000]}, schema_overrides={"rank": pl.Int32})
    ceil = pl.DataFrame({"name": ["fp32", "tf32_tensor", "dram"], "value": [1e13, 1e14, 1e12]})
    p = {r["precision"]: r for r in estimated_points(ranges, gpu, ceil).iter_rows(named=True)}
    assert set(p) == {"fp32", "tf32_tensor"}
    assert p["fp32"]["flop_per_s"] == pytest.approx(33_554_432 / 10e-6)
    assert p["fp32"]["peak_flop_per_s"] == 1e13 and p["fp32"]["note"] == FP32_OR_TF32_NOTE
    assert p["fp32"]["pct_of_roof"] == pytest.approx(33.554432)
    # bytes (128*256 + 256*512) * 4 = 655,360: intensity 33,554,432 / 655,360 = 51.2 FLOP/B,
    # right of the FP32 ridge (1e13 / 1e12 = 10), left of the TF32 ridge (1e14 / 1e12 = 100):
    # FP32 or TF32 is not known, so neither is the bound
    assert p["fp32"]["ai_dram"] == pytest.approx(51.2) and p["fp32"]["bound"] is None
    assert p["tf32_tensor"]["bound"] == "memory"  # 51.2 < 100, 3.36e13 >= 5 % of 1e14
    assert p["tf32_tensor"]["flop_per_s"] == pytest.approx(33_554_432 / 1e-6)
    assert p["tf32_tensor"]["peak_flop_per_s"] == 1e14 and p["tf32_tensor"]["note"] == TF32_NOTE
    # merged, as before: 67,108,864 FLOPs / 11 us = 6.1e12 < 1e13: both would read fp32


SWEEP = TRACES / "gpu" / "scenarios"


@pytest.mark.shared
def test_h200_sweep_fp32_and_tf32_mm_match_the_ncu_counters_of_the_same_run() -> None:
    pts, _c, _n = build(traceparse.load(SWEEP / "gemm_roofline-sweep.json.gz"))
    mm = {r["precision"]: r for r in pts.filter(pl.col("kernel_name") == "aten::mm")
          .iter_rows(named=True)}
    # independent: 2*M*N*K of every fp32 aten::mm from the trace's own Input Dims
    with gzip.open(SWEEP / "gemm_roofline-sweep.json.gz", "rt") as f:
        ev = json.load(f)["traceEvents"]
    fp32 = sum(2 * e["args"]["Input Dims"][0][0] * e["args"]["Input Dims"][1][1]
               * e["args"]["Input Dims"][0][1] for e in ev
               if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"
               and e["args"]["Input type"][0] == "float")
    assert mm["fp32"]["launches"] == mm["tf32_tensor"]["launches"] == 18
    got = (mm["fp32"]["flop_per_s"] * mm["fp32"]["time_ns"]
           + mm["tf32_tensor"]["flop_per_s"] * mm["tf32_tensor"]["time_ns"]) * 1e-9
    assert got == pytest.approx(fp32, rel=1e-9)  # 14,869,176,778,752 FLOPs, split, not lost
    # the ncu pass over the same sweep, from its counters: the FP32-pipe GEMMs at 51.1
    # TFLOP/s (FFMA), the TF32 ones at 413.8 TFLOP/s (tensor ops); the shape estimates of
    # the two points land within 1 % of the largest of each
    ncu, _c, _n = build(traceparse.load(SWEEP / "gemm_roofline-sweep.ncu.csv.gz"))
    # (the FP32 GEMMs also count a few fp16 FLOPs, 0.003 % and less: "fp32+fp16" points)
    lead = pl.col("precision").str.split("+").list.first()
    big = {p: float(ncu.filter(lead == p)["flop_per_s"].max()) for p in ("fp32", "tf32_tensor")}
    assert mm["fp32"]["flop_per_s"] < mm["fp32"]["peak_flop_per_s"]
    assert mm["fp32"]["flop_per_s"] == pytest.approx(big["fp32"], rel=0.01)
    assert mm["tf32_tensor"]["flop_per_s"] == pytest.approx(big["tf32_tensor"], rel=0.01)
