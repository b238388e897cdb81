"""Roofline: ceiling matching, shape estimates, model classification, join, chart, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import shared_files
from traceparse.cli.main import main
from traceparse.errors import TraceError
from traceparse.ncu import reader as ncu
from traceparse.roofline import gpus
from traceparse.roofline.chart import render
from traceparse.roofline.estimate import estimate_ops, estimated_points, op_flops
from traceparse.roofline.join import join_ncu
from traceparse.roofline.model import classify, measured_points

# Every name string of FORMATS D.4 -> expected table row.
D4 = [
    ("Tesla V100-SXM2-32GB", "V100 SXM2"), ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB"), ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PG509-200", "A100 SXM4 40GB"), ("NVIDIA A10", "A10"), ("NVIDIA A10G", "A10G"),
    ("NVIDIA L4", "L4"), ("NVIDIA L40S", "L40S"), ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"),
    ("NVIDIA H100 PCIe", "H100 PCIe 80GB"), ("NVIDIA H100 NVL", "H100 NVL 94GB"),
    ("NVIDIA H200", "H200 SXM 141GB"), ("NVIDIA B200", "B200 (HGX per GPU)"),
    ("NVIDIA GB200", "GB200 (per Blackwell GPU in NVL72)"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("Tesla T4", "T4"), ("AMD Instinct MI250X", "MI250X"), ("AMD Instinct MI250X/MI250", "MI250X"),
    ("AMD Instinct MI300X", "MI300X"), ("A100-SXM4-40GB", "A100 SXM4 40GB"),
    # names found in the shared ncu files
    ("NVIDIA H800", "H800 SXM5 80GB"), ("NVIDIA GH200 480GB", "GH200 480GB (Hopper GPU)"),
    ("NVIDIA GeForce RTX 3080", "RTX 3080"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
]


@pytest.mark.parametrize("name,row", D4)
def test_match_every_d4_name(name: str, row: str) -> None:
    hit = gpus.match(name)
    assert hit is not None and hit["name"] == row


def test_match_disambiguates_by_sm_count_and_memory() -> None:
    assert gpus.match("NVIDIA H100", sm_count=114)["name"] == "H100 PCIe 80GB"  # type: ignore[index]
    assert gpus.match("NVIDIA H100", sm_count=132)["name"] == "H100 SXM5 80GB"  # type: ignore[index]
    assert gpus.match("A100 SXM4", memory_bytes=85_000_000_000)["name"] == "A100 SXM4 80GB"  # type: ignore[index]
    assert gpus.match("Some Unknown Accelerator") is None


def test_table_has_required_gpus_and_sources() -> None:
    t = gpus.table()
    assert t.height >= 20
    assert t["source"].null_count() == 0
    for col in ("fp32_tflops", "mem_bandwidth_gbs", "sm_count"):
        assert t[col].null_count() == 0, col
    # every row cites a datasheet or whitepaper page, none is "from memory"
    assert all("http" in s or "datasheet" in s for s in t["source"])
    assert not any("from memory" in s.lower() for s in t["source"])


def test_overrides_csv_and_json(tmp_path: Path) -> None:
    c = tmp_path / "c.csv"
    c.write_text("name,kind,value\nfp32,compute,1e13\ndram,memory,2e12\n")
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"fp32": 2e13, "hbm": 3e12}))
    cs = gpus.ceilings(gpu="NVIDIA H100 80GB HBM3", overrides=gpus.read_overrides(c))
    d = dict(zip(cs["name"], cs["value"], strict=True))
    assert d["fp32"] == 1e13 and d["dram"] == 2e12 and d["bf16_tensor"] == 989.4e12
    js = {x.name: x for x in gpus.read_overrides(j)}
    assert js["hbm"].kind == "memory" and js["fp32"].value == 2e13
    bad = tmp_path / "b.csv"
    bad.write_text("name,value\nfp32,-1\n")
    with pytest.raises(TraceError):
        gpus.read_overrides(bad)


# ----------------------------------------------------------------- shape estimates

@pytest.mark.parametrize("op,dims,conc,flops", [
    ("aten::mm", [[128, 256], [256, 512]], None, 2 * 128 * 512 * 256),
    ("aten::addmm", [[512], [128, 256], [256, 512]], None, 2 * 128 * 512 * 256),
    ("aten::bmm", [[8, 64, 32], [8, 32, 16]], None, 2 * 8 * 64 * 16 * 32),
    ("aten::baddbmm", [[8, 64, 16], [8, 64, 32], [8, 32, 16]], None, 2 * 8 * 64 * 16 * 32),
    ("aten::matmul", [[4, 10, 64, 32], [4, 10, 32, 8]], None, 2 * 40 * 64 * 8 * 32),
    ("aten::matmul", [[32], [32, 8]], None, 2 * 1 * 32 * 8),
    ("aten::linear", [[16, 20, 768], [3072, 768], [3072]], None, 2 * 320 * 768 * 3072),
    # conv 3x3 stride 2 pad 1 on 224x224 -> 112x112; 2 * N * O * 112 * 112 * C * 3 * 3
    ("aten::convolution", [[2, 3, 224, 224], [64, 3, 3, 3], [64]],
     ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"],
     2 * 2 * 64 * 112 * 112 * 3 * 3 * 3),
    ("aten::scaled_dot_product_attention", [[2, 8, 128, 64], [2, 8, 256, 64], [2, 8, 256, 64]],
     None, 2 * 2 * 8 * 128 * 256 * (64 + 64)),
    # causal: (q, k, v, attn_mask, dropout_p, is_causal=True) -> half the score matrix
    ("aten::scaled_dot_product_attention", [[2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64]],
     ["", "", "", "", "0.", "True"], 2 * 2 * 8 * 128 * 128 * (64 + 64) // 2),
    # backward inputs start with grad_out; dq, dk, dv and the recomputed scores: 2.5x forward
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
     [[2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64], [2, 8, 128, 64]], None,
     2 * 2 * 8 * 128 * 128 * (64 + 64) * 5 // 2),
    # FP8 _scaled_mm(a[M,K], b[K,N], scale_a, scale_b)
    ("aten::_scaled_mm", [[128, 256], [256, 512], [], []], None, 2 * 128 * 512 * 256),
    # grouped GEMM a[T,K] x b[G,K,N]: 2*T*K*N
    ("aten::_grouped_mm", [[1024, 512], [8, 512, 256], [8]], None, 2 * 1024 * 512 * 256),
    # cudnn_convolution_backward(input, grad_out, weight): data + weight grads = 2x forward
    ("aten::cudnn_convolution_backward", [[4, 8, 16, 16], [4, 6, 8, 8], [6, 8, 3, 3]], None,
     2 * 2 * 4 * 6 * 8 * 8 * 8 * 3 * 3),
    ("flash_attn::_flash_attn_forward", [[2, 128, 8, 64], [2, 256, 8, 64], [2, 256, 8, 64]],
     None, 2 * 2 * 8 * 128 * 256 * 128),
    # cudnn_convolution(input, weight, padding, stride, dilation, ...): pad 1, stride 1
    ("aten::cudnn_convolution", [[1, 8, 16, 16], [4, 8, 3, 3]],
     ["", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"], 2 * 1 * 4 * 16 * 16 * 8 * 3 * 3),
    # no Concrete Inputs -> stride unknown -> not estimated (never a silent guess)
    ("aten::convolution", [[2, 3, 224, 224], [64, 3, 3, 3], [64]], None, None),
    ("aten::relu", [[10]], None, None),
])
def test_op_flops(op: str, dims: list, conc: list | None, flops: int | None) -> None:
    assert op_flops(op, dims, conc) == flops


def _ranges() -> pl.DataFrame:
    return pl.DataFrame({
        "rank": [0, 0, 0], "kind": ["cpu_op", "cpu_op", "cpu_op"],
        "name": ["aten::addmm", "aten::mm", "aten::add"], "external_id": [10, 11, 12],
        "input_dims": ["[[512], [128, 256], [256, 512]]", "[[64, 64], [64, 64]]", "[[4], [4]]"],
        "input_types": ['["float", "float", "float"]', '["c10::BFloat16", "c10::BFloat16"]',
                        '["float", "float"]'],
        "concrete_inputs": [None, None, None]},
        schema_overrides={"rank": pl.Int32})


def test_estimated_points_link_kernels_by_external_id() -> None:
    est = estimate_ops(_ranges())
    assert est["name"].to_list() == ["aten::addmm", "aten::mm"]
    # addmm bytes: (512 + 128*256 + 256*512) * 4 = 657,408 (inputs read once)
    assert est["bytes"][0] == (512 + 128 * 256 + 256 * 512) * 4
    gpu = pl.DataFrame({"rank": [0, 0, 0], "kind": ["kernel"] * 3, "external_id": [10, 10, 11],
                        "dur_ns": [1000, 1000, 500]}, schema_overrides={"rank": pl.Int32})
    ceil = pl.DataFrame({"name": ["fp32", "bf16_tensor", "dram"],
                         "value": [1e13, 1e15, 1e12]})
    pts = estimated_points(_ranges(), gpu, ceil)
    r = pts.filter(pl.col("kernel_name") == "aten::addmm").row(0, named=True)
    # 33,554,432 FLOPs over 2 us of kernels = 1.6777e13 FLOP/s
    assert r["flop_per_s"] == pytest.approx(2 * 128 * 512 * 256 / 2e-6)
    assert r["provenance"] == "estimated (shapes)" and r["peak_flop_per_s"] == 1e13
    mm = pts.filter(pl.col("kernel_name") == "aten::mm").row(0, named=True)
    assert mm["peak_flop_per_s"] == 1e15  # bf16 inputs -> bf16 tensor roof


def test_estimated_point_above_the_dram_peak_is_noted() -> None:
    """addmm moves 657,408 bytes (inputs read once) in 2 us of kernels = 3.29e11 B/s: under
    a 1e12 B/s DRAM roof nothing is said; under a 1e11 B/s roof the shape bytes exceed what
    DRAM can move, and the point says so (L2 hits)."""
    from traceparse.roofline.estimate import ABOVE_DRAM_NOTE

    gpu = pl.DataFrame({"rank": [0, 0, 0], "kind": ["kernel"] * 3, "external_id": [10, 10, 11],
                        "dur_ns": [1000, 1000, 500]}, schema_overrides={"rank": pl.Int32})
    for dram, noted in ((1e12, False), (1e11, True)):
        ceil = pl.DataFrame({"name": ["fp32", "bf16_tensor", "dram"],
                             "value": [1e13, 1e15, dram]})
        r = estimated_points(_ranges(), gpu, ceil).filter(
            pl.col("kernel_name") == "aten::addmm").row(0, named=True)
        assert r["dram_bytes_per_s"] == pytest.approx(657_408 / 2e-6)
        assert (r["note"] == ABOVE_DRAM_NOTE) is noted


def test_classify_bounds() -> None:
    # peak 100, bw 10 -> ridge 10. a: AI 20 compute; b: AI 2 memory; c: tiny -> latency
    p = pl.DataFrame({"flop_per_s": [50.0, 10.0, 1.0], "dram_bytes_per_s": [2.5, 5.0, 0.1],
                      "peak_flop_per_s": [100.0] * 3, "peak_dram_bytes_per_s": [10.0] * 3})
    out = classify(p)
    assert out["bound"].to_list() == ["compute", "memory", "latency"]
    assert out["ridge"].to_list() == [10.0] * 3
    # b: attainable = min(100, 2 * 10) = 20 -> 50 %
    assert out["pct_of_roof"].to_list()[:2] == [50.0, 50.0]


def test_join_by_name_order_and_shape() -> None:
    g = pl.DataFrame({"kind": ["kernel"] * 4, "name": ["a", "b", "a", "a"],
                      "start_ns": [0, 1, 2, 3], "dur_ns": [5, 5, 7, 9],
                      "grid_x": [1, 1, 2, 1]})
    n = pl.DataFrame({"launch_id": [0, 1, 2], "kernel_name": ["void a", "a", "c"],
                      "grid_x": [1, 1, 1]})
    j, c = join_ncu(g, n)
    # ncu a#0 <-> start 0 (grid 1 == 1, match); a#1 <-> start 2 (grid 2 != 1, mismatch)
    assert c == {"ncu_launches": 3, "timeline_kernels": 4, "matched": 1, "shape_mismatch": 1,
                 "ncu_unmatched": 1}
    assert j["start_ns"].to_list() == [0]


SGEMM = shared_files("ncu", "rsmall__sgemm.raw.csv")


@pytest.mark.shared
def test_sgemm_is_compute_side_with_ncu_ceilings() -> None:
    tl = ncu.read(SGEMM[0])
    ceil = gpus.ceilings(ncu=tl.ncu, gpu="NVIDIA H800")
    r = measured_points(tl.ncu, ceil).row(0, named=True)
    # FP32 peak from the file: 2 * 16896 lanes * 1.50093 GHz = 50.72 TFLOP/s; the kernel's
    # few fp16 FLOPs (0.003 % of them) join the point and move its time-weighted roof
    # (docs/roofline.md) by 0.0015 %
    assert r["peak_flop_per_s"] == pytest.approx(2 * 16896 * 1500930402.02, rel=1e-4)
    assert r["precision"] == "fp32+fp16" and r["bound"] == "compute"
    assert r["pct_of_roof"] == pytest.approx(100 * r["flop_per_s"] / r["peak_flop_per_s"])


@pytest.mark.shared
def test_chart_renders_deterministically(tmp_path: Path) -> None:
    tl = ncu.read(SGEMM[0])
    ceil = gpus.ceilings(ncu=tl.ncu, gpu="NVIDIA H800")
    pts = measured_points(tl.ncu, ceil)
    a = render(pts, ceil, fmt="svg")
    assert a == render(pts, ceil, fmt="svg")
    assert a.startswith(b"<?xml") and b"gemm_device" in a
    png = render(pts, ceil, fmt="png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png == render(pts, ceil, fmt="png")


@pytest.mark.shared
def test_cli_roofline_and_gpus(tmp_path: Path) -> None:
    out = tmp_path / "r.png"
    r = CliRunner().invoke(main, ["roofline", str(SGEMM[0]), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 1000
    r = CliRunner().invoke(main, ["roofline", str(SGEMM[0]), "--format", "json"])
    rows = json.loads(r.stdout)
    assert rows[0]["bound"] == "compute" and rows[0]["provenance"] == "measured (ncu)"
    r = CliRunner().invoke(main, ["gpus", "--format", "csv"])
    assert r.exit_code == 0 and "H100 SXM5 80GB" in r.output


RESNET = shared_files("torch", "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz")


@pytest.mark.shared
def test_estimates_on_real_torch_trace() -> None:
    """ResNet-50 fc layer: addmm(bias[1000], x[32,2048], W[2048,1000]) = 2*32*1000*2048
    FLOPs each. Convolutions have no Concrete Inputs in this 2021 trace: their output size
    comes from the consumer (the next op on the thread taking [N, O, h, w])."""
    from traceparse.kineto import reader as kineto

    tl = kineto.read(RESNET[0])
    est = estimate_ops(tl.ranges)
    addmm = est.filter(pl.col("name") == "aten::addmm")
    n_ops = tl.ranges.filter((pl.col("name") == "aten::addmm")
                             & (pl.col("input_dims").str.contains("[32,2048],[2048,1000]",
                                                                  literal=True))).height
    assert addmm.height == n_ops > 0
    assert set(addmm["flops"].to_list()) == {2.0 * 32 * 1000 * 2048}
    # conv1 of ResNet-50: x[32,3,224,224] * W[64,3,7,7], stride 2 -> 112x112 output, read
    # from the batch_norm that consumes it: 2*32*64*112*112*3*7*7 FLOPs
    conv1 = est.filter((pl.col("name") == "aten::cudnn_convolution")
                       & (pl.col("flops") == 2.0 * 32 * 64 * 112 * 112 * 3 * 7 * 7))
    n_conv1 = tl.ranges.filter((pl.col("name") == "aten::cudnn_convolution")
                               & pl.col("input_dims").str.starts_with("[[32,3,224,224],"
                                                                      "[64,3,7,7]")).height
    assert conv1.height == n_conv1 > 0


def test_memory_op_models() -> None:
    """Elementwise: 1 FLOP per output element, inputs read + output written; embedding reads
    only the gathered rows: 512 indices x 64 dims fp32 = 32,768 FLOPs,
    512*8 (indices) + 2 * 512*64*4 (rows read, output written) = 266,240 bytes."""
    from traceparse.roofline.estimate import memory_op_work

    assert memory_op_work("aten::mul", [[256, 128], [256, 128]], ["float", "float"]) == (
        256 * 128.0, 3 * 256 * 128 * 4.0)
    assert memory_op_work("aten::layer_norm", [[8, 1024], [1024], [1024]],
                          ["c10::BFloat16"] * 3) == (5 * 8 * 1024.0,
                                                     (2 * 8 * 1024 + 2 * 1024) * 2.0)
    assert memory_op_work("aten::embedding", [[100000, 64], [512]], ["float", "long int"]) == (
        512 * 64.0, 512 * 8 + 2 * 512 * 64 * 4.0)
    assert memory_op_work("aten::conv2d", [[1]], ["float"]) is None


def test_step_flop_rate_is_over_the_time_its_kernels_took() -> None:
    """A step whose host range is 10 us but whose one kernel (started inside it) runs 100 us:
    8e9 FLOPs over 100 us = 80 TFLOP/s, MFU 80% of a 100 TFLOP/s roof (over the host range
    alone it would be 800 TFLOP/s, 800%)."""
    from traceparse.roofline.coverage import step_split

    k = pl.DataFrame({"rank": [0], "device_id": [0], "start_ns": [5_000], "dur_ns": [100_000],
                      "name": ["aten::mm"], "precision": ["bf16_tensor"], "flops": [8e9]})
    p = pl.DataFrame({"kernel_name": ["aten::mm"], "precision": ["bf16_tensor"],
                      "bound": ["compute"], "peak_flop_per_s": [1e14]})
    s = pl.DataFrame({"rank": [0], "step": ["s1"], "start_ns": [0], "end_ns": [10_000]})
    a = k.select("rank", "device_id", "start_ns", "dur_ns")
    r = step_split(k, p, s, a)[0]
    assert r["wall_ns"] == 105_000
    assert r["mfu"] is not None and 0.76 < r["mfu"] < 0.77
