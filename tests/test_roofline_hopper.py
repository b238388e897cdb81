"""Tensor roofs and achieved FLOP/s on a real H200 (../shared/traces/gpu/), each checked
against three references that do not go through traceparse's roofline code:

1. the shape: 2*M*N*K (or the attention's 4*B*H*S*S*D) from the runner's sidecar JSON, over
   ncu's own ``gpu__time_duration`` of the launch;
2. ncu's own numbers: the roofline chart page's ``SM Frequency`` and FP32 achieved values
   (``ncu_kernels.roofline.csv.gz``), and the ``pct_of_peak_sustained_elapsed`` ncu prints
   for the dense (``_sparsity_off``) tensor path, read with the csv module;
3. the datasheet dense peak (roofline/data/gpus.csv) rescaled to the measured SM clock.

Agreement within ``TOL`` (5%). No placed point lies above its own roof or the chart's drawn
roof for its precision.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from traceparse.roofline import gpus
from traceparse.roofline.build import build
from traceparse.roofline.estimate import op_flops

pytestmark = pytest.mark.shared
GPU = TRACES / "gpu"
TOL = 0.05


def _csv_rows(gz: Path) -> list[dict[str, str]]:
    text = gzip.decompress(gz.read_bytes()).decode()
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _range(nvtx: str) -> str:
    return nvtx.split("<default domain>:")[-1].split(":")[0] if nvtx else ""


def _load(gz: Path, tmp: Path) -> Any:
    out = tmp / gz.name.removesuffix(".gz")
    out.write_bytes(gzip.decompress(gz.read_bytes()))
    return traceparse.load(out)


def _datasheet_dense(prec: str, clock_hz: float) -> float:
    row = gpus.match("NVIDIA H200")
    assert row is not None
    col = gpus.PRECISION_COLS[prec]
    return float(row[col]) * 1e12 * clock_hz / (float(row["tensor_clock_mhz"]) * 1e6)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = GPU / "scenarios"
    if not (d / "gemm_roofline-sweep.ncu.csv.gz").is_file():
        pytest.skip(f"no GEMM sweep capture at {d}")
    tl = _load(d / "gemm_roofline-sweep.ncu.csv.gz", tmp_path_factory.mktemp("sweep"))
    pts, ceil, _notes = build(tl, by="launch")
    meta = json.loads((d / "gemm_roofline-sweep.meta.json").read_text())
    raw = [r for r in _csv_rows(d / "gemm_roofline-sweep.ncu.csv.gz") if r["ID"]]
    return {"tl": tl, "pts": pts, "ceil": ceil, "meta": meta, "raw": raw}


def _points(s: dict[str, Any]) -> pl.DataFrame:
    n = s["tl"].ncu.select("launch_id", "nvtx", "dur_ns")
    return s["pts"].join(n, on="launch_id").with_columns(
        pl.col("nvtx").map_elements(_range, return_dtype=pl.String).alias("range"))


def test_sweep_tensor_flops_match_the_shape(sweep: dict[str, Any]) -> None:
    """Reference 1: achieved FLOP/s = shape FLOPs / ncu kernel time, within 5% (the counters
    count tile padding too: the 8192 bf16 GEMM's 320-wide tiles do 1.6% extra work)."""
    p = _points(sweep)
    seen = 0
    for g in sweep["meta"]["sizes"]["gemms"]:
        if g["dtype"] not in ("tf32", "bf16", "fp8"):
            continue
        row = p.filter(pl.col("range") == g["range"])
        assert row.height == 1, g["range"]
        shape = op_flops(g["op"], g["input_dims"]) or g["flops"]
        want = shape / (row["dur_ns"][0] * 1e-9)
        got = row["flop_per_s"][0]
        assert row["precision"][0] == f"{g['dtype']}_tensor"
        assert abs(got / want - 1) <= TOL, (g["range"], got, want)
        seen += 1
    assert seen == 9


def test_sweep_tensor_roofs_are_the_dense_peak(sweep: dict[str, Any]) -> None:
    """Reference 3: each tensor roof is the datasheet dense peak at the launch's measured SM
    clock (bf16 989.4, tf32 494.7, fp8 1978.9 TFLOP/s at 1.83 GHz), within 5%."""
    p = _points(sweep).filter(pl.col("precision").str.ends_with("_tensor"))
    assert p.height == 9
    for r in p.iter_rows(named=True):
        want = _datasheet_dense(r["precision"], r["sm_clock_hz"])
        assert abs(r["peak_flop_per_s"] / want - 1) <= TOL, (r["precision"], r["sm_clock_hz"],
                                                             r["peak_flop_per_s"], want)


def test_sweep_pct_of_roof_is_ncus_own(sweep: dict[str, Any]) -> None:
    """Reference 2: % of roof equals the ``pct_of_peak_sustained_elapsed`` ncu prints for the
    dense tensor path that did the work (read from the CSV, not through traceparse)."""
    p = _points(sweep).filter(pl.col("precision").str.ends_with("_tensor"))
    by_range = {_range(r["thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:"
                         "Msg_Type:Msg"]): r for r in sweep["raw"]}
    for r in p.iter_rows(named=True):
        raw = by_range[r["range"]]
        dense = [k for k in raw if k.startswith("sm__ops_path_tensor_")
                 and k.endswith("_sparsity_off.sum.pct_of_peak_sustained_elapsed")]
        ncu_pct = max(_num(raw[k]) for k in dense)
        assert abs(r["pct_of_roof"] - ncu_pct) <= 100 * TOL, (r["range"], r["pct_of_roof"],
                                                              ncu_pct)


def test_no_placed_point_above_its_roof(sweep: dict[str, Any]) -> None:
    for by in ("launch", "kernel"):
        pts, ceil, _ = build(sweep["tl"], by=by)
        placed = pts.filter(pl.col("placed"))
        assert placed.height >= (12 if by == "launch" else 9)
        assert (placed["flop_per_s"] <= placed["peak_flop_per_s"] * (1 + 1e-9)).all()
        drawn = dict(zip(ceil["name"], ceil["value"], strict=True))
        for r in placed.iter_rows(named=True):  # a mixed point: each of its precisions
            assert all(p in drawn for p in r["precision"].split("+")), r["precision"]


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = GPU / "h200"
    if not (d / "ncu_kernels.raw_base.csv.gz").is_file():
        pytest.skip(f"no ncu capture at {d}")
    tl = _load(d / "ncu_kernels.raw_base.csv.gz", tmp_path_factory.mktemp("h200"))
    pts, _ceil, _ = build(tl, by="launch")
    chart: dict[str, dict[str, float]] = {}
    for r in _csv_rows(d / "ncu_kernels.roofline.csv.gz"):
        if not r.get("Metric Name"):
            continue
        rng = _range(r["thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:"
                       "Msg"])
        unit = {"Ghz": 1e9, "Tbyte/s": 1e12, "Gbyte/s": 1e9, "Mbyte/s": 1e6}.get(
            r["Metric Unit"], 1.0)
        key = f"{r['Body Item Label']}|{r['Metric Name']}"
        chart.setdefault(rng, {})[key] = _num(r["Metric Value"]) * unit
    ranges = {r["range"]: r for r in json.loads((d / "ncu_kernels.json").read_text())["ranges"]}
    p = pts.join(tl.ncu.select("launch_id", "nvtx", "dur_ns"), on="launch_id").with_columns(
        pl.col("nvtx").map_elements(_range, return_dtype=pl.String).alias("range"))
    return {"pts": p, "chart": chart, "ranges": ranges}


@pytest.mark.parametrize("name", ["tp_gemm_bf16", "tp_sdpa_bf16"])
def test_h200_tensor_points_three_references(h200: dict[str, Any], name: str) -> None:
    r = h200["pts"].filter(pl.col("range") == name).row(0, named=True)
    ch = h200["chart"][name]
    sm_hz = ch["Single Precision Achieved Value|SM Frequency"]
    # ncu's chart clock (printed to 0.01 GHz) is the clock the roof is at
    assert abs(r["sm_clock_hz"] / sm_hz - 1) <= 0.01
    rng = h200["ranges"][name]
    shape = op_flops(rng["op"], rng["input_dims"])
    assert shape
    assert abs(r["flop_per_s"] / (shape / (r["dur_ns"] * 1e-9)) - 1) <= TOL
    dense = _datasheet_dense("bf16_tensor", sm_hz)
    assert abs(r["peak_flop_per_s"] / dense - 1) <= TOL, (r["peak_flop_per_s"], dense)
    assert r["flop_per_s"] <= r["peak_flop_per_s"]


@pytest.mark.parametrize("name", ["tp_sdpa_bf16", "tp_layernorm_bf16", "tp_add_bf16"])
def test_h200_fp32_and_dram_match_ncus_chart(h200: dict[str, Any], name: str) -> None:
    """FP32 FLOP/s = (FFMA ops + FADD + FMUL per cycle) x SM frequency, the chart's DRAM
    bandwidth, and the FP32 roof = theoretical FFMA ops per cycle x SM frequency."""
    ch = h200["chart"][name]
    a = "Single Precision Achieved Value|"
    sm_hz = ch[a + "SM Frequency"]
    fp32 = (ch[a + "Predicated-On FFMA Operations Per Cycle"]
            + ch[a + "Predicated-On FADD Thread Instructions Executed Per Cycle"]
            + ch[a + "Predicated-On FMUL Thread Instructions Executed Per Cycle"]) * sm_hz
    roof = ch["Single Precision Roofline|Theoretical Predicated-On FFMA Operations"] * sm_hz
    r = h200["pts"].filter(pl.col("range") == name).row(0, named=True)
    if r["precision"] == "fp32":
        assert abs(r["flop_per_s"] / fp32 - 1) <= TOL, (r["flop_per_s"], fp32)
        assert abs(r["peak_flop_per_s"] / roof - 1) <= TOL, (r["peak_flop_per_s"], roof)
    elif r["precision"].startswith("fp32+"):  # fp32 and fp16 work: one point at the sum
        # (docs/roofline.md), the FP32 part of it ncu's; the time-weighted roof lies between
        # the FP32 roof and the fp16 one (2x on Hopper)
        assert r["flop_per_s"] >= fp32 * (1 - TOL), (r["flop_per_s"], fp32)
        assert roof * (1 - TOL) <= r["peak_flop_per_s"] <= 2 * roof * (1 + TOL)
    else:  # the attention's tensor work dominates; its FP32 work is still ncu's
        assert r["precision"] == "bf16_tensor"
    assert abs(r["dram_bytes_per_s"] / ch[a + "DRAM Bandwidth"] - 1) <= TOL


def test_drawn_tensor_roofs_are_dense_at_the_chart_clock(sweep: dict[str, Any]) -> None:
    """The chart's tensor roofs (one per precision) are the dense peak at the clock their
    label names: the datasheet's dense peak rescaled to that clock, within 5%."""
    ceil = sweep["ceil"]
    for prec in ("tf32_tensor", "bf16_tensor", "fp8_tensor"):
        r = ceil.filter(pl.col("name") == prec).row(0, named=True)
        assert r["source"].startswith("measured"), r
        want = _datasheet_dense(prec, r["clock_hz"])
        assert abs(r["value"] / want - 1) <= TOL, (prec, r["value"], want)
