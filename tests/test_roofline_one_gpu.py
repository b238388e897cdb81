"""One GPU per chart, also when inputs of two GPUs are analysed together (``--as-one-job``).

Before: ``roofline --as-one-job rsmall__sgemm.raw.csv cs599k__rmsnorm..raw.csv`` drew the
H800 SGEMM on the H100 PCIe chart against the H100's DRAM roof (2,039 GB/s instead of the
H800's 4,914: ridge 24.9 instead of 10.3), with ceilings the medians over both GPUs' launches;
a V100 ResNet-50 trace with an A100 AlexNet trace put the A100 ops under V100 roofs.
Now the launches (ranks) of the other GPU are listed, not placed, and a warning says so.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from tests.ncu_rows import ID, ROW, S
from traceparse.reports.payload import combine
from traceparse.roofline.build import build


def _page(path: Path, gpu: str, kernel: str, launches: int) -> Path:
    rows = []
    for lid in range(launches):
        rows += [ROW.format(lid, kernel, *r) for r in (
            ("device__attribute_display_name", "", gpu), (S.format("fadd"), "inst", "0"),
            (S.format("fmul"), "inst", "0"), (S.format("ffma"), "inst", "1,000,000"),
            ("sm__inst_executed_pipe_tensor.sum", "inst", "0"),
            ("gpu__time_duration.sum", "ns", "1,000"), ("dram__bytes.sum", "byte", "1,000,000"))]
    path.write_text(ID + "\n" + "\n".join(rows) + "\n")
    return path


def test_launches_of_another_gpu_are_listed_not_placed(tmp_path: Path) -> None:
    a = traceparse.load(_page(tmp_path / "a.csv", "NVIDIA H100 PCIe", "on_h100", 2))
    b = traceparse.load(_page(tmp_path / "b.csv", "NVIDIA H800", "on_h800", 1))
    roofs = tmp_path / "roofs.json"
    roofs.write_text(json.dumps({"fp32": 1e13, "dram": 2e12}))
    pts, _c, notes = build(combine([a, b]), ceilings_file=roofs)
    p = {r["kernel_name"]: r for r in pts.iter_rows(named=True)}
    # the chart's GPU is the one with most launches (2 of 3): H100 PCIe; its point:
    # 2 x 1e6 FLOPs / 1e-6 s = 2e12 FLOP/s, 1e12 B/s, intensity 2 < ridge 1e13/2e12 = 5
    assert p["on_h100"]["placed"] and p["on_h100"]["bound"] == "memory"
    assert p["on_h100"]["peak_dram_bytes_per_s"] == 2e12
    h800 = p["on_h800"]
    assert not h800["placed"] and h800["flop_per_s"] == pytest.approx(2e12)  # measured: kept
    assert h800["peak_flop_per_s"] is None and h800["bound"] is None
    assert h800["note"].startswith("ran on NVIDIA H800, not on NVIDIA H100 PCIe")
    assert "several GPUs" in notes["gpu_mismatch"] and "H100 PCIe only" in notes["gpu_mismatch"]


NCU = TRACES / "ncu"


def _dram_roofs(path: Path) -> list[float]:
    """dram__bytes.sum.peak_sustained x dram__cycles_elapsed.avg.per_second per launch, from
    the raw page's own columns (units as printed: Kbyte/cycle, cycle/nsecond)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head, unit = rows[0], rows[1]
    i, j = head.index("dram__bytes.sum.peak_sustained"), \
        head.index("dram__cycles_elapsed.avg.per_second")
    assert (unit[i], unit[j]) == ("Kbyte/cycle", "cycle/nsecond")
    return [float(r[i]) * 1e3 * float(r[j]) * 1e9 for r in rows[2:]]


@pytest.mark.shared
def test_h800_sgemm_is_not_judged_by_the_h100_roofs() -> None:
    h800, h100 = NCU / "rsmall__sgemm.raw.csv", NCU / "cs599k__rmsnorm_matrix_v2-float4.raw.csv"
    both, _c, notes = build(combine([traceparse.load(h800), traceparse.load(h100)]))
    alone, _c, _n = build(traceparse.load(h100))
    on = both.filter(pl.col("placed"))
    assert on.to_dicts() == alone.to_dicts()  # the H100 chart is the H100 file's own
    assert on["peak_dram_bytes_per_s"][0] == pytest.approx(statistics.median(_dram_roofs(h100)),
                                                           rel=1e-6)
    sgemm = both.filter(pl.col("kernel_name").str.starts_with("void gemm_device")).row(
        0, named=True)
    assert not sgemm["placed"] and sgemm["peak_dram_bytes_per_s"] is None
    assert sgemm["note"].startswith("ran on NVIDIA H800, not on NVIDIA H100 PCIe")
    assert "NVIDIA H100 PCIe (4 launches), NVIDIA H800 (1 launch)" in notes["gpu_mismatch"]


@pytest.mark.shared
def test_a100_ranks_are_left_out_of_a_v100_chart() -> None:
    t = TRACES / "torch"
    v100 = traceparse.load(t / "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz")
    a100 = traceparse.load(t / "hta__alexnet_benchmark_trace.json.gz")
    both, _c, notes = build(combine([v100, a100]))
    alone, _c, _n = build(v100)
    assert both.to_dicts() == alone.to_dicts()
    assert notes["gpu_mismatch"].startswith("the inputs ran on several GPUs: the roofline "
                                            "shows Tesla V100-DGXS-32GB only")
    assert "rank 1 ran on NVIDIA A100-PG509-200 and is left out" in notes["gpu_mismatch"]


def test_rocm_devices_named_generically_are_one_gpu() -> None:
    """ROCm traces name their devices "" (FORMATS C): each is identified from GFXIP 9.4,
    304 CUs and 192 GiB as an MI300X, the chart's GPU, so no rank is left out (the vLLM
    MI300X capture lost its only rank to a name comparison of "" with "MI300X")."""
    from traceparse.roofline.build import other_gpu_ranks
    from traceparse.timeline import Timeline

    devices = pl.DataFrame({"rank": [0, 0], "device_id": [0, 1], "name": ["", ""],
                            "vendor": ["amd", "amd"], "sm_count": [304, 304],
                            "memory_bytes": [206_141_652_992] * 2, "compute_major": [9, 9],
                            "compute_minor": [4, 4]},
                           schema_overrides={"rank": pl.Int32, "device_id": pl.Int32})
    gpu = pl.DataFrame({"rank": [0, 0], "device_id": [0, 1]},
                       schema_overrides={"rank": pl.Int32, "device_id": pl.Int32})
    assert other_gpu_ranks(Timeline(gpu=gpu, devices=devices), "MI300X") == ([], None)
