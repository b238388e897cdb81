"""A ``kernels[]`` row's efficiency uses the work points of its own kernels.

Rows are (class, dtype by kernel name); a work point's dtype is the kernel name's, else
its op's. cuBLAS's ``nvjet_*`` GEMMs name no dtype: their row is ``gemm unknown`` while
their points were ``gemm bf16``, so the row said "no work data" and the points were in no
row (docs/calibration.md, "Kernel classes").
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import shared_files

import traceparse
from traceparse.analyses.calibrate import calibrate, kernel_classes


def test_row_takes_its_kernels_points_and_their_ops_dtype_ceiling_hand_made() -> None:
    # two gemm kernels named without a dtype (row "gemm unknown", 10 + 30 ns), their ops
    # bf16: points (1000 flop, 10 ns) and (6000 flop, 30 ns) -> 100 and 200 GFLOP/s (flop per
    # ns = GFLOP/s); ceiling bf16_tensor = 400e9 -> efficiencies 0.25 and 0.5, P50 0.375.
    # A fp16-named kernel (row "gemm fp16") has no point: efficiency null.
    k = pl.DataFrame({"kclass": ["gemm", "gemm", "gemm"], "kdtype": ["unknown", "unknown", "fp16"],
                      "dur_ns": [10, 30, 5]})
    work = pl.DataFrame({"kclass": ["gemm", "gemm"], "kdtype": ["bf16", "bf16"],
                         "row_dtype": ["unknown", "unknown"], "work": [1000.0, 6000.0],
                         "metric": ["flop", "flop"], "time_ns": [10.0, 30.0],
                         "source": ["shapes", "shapes"]})
    rows = {(r["class"], r["dtype"]): r for r in
            kernel_classes(k, work, {"bf16_tensor": 400e9, "fp16_tensor": 800e9})}
    e = rows[("gemm", "unknown")]["efficiency"]
    assert (e["points"], e["ceiling"], e["ceiling_value"]) == (2, "bf16_tensor", 400e9)
    assert e["achieved"]["p50"] == pytest.approx(0.375)
    assert rows[("gemm", "fp16")]["efficiency"] is None
    # points of two op dtypes in one unnamed row: the row's own default ceiling (fp16_tensor)
    mixed = work.with_columns(pl.Series("kdtype", ["bf16", "fp32"]))
    e2 = {(r["class"], r["dtype"]): r for r in kernel_classes(
        k, mixed, {"bf16_tensor": 400e9, "fp16_tensor": 800e9})}[("gemm", "unknown")]
    assert e2["efficiency"]["ceiling"] == "fp16_tensor"


B8 = shared_files("gpu", "sweep/train_gpt2s_b8.json.gz")
_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _flops(op: dict) -> int:  # type: ignore[type-arg]
    dims = op["args"]["Input Dims"]
    a, b = (dims[0], dims[1]) if op["name"] in ("aten::mm", "aten::bmm") else (dims[1], dims[2])
    batch = a[0] if len(a) == 3 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


@pytest.mark.shared
@pytest.mark.parametrize("path", B8, ids=lambda p: p.name)
def test_nvjet_gemm_row_efficiency_matches_raw_events(path: Path) -> None:
    """train_gpt2s_b8 (H200): 441 ``nvjet_*`` kernels, each launched (cuda_runtime or
    cuda_driver call with its correlation id) inside one aten::mm/addmm; FLOPs 2*M*N*K from
    the op's Input Dims, time its kernels' summed duration, against the H200's BF16 tensor
    peak (989.4 TFLOP/s): P50 0.648, P95 0.720. Before, ``gemm unknown`` had efficiency
    null."""
    with gzip.open(path, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev if e.get("ph") == "X"
             and e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    ops: dict[tuple[int, int], list[dict]] = defaultdict(list)  # type: ignore[type-arg]
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["name"] in _GEMM_OPS:
            ops[(e["pid"], e["tid"])].append(e)
    time_ns: dict[tuple[int, int, float], int] = defaultdict(int)
    flop: dict[tuple[int, int, float], int] = {}
    for k in ev:
        if not (k.get("ph") == "X" and k.get("cat") == "kernel"
                and k["name"].startswith("nvjet")):
            continue
        c = calls[k["args"]["correlation"]]
        op = max((o for o in ops[(c["pid"], c["tid"])]
                  if o["ts"] <= c["ts"] <= o["ts"] + o["dur"]), key=lambda o: o["ts"])
        key = (op["pid"], op["tid"], op["ts"])
        time_ns[key] += round(k["dur"] * 1000)
        flop[key] = _flops(op)
    dev = calibrate(traceparse.load(path))["devices"][0]
    row = {(r["class"], r["dtype"]): r for r in dev["kernels"]}[("gemm", "unknown")]
    e = row["efficiency"]
    assert e is not None and e["ceiling"] == "bf16_tensor"
    peak = e["ceiling_value"]
    eff = np.array([flop[q] / (time_ns[q] * 1e-9) / peak for q in time_ns])
    assert e["points"] == len(time_ns) == row["count"] == 441
    assert e["achieved"]["p50"] == pytest.approx(float(np.percentile(eff, 50)), rel=1e-9)
    assert e["achieved"]["p95"] == pytest.approx(float(np.percentile(eff, 95)), rel=1e-9)
    assert round(e["achieved"]["p50"], 3) == 0.648
