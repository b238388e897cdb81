"""The bundled ncu sample (sample_traces/mini_train.ncu.csv) and benchmarks/gen_ncu.py give
roofline points whose FLOP/s and DRAM bandwidth equal values worked out by hand."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceparse
from tests.conftest import REPO
from traceparse.cli.main import main
from traceparse.roofline.build import build
from traceparse.roofline.chart import render
from traceparse.samplegen import ncu as samplegen_ncu

SAMPLES = REPO / "sample_traces"
GEMM_FLOP = 2 * 4096 * 4096 * 2048  # 68,719,476,736 per launch (bf16 tensor ops)
GEMM_BYTES = 2 * (4096 * 2048 + 2048 * 4096 + 4096 * 4096)  # A + B + C in bf16: 67,108,864
GELU_FLOP = 13_500_000 + 27_000_000 + 2 * 54_000_000  # fadd + fmul + 2 ffma = 148.5e6
ADAM_FLOP = 20_250_000 + 20_250_000 + 2 * 40_500_000  # 121.5e6


def test_bundled_ncu_sample_is_regenerated_byte_for_byte(tmp_path: Path) -> None:
    out = samplegen_ncu.write("mini_train", tmp_path / "x.csv")
    assert out.read_bytes() == (SAMPLES / "mini_train.ncu.csv").read_bytes()


def _points(by: str) -> tuple[dict[str, list[dict[str, object]]], dict[str, object]]:
    trace = traceparse.load(SAMPLES / "mini_train.sqlite", cache=None)
    ncu = traceparse.load(SAMPLES / "mini_train.ncu.csv", cache=None)
    points, _, notes = build(trace, ncu=ncu, by=by)
    rows: dict[str, list[dict[str, object]]] = {}
    for r in points.sort("launch_id").iter_rows(named=True):
        short = ("gemm" if "xmma_gemm" in r["kernel_name"] else "gelu" if "Gelu" in
                 r["kernel_name"] else "adam" if "FusedAdam" in r["kernel_name"] else "nccl")
        rows.setdefault(short, []).append(r)
    return rows, notes


def test_sample_points_per_launch_equal_hand_computed_values() -> None:
    rows, notes = _points("launch")
    # 3 steps x (12 GEMMs, 8 GELUs, 2 all-reduces, 1 optimizer) = 69 launches, all joined
    assert {k: len(v) for k, v in rows.items()} == {"gemm": 36, "gelu": 24, "nccl": 6,
                                                    "adam": 3}
    assert notes["join"]["matched"] == 69 and notes["join"]["ncu_unmatched"] == 0
    # ncu durations: GEMMs fwd 90 us, dgrad 100, wgrad 95 on the timeline, x 1.25 under ncu
    first_step = [112.5] * 4 + [125.0, 118.75] * 4
    assert [r["time_ns"] for r in rows["gemm"][:12]] == [u * 1e3 for u in first_step]
    for r in rows["gemm"]:
        t = float(r["time_ns"]) * 1e-9  # type: ignore[arg-type]
        assert r["precision"] == "bf16_tensor" and r["placed"] and r["bound"] == "compute"
        assert r["flop_per_s"] == pytest.approx(GEMM_FLOP / t, rel=1e-9)
        assert r["dram_bytes_per_s"] == pytest.approx(GEMM_BYTES / t, rel=1e-9)
    fwd = rows["gemm"][0]
    assert fwd["flop_per_s"] == pytest.approx(610.8397932e12, rel=1e-9)  # 68.72e9 / 112.5 us
    assert fwd["dram_bytes_per_s"] == pytest.approx(596.5232356e9, rel=1e-9)
    # GELU forward 12 us, backward 10 us: 148.5e6 FLOP, 27 MB each
    assert [r["time_ns"] for r in rows["gelu"][:8]] == [12e3] * 4 + [10e3] * 4
    assert rows["gelu"][0]["flop_per_s"] == pytest.approx(12.375e12, rel=1e-9)
    assert rows["gelu"][0]["dram_bytes_per_s"] == pytest.approx(2.25e12, rel=1e-9)
    assert rows["gelu"][4]["flop_per_s"] == pytest.approx(14.85e12, rel=1e-9)
    assert rows["gelu"][4]["dram_bytes_per_s"] == pytest.approx(2.7e12, rel=1e-9)
    # FusedAdam 45 us: 121.5e6 FLOP, 99 MB; all-reduce 260 us: 13e6 fadd, 52 MB
    assert rows["adam"][0]["flop_per_s"] == pytest.approx(2.7e12, rel=1e-9)
    assert rows["adam"][0]["dram_bytes_per_s"] == pytest.approx(2.2e12, rel=1e-9)
    # the all-reduce (260 us, 52 MB, 13e6 fadd) is a communication kernel: its DRAM rate is
    # kept (200 GB/s) but it is not placed, whatever its FP counters
    nccl = rows["nccl"][0]
    assert not nccl["placed"] and nccl["flop_per_s"] is None and nccl["bound"] is None
    assert nccl["dram_bytes_per_s"] == pytest.approx(200e9, rel=1e-9)
    assert nccl["note"].startswith("communication kernel")
    for k in ("gelu", "adam"):
        assert {r["precision"] for r in rows[k]} == {"fp32"}
        assert {r["bound"] for r in rows[k]} == {"memory"}


def test_sample_points_per_kernel_and_roofs() -> None:
    rows, notes = _points("kernel")
    gemm = rows["gemm"][0]
    # per step 4 x 112.5 + 4 x 125 + 4 x 118.75 = 1425 us; 3 steps: 4275 us for 36 GEMMs
    assert gemm["time_ns"] == pytest.approx(4275e3)
    assert gemm["flop_per_s"] == pytest.approx(36 * GEMM_FLOP / 4275e-6, rel=1e-9)
    assert gemm["dram_bytes_per_s"] == pytest.approx(36 * GEMM_BYTES / 4275e-6, rel=1e-9)
    gelu = rows["gelu"][0]  # 12 x 12 us + 12 x 10 us = 264 us
    assert gelu["flop_per_s"] == pytest.approx(24 * GELU_FLOP / 264e-6, rel=1e-9)
    assert gelu["dram_bytes_per_s"] == pytest.approx(24 * 27e6 / 264e-6, rel=1e-9)
    assert rows["adam"][0]["flop_per_s"] == pytest.approx(ADAM_FLOP / 45e-6, rel=1e-9)
    assert rows["nccl"][0]["time_ns"] == pytest.approx(6 * 260e3)
    assert not rows["nccl"][0]["placed"]
    # coverage: 6 x 260 us of 6234 us of profiled kernel time is communication, not placed
    cov = notes["coverage"]
    assert cov["total_ns"] == pytest.approx(4275e3 + 264e3 + 135e3 + 1560e3)
    assert cov["not_placed_ns"] == cov["communication_ns"] == pytest.approx(1560e3)
    placed_flop = 36 * GEMM_FLOP + 24 * GELU_FLOP + 3 * ADAM_FLOP
    assert cov["achieved_flop_per_s"] == pytest.approx(placed_flop / 4674e-6, rel=1e-9)
    # roofs: ncu's FFMA peak 16,896/cycle x 2 x 1.59 GHz; datasheet bf16 989.4 TFLOP/s at
    # 1.83 GHz rescaled to 1.59 GHz; datasheet HBM3 3.35 TB/s
    assert rows["gelu"][0]["peak_flop_per_s"] == pytest.approx(2 * 16_896 * 1.59e9)
    assert gemm["peak_flop_per_s"] == pytest.approx(989.4e12 * 1590 / 1830, rel=1e-6)
    assert gemm["peak_dram_bytes_per_s"] == pytest.approx(3.35e12)
    assert notes["sm_clock_hz"] == pytest.approx(1.59e9)


def test_readme_roofline_command_on_the_sample_writes_a_chart(tmp_path: Path) -> None:
    out = tmp_path / "roofline.svg"
    res = CliRunner().invoke(main, ["--no-cache", "roofline",
                                    str(SAMPLES / "mini_train.sqlite"), "--ncu",
                                    str(SAMPLES / "mini_train.ncu.csv"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    svg = out.read_text(encoding="utf-8")  # matplotlib writes each text as a comment
    assert "<!-- bf16_tensor 860 TFLOP/s @ 1,590 MHz -->" in svg
    assert "<!-- fp32 53.7 TFLOP/s @ 1,590 MHz -->" in svg
    # the four kernels labelled by their own names (the FusedAdam kernel was 'native':
    # '(anonymous namespace)' was taken for its parameter list)
    for label in ("multi_tensor_apply_kernel", "vectorized_elementwise_kernel",
                  "sm90_xmma_gemm_bf16bf16_bf16f32_f32…"):
        assert f"<!-- {label} -->" in svg, label
    assert "<!-- native -->" not in svg and "<!-- ncclDevKernel" not in svg
    assert "not placed 25.0% (communication kernels 25.0%)" in res.stderr


def _gen_ncu():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_ncu", REPO / "benchmarks" / "gen_ncu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gen_ncu_launches_are_placed_with_their_own_counts(tmp_path: Path) -> None:
    """gen_ncu writes smsp__*_pred_on.sum FLOP counts (what the FP_HINT asks for); each
    launch's FP32 FLOP/s is (fadd + fmul + 2 ffma) / (cycles / clock), read from the CSV."""
    path = tmp_path / "g.csv"
    _gen_ncu().generate(path, 40, filler=3, seed=1)
    with open(path, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))[1:]  # skip the units row
    s = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum"
    want = {}
    for r in rows:
        flop = float(r[s.format("fadd")]) + float(r[s.format("fmul")]) \
            + 2 * float(r[s.format("ffma")])
        secs = float(r["sm__cycles_elapsed.avg"]) / float(r["sm__cycles_elapsed.avg.per_second"])
        want[int(r["ID"])] = (flop / secs, float(r["dram__bytes.sum.per_second"]))
    ncu = traceparse.load(path, cache=None)
    points, _, _ = build(ncu, by="launch")
    assert points.height == 40 and points["placed"].all()
    for r in points.iter_rows(named=True):
        fl, bw = want[r["launch_id"]]
        assert r["flop_per_s"] == pytest.approx(fl, rel=1e-5)
        assert r["dram_bytes_per_s"] == pytest.approx(bw, rel=1e-5)
        assert r["flop_per_s"] <= r["peak_flop_per_s"]
        assert r["dram_bytes_per_s"] <= r["peak_dram_bytes_per_s"]


def test_chart_without_ceilings_says_so_in_the_figure() -> None:
    pts = pl.DataFrame({"kernel_name": ["k"], "time_ns": [1e3], "ai_dram": [2.0],
                        "flop_per_s": [1e12], "provenance": ["measured (ncu)"],
                        "precision": ["fp32"], "placed": [True]})
    none = pl.DataFrame(schema={"name": pl.String, "kind": pl.String, "value": pl.Float64})
    svg = render(pts, none, fmt="svg").decode()
    # (matplotlib writes '--' inside an SVG comment as '- -')
    assert "<!-- no roofs: unknown GPU and no peak metrics in the input (use - -gpu NAME) -->" \
        in svg
    roofs = pl.DataFrame({"name": ["fp32", "dram"], "kind": ["compute", "memory"],
                          "value": [1e13, 1e12]})
    assert "no roofs" not in render(pts, roofs, fmt="svg").decode()


def test_copies_and_fills_are_bandwidth_points_not_flop_points() -> None:
    """aten::copy_ / fill_ do no arithmetic: never a FLOP point, never a % of a FLOP roof
    (issue 26: copy_ was drawn at 0.83 TFLOP/s, "94% of roof"); they are bandwidth points
    (DRAM bytes over time, bound memory) whose note gives their share of DRAM bandwidth."""

    from traceparse.roofline.estimate import DATA_MOVEMENT_OPS, estimated_points

    def op(eid: int, name: str, dims: str, types: str, t0: int) -> dict[str, object]:
        return {"rank": 0, "kind": "cpu_op", "name": name, "external_id": eid,
                "input_dims": dims, "input_types": types, "concrete_inputs": None,
                "thread_id": 1, "start_ns": t0, "end_ns": t0 + 500}
    ranges = pl.DataFrame([op(1, "aten::copy_", "[[1024, 1024], [1024, 1024]]",
                              '["float", "float"]', 0),
                           op(2, "aten::add", "[[1024, 1024], [1024, 1024], []]",
                              '["float", "float", "Scalar"]', 1000)])
    gpu = pl.DataFrame({"rank": [0, 0], "device_id": [0, 0], "kind": ["kernel", "kernel"],
                        "name": ["copy_kernel", "add_kernel"], "start_ns": [100, 1100],
                        "dur_ns": [10_000, 10_000], "external_id": [1, 2],
                        "correlation_id": [11, 12]})
    ceil = pl.DataFrame({"name": ["fp32", "dram"], "kind": ["compute", "memory"],
                         "value": [60e12, 4.8e12]})
    pts = estimated_points(ranges, gpu, ceil)
    assert "aten::copy_" in DATA_MOVEMENT_OPS
    copy = pts.filter(pl.col("kernel_name") == "aten::copy_").row(0, named=True)
    # 4 MiB read + 4 MiB written (the two inputs) + 4 MiB output = 3 x 4 MiB over 10 us
    assert copy["flop_per_s"] is None and copy["pct_of_roof"] is None
    assert copy["placed"] and copy["bound"] == "memory"
    assert copy["dram_bytes_per_s"] == pytest.approx(3 * 4 * 1024 * 1024 / 10e-6)
    assert copy["note"].endswith(f"{round(copy['dram_bytes_per_s'] * 100 / 4.8e12)}% of DRAM "
                                 "bandwidth")
    add = pts.filter(pl.col("kernel_name") == "aten::add").row(0, named=True)
    assert add["flop_per_s"] == pytest.approx(1024 * 1024 / 10e-6)
