"""calibrate on the ResNet-50 Kineto trace (V100, no 'Concrete Inputs'): convolution FLOPs
come from the consumer op, kernels are linked to ops as the roofline links them, and every
convolution's work is a point of the ``conv`` class, whatever kernel cuDNN ran (Winograd
convolutions have an sgemm as their longest kernel)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import shared_files
from traceparse.analyses.calibrate import calibrate, kernel_work
from traceparse.roofline.estimate import estimate_ops

RESNET = shared_files("torch", "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz")


def _ops(path: Path) -> dict[str, int]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    names = [e.get("name") for e in events if e.get("cat") in ("cpu_op", "Operator")]
    return {n: names.count(n) for n in ("aten::cudnn_convolution", "aten::mm", "aten::addmm",
                                        "aten::cudnn_convolution_backward")}


@pytest.mark.parametrize("path", RESNET, ids=lambda p: p.name[:30])
def test_resnet50_conv_and_gemm_points(path: Path) -> None:
    counts = _ops(path)
    assert counts["aten::cudnn_convolution"] == 318  # 53 convolutions x 6 steps
    tl = traceparse.load(path)
    work = kernel_work(tl)
    by_class = {c: work.filter(work["kclass"] == c) for c in ("conv", "gemm")}
    # one point per forward and per backward convolution (the backward kernels carry the
    # external ids of the child ops cudnn_convolution_backward_input/_weight, which have no
    # shape model: they are linked by launch, to the innermost estimated op, as the roofline
    # links them)
    assert counts["aten::cudnn_convolution_backward"] == 318
    assert by_class["conv"].height == 318 + 318
    assert by_class["gemm"].height == counts["aten::mm"] + counts["aten::addmm"]  # 12 + 6
    # the stem: x [32,3,224,224] * w [64,3,7,7], stride 2 pad 3 -> 112x112 (read off the
    # following batch_norm's input): 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7
    assert 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7 in by_class["conv"]["work"].to_list()
    # every bottleneck's 3x3 convolution does the same 2 * 32 * 256 * 14 * 14 * 256 * 9
    # direct-convolution FLOPs (64ch at 56x56 ... 512ch at 7x7): 3 + 4 + 6 + 3 per step
    w3 = by_class["conv"].filter(by_class["conv"]["work"] == 2 * 32 * 256 * 14 * 14 * 256 * 9)
    assert w3.height == 16 * 6
    # some run above the V100's 15.7 TFLOP/s FP32 peak: exactly those whose kernels include
    # a cuDNN Winograd kernel (fewer multiplies than a direct convolution)
    k = tl.kernels.filter(pl.col("external_id").is_not_null()).group_by("external_id").agg(
        pl.col("dur_ns").sum(), pl.col("name").cast(pl.String).str.contains("winograd").any()
        .alias("winograd"))
    ops = tl.ranges.filter(pl.col("name").cast(pl.String) == "aten::cudnn_convolution")
    est = estimate_ops(tl.ranges).filter(pl.col("name") == "aten::cudnn_convolution")
    j = est.join(k, on="external_id").with_columns(
        (pl.col("flops") / (pl.col("dur_ns") * 1e-9)).alias("flop_per_s"))
    assert j.height == ops.height == 318
    fast = j.filter(pl.col("flop_per_s") > 15.7e12)
    assert fast.height > 0 and fast["winograd"].all()
    dev = calibrate(tl)["devices"][0]
    rows = {(k["class"], k["dtype"]): k for k in dev["kernels"]}
    # every convolution is a conv point, in the row of its longest kernel's name dtype:
    # 84 of them run longest in a volta_scudnn_* kernel, whose name says no dtype
    # ("conv unknown"), the others in the "conv fp32" row (docs/calibration.md)
    assert rows[("conv", "fp32")]["efficiency"]["points"] == 552
    assert rows[("conv", "unknown")]["efficiency"]["points"] == 84
    assert rows[("conv", "unknown")]["efficiency"]["ceiling"] == "fp32"
    gemm = rows[("gemm", "fp32")]["efficiency"]
    assert gemm["points"] == 18 and gemm["achieved"]["p95"] < 1.0
