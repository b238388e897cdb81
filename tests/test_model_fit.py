"""Fits recover hand-set parameters; calibration.json validates against its JSON Schema."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import shared_files

from traceparse.analyses import fit
from traceparse.analyses.calibrate import calibrate, launch_stats, schema_path, to_json
from traceparse.analyses.kclass import class_expr, dtype_expr


def test_alpha_beta_recovers_hand_set_parameters() -> None:
    # alpha = 8 us, bandwidth = 25 GB/s = 25 bytes/ns; sizes 4 KiB .. 256 MiB
    rng = np.random.default_rng(7)
    x = np.repeat(2.0 ** np.arange(12, 29), 5)
    t = (8000 + x / 25.0) * rng.uniform(0.97, 1.03, x.size)  # +-3 % noise
    f = fit.alpha_beta(x, t)
    assert f["model"] == "alpha_beta"
    assert f["alpha_ns"] == pytest.approx(8000, rel=0.05)
    assert f["bandwidth_bytes_per_s"] == pytest.approx(25e9, rel=0.03)
    assert f["mape_pct"] < 3.0


def test_alpha_beta_exact_and_degenerate() -> None:
    # 1 MB in 60 us, 2 MB in 110 us: slope 0.05 ns/B -> 20 GB/s, alpha 10 us
    f = fit.alpha_beta([1e6, 2e6], [60_000, 110_000])
    assert f["alpha_ns"] == pytest.approx(10_000)
    assert f["bandwidth_bytes_per_s"] == pytest.approx(20e9)
    assert fit.predict_alpha_beta(f, [3e6])[0] == pytest.approx(160_000)
    one = fit.alpha_beta([4096, 4096, 4096], [1000, 3000, 2000])  # one size: constant
    assert one["model"] == "constant" and one["alpha_ns"] == 2000
    assert one["bandwidth_bytes_per_s"] is None
    neg = fit.alpha_beta([1e6, 2e6], [100, 300])  # intercept would be -100: forced >= 0
    assert neg["alpha_ns"] == 0.0 and neg["bandwidth_bytes_per_s"] > 0
    assert fit.alpha_beta([], [])["n"] == 0


def test_saturating_recovers_e_max_and_w_half() -> None:
    # peak 100 TFLOP/s, e_max 0.8, w_half 2 GFLOP; work 10 MFLOP .. 100 GFLOP
    peak, e_max, w_half = 100e12, 0.8, 2e9
    w = np.logspace(7, 11, 40)
    eff = e_max * w / (w + w_half)
    t = w / (eff * peak) * 1e9
    rng = np.random.default_rng(3)
    f = fit.saturating(w, t * rng.uniform(0.98, 1.02, w.size), peak)
    assert f["model"] == "saturating"
    assert f["e_max"] == pytest.approx(e_max, rel=0.03)
    assert f["w_half"] == pytest.approx(w_half, rel=0.08)
    assert f["rmse_eff"] < 0.02
    # hand check of the time form: t = (w + w_half) / (e_max * peak)
    exact = fit.saturating(w, t, peak)
    assert fit.predict_saturating(exact, [2e9], peak)[0] == pytest.approx(4e9 / 80e12 * 1e9)


def test_launch_stats_hand_computed() -> None:
    import polars as pl

    # k1 API 0..4 GPU 5..15; k2 API 6..9 GPU 16..20 (call began while k1 ran: busy gap 1)
    lt = pl.DataFrame({"rank": [0, 0], "device_id": [0, 0], "stream_id": [7, 7],
                       "api_start_ns": [0, 6], "api_end_ns": [4, 9], "start_ns": [5, 16],
                       "end_ns": [15, 20], "launch_ns": [4, 3], "graph_id": [None, None],
                       "api_name": ["cudaLaunchKernel", "cudaLaunchKernel"]},
                      schema_overrides={"graph_id": pl.Int64})
    s = launch_stats(lt)
    assert s["graph"] is None
    e = s["eager"]
    assert e["count"] == 2 and e["busy_gaps"] == 1
    assert e["launch_call_ns"]["p50"] == 3.5          # median of 4, 3
    assert e["launch_to_start_ns"]["p50"] == 7.5      # median of 5, 10
    assert e["busy_gap_ns"]["p50"] == 1.0


def test_kernel_classes_by_name() -> None:
    import polars as pl

    f = pl.DataFrame({"name": ["ncclDevKernel_AllReduce", "flash_fwd_kernel",
                               "sm90_xmma_gemm_bf16bf16_bf16f32", "implicit_convolve_sgemm",
                               "reduce_kernel<float>", "vectorized_elementwise_kernel<4>",
                               "my_kernel", "cutlass_tensorop_i8816gemm"],
                      "category": ["communication"] + ["compute"] * 7})
    got = f.select(class_expr(), dtype_expr()).rows()
    assert [g[0] for g in got] == ["communication", "attention", "gemm", "conv", "reduction",
                                   "elementwise", "other", "gemm"]
    assert got[2][1] == "bf16" and got[3][1] == "fp32" and got[7][1] == "int8"


SHARED = [p for p in shared_files("nsys", "*.sqlite") + shared_files("torch", "*")]


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=[p.name for p in SHARED])
def test_calibration_validates_against_schema(path) -> None:  # type: ignore[no-untyped-def]
    jsonschema = pytest.importorskip("jsonschema")
    from traceparse.loader import load

    tl = load(path)
    cal = json.loads(to_json(calibrate(tl)))
    jsonschema.validate(cal, json.loads(schema_path().read_text()))
    # independent count: kernels per device model sum to the trace's kernels
    n = sum(k["count"] for d in cal["devices"] for k in d["kernels"])
    assert n == tl.kernels.height
