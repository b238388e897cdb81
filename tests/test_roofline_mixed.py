"""A kernel that works in two precisions is one point at its total FLOPs, against the
time-weighted ceiling ``sum F_p / sum (F_p / peak_p)`` (docs/roofline.md, "A kernel that
works in two precisions").

Before: the point counted only the dominant precision's FLOPs; PyTorch's fp64 dropout on
``leleucas__dropout_nsight162.csv`` read 1.06 GFLOP (fp64) and dropped 0.87 GFLOP of fp32.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceparse
from tests.conftest import TRACES
from tests.ncu_rows import ID, ROW, S
from traceparse.cli.main import main
from traceparse.roofline.build import build
from traceparse.roofline.model import mixed_peak

#: user roofs (taken as given, no clock rescaling): fp64 10, fp32 20 TFLOP/s, DRAM 4 TB/s
ROOFS = {"fp64": 1e13, "fp32": 2e13, "dram": 4e12}


def _page(path: Path) -> Path:
    """Three kernels in the long raw layout (counts per launch; 1 us each):

    * ``drop`` x2: launch 0 dfma 1,000,000 + dmul 500,000 (2.5e6 fp64 FLOPs), ffma 750,000
      (1.5e6 fp32); launch 1 dfma 1,000,000 (2e6 fp64), ffma 250,000 (0.5e6 fp32);
      2,000,000 DRAM bytes each;
    * ``heavy``: dfma 2,000,000 (4e6 fp64), ffma 2,000,000 (4e6 fp32), 1,000 DRAM bytes;
    * ``single``: ffma 1,000,000 (2e6 fp32 only), 1,000,000 DRAM bytes.
    """
    launches = [("drop", 1_000_000, 0, 500_000, 750_000, 2_000_000),
                ("drop", 1_000_000, 0, 0, 250_000, 2_000_000),
                ("heavy", 2_000_000, 0, 0, 2_000_000, 1_000),
                ("single", 0, 0, 0, 1_000_000, 1_000_000)]
    rows = []
    for lid, (name, dfma, dadd, dmul, ffma, dram) in enumerate(launches):
        rows += [ROW.format(lid, name, *r) for r in (
            (S.format("dfma"), "inst", f"{dfma:,}"), (S.format("dadd"), "inst", f"{dadd:,}"),
            (S.format("dmul"), "inst", f"{dmul:,}"), (S.format("ffma"), "inst", f"{ffma:,}"),
            (S.format("fadd"), "inst", "0"), (S.format("fmul"), "inst", "0"),
            ("sm__inst_executed_pipe_tensor.sum", "inst", "0"),
            ("gpu__time_duration.sum", "ns", "1,000"), ("dram__bytes.sum", "byte", f"{dram:,}"))]
    path.write_text(ID + "\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture()
def mixed(tmp_path: Path) -> tuple[Path, Path]:
    roofs = tmp_path / "roofs.json"
    roofs.write_text(json.dumps(ROOFS))
    return _page(tmp_path / "mixed.csv"), roofs


def test_two_precisions_are_one_point_at_their_sum(mixed: tuple[Path, Path]) -> None:
    page, roofs = mixed
    pts, _c, notes = build(traceparse.load(page), ceilings_file=roofs)
    p = {r["kernel_name"]: r for r in pts.iter_rows(named=True)}
    d = p["drop"]
    # FLOPs 2.5e6 + 1.5e6 + 2e6 + 0.5e6 = 6.5e6 in 2 us: 3.25e12 FLOP/s (fp64 2.25e12,
    # fp32 1.0e12); DRAM 4e6 B / 2 us = 2e12 B/s; intensity 3.25e12 / 2e12 = 1.625
    assert d["launches"] == 2 and d["precision"] == "fp64+fp32"
    assert d["flop_per_s"] == pytest.approx(3.25e12)
    assert d["ai_dram"] == pytest.approx(1.625)
    # ceiling 3.25e12 / (2.25e12 / 1e13 + 1.0e12 / 2e13) = 3.25e12 / 0.275 = 11.818e12;
    # ridge 11.818e12 / 4e12 = 2.9545 > 1.625: memory, 3.25e12 / (1.625 * 4e12) = 50 %
    assert d["peak_flop_per_s"] == pytest.approx(3.25e12 / 0.275)
    assert d["ridge"] == pytest.approx(3.25e12 / 0.275 / 4e12)
    assert d["bound"] == "memory" and d["pct_of_roof"] == pytest.approx(50.0)
    assert d["note"].startswith("FLOPs fp64 69% + fp32 31%: one point at their sum")
    h = p["heavy"]
    # 8e6 FLOPs in 1 us = 8e12 FLOP/s (4e12 each); ceiling 8e12 / (0.4 + 0.2) = 13.33e12;
    # intensity 8e12 / 1e9 = 8000: compute, 8 / 13.33 = 60 % (the fp64 FLOPs alone against
    # the fp64 roof read 40 %, with half of the work left out)
    assert h["precision"] == "fp64+fp32" and h["flop_per_s"] == pytest.approx(8e12)
    assert h["peak_flop_per_s"] == pytest.approx(8e12 / 0.6)
    assert h["bound"] == "compute" and h["pct_of_roof"] == pytest.approx(60.0)
    s = p["single"]
    # one precision: unchanged, 2e12 FLOP/s against the fp32 roof, no note
    assert s["precision"] == "fp32" and s["flop_per_s"] == pytest.approx(2e12)
    assert s["peak_flop_per_s"] == 2e13 and s["note"] is None
    # the run's achieved FLOP/s counts every precision: (6.5e6 + 8e6 + 2e6) / 4 us
    assert notes["coverage"]["achieved_flop_per_s"] == pytest.approx(16.5e6 / 4e-6)


def test_by_launch_each_launch_is_its_own_mix(mixed: tuple[Path, Path]) -> None:
    page, roofs = mixed
    pts, _c, _n = build(traceparse.load(page), ceilings_file=roofs, by="launch")
    d = pts.filter(pts["kernel_name"] == "drop").sort("launch_id")
    # launch 0: 4e12 FLOP/s, ceiling 4e12 / (2.5e12/1e13 + 1.5e12/2e13) = 4e12 / 0.325;
    # launch 1: 2.5e12 FLOP/s, ceiling 2.5e12 / (0.2 + 0.025)
    assert d["flop_per_s"].to_list() == pytest.approx([4e12, 2.5e12])
    assert d["peak_flop_per_s"].to_list() == pytest.approx([4e12 / 0.325, 2.5e12 / 0.225])


def test_table_json_and_chart_say_the_same(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    page, roofs = mixed
    run = CliRunner()
    out = tmp_path / "r.json"
    js = run.invoke(main, ["roofline", str(page), "--ceilings", str(roofs), "--format", "json",
                           "-o", str(out)])
    assert js.exit_code == 0, js.output
    d = next(r for r in json.loads(out.read_text()) if r["kernel_name"] == "drop")
    assert d["precision"] == "fp64+fp32" and d["flop_per_s"] == pytest.approx(3.25e12)
    tab = run.invoke(main, ["roofline", str(page), "--ceilings", str(roofs)])
    line = next(ln for ln in tab.output.splitlines() if ln.startswith("drop "))
    assert "fp64+fp32" in line and "3.25 TFLOP/s" in line and "11.8 TFLOP/s" in line
    svg = tmp_path / "r.svg"
    ch = run.invoke(main, ["roofline", str(page), "--ceilings", str(roofs), "-o", str(svg)])
    assert ch.exit_code == 0, ch.output
    text = svg.read_text()
    assert "fp64+fp32, measured (ncu)" in text and "time-weighted roof of a" in text


def test_mixed_peak_needs_every_roof() -> None:
    assert mixed_peak({"fp32": 1.0, "fp16": 1.0}, {"fp32": 2.0, "fp16": None}) is None
    assert mixed_peak({"fp32": 1.0}, {"fp32": 2.0}) == 2.0  # one precision: its own roof


DROPOUT = TRACES / "ncu" / "leleucas__dropout_nsight162.csv"
SOP = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"


def _raw_launches(path: Path) -> dict[str, dict[str, float]]:
    """The long layout read with the csv module: launch ID -> metric -> value."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            try:
                out[r["ID"]][r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
            except ValueError:
                continue
    return out


@pytest.mark.shared
def test_dropout_counts_fp64_and_fp32(tmp_path: Path) -> None:
    if not DROPOUT.is_file():
        pytest.skip(f"no {DROPOUT}")
    raw = _raw_launches(DROPOUT)
    flops = {p: sum(v[SOP.format(p + "add")] + v[SOP.format(p + "mul")]
                    + 2 * v[SOP.format(p + "fma")] for v in raw.values()) for p in "dfh"}
    secs = sum(v["gpu__time_duration.sum"] for v in raw.values()) * 1e-9
    dram = sum(v["dram__bytes.sum"] for v in raw.values())
    total = flops["d"] + flops["f"]
    # 162 launches: 1.062 GFLOP fp64 + 0.873 GFLOP fp32, no fp16; 5.69 ms
    assert len(raw) == 162 and flops["h"] == 0
    assert flops["d"] == pytest.approx(1.062e9, rel=1e-3)
    assert flops["f"] == pytest.approx(0.873e9, rel=1e-3)
    roofs = tmp_path / "a100.json"
    roofs.write_text(json.dumps({"fp64": 9.7e12, "fp32": 19.5e12, "dram": 1.555e12}))
    pts, _c, _n = build(traceparse.load(DROPOUT), ceilings_file=roofs)
    r = pts.row(0, named=True)
    assert pts.height == 1 and r["precision"] == "fp64+fp32" and r["launches"] == 162
    # traceparse weighs each launch's rate (count / its SM-cycle time) by its duration;
    # the two times agree to 1e-5 here
    assert r["flop_per_s"] * r["time_ns"] * 1e-9 == pytest.approx(total, rel=1e-4)
    assert r["flop_per_s"] == pytest.approx(total / secs, rel=1e-4)
    assert r["ai_dram"] == pytest.approx(total / dram, rel=1e-4)
    want = total / (flops["d"] / 9.7e12 + flops["f"] / 19.5e12)
    assert r["peak_flop_per_s"] == pytest.approx(want, rel=1e-4)
    assert r["pct_of_roof"] == pytest.approx(
        100 * (total / secs) / min(want, total / dram * 1.555e12), rel=1e-4)
    assert r["bound"] == "memory"


def _fp16_page(path: Path) -> Path:
    """Non-tensor fp16 work next to fp32 (1 us per launch; FLOPs = 2 x fma):

    * ``half_mem``: hfma 1,000,000 (2e6 fp16), ffma 1,000,000 (2e6 fp32), 2,000,000 DRAM
      bytes: 4e12 FLOP/s, 2e12 B/s, intensity 2;
    * ``half_tiny``: hfma 1,000 + ffma 1,000 (4e9 FLOP/s), 1,000 DRAM bytes (1e9 B/s);
    * ``half_dense``: hfma 5,000,000 (1e7 fp16), 1,000 DRAM bytes: 1e13 FLOP/s, AI 10,000.
    """
    launches = [("half_mem", 1_000_000, 1_000_000, 2_000_000),
                ("half_tiny", 1_000, 1_000, 1_000),
                ("half_dense", 5_000_000, 0, 1_000)]
    rows = []
    for lid, (name, hfma, ffma, dram) in enumerate(launches):
        rows += [ROW.format(lid, name, *r) for r in (
            (S.format("hfma"), "inst", f"{hfma:,}"), (S.format("hadd"), "inst", "0"),
            (S.format("hmul"), "inst", "0"), (S.format("ffma"), "inst", f"{ffma:,}"),
            (S.format("fadd"), "inst", "0"), (S.format("fmul"), "inst", "0"),
            ("sm__inst_executed_pipe_tensor.sum", "inst", "0"),
            ("gpu__time_duration.sum", "ns", "1,000"), ("dram__bytes.sum", "byte", f"{dram:,}"))]
    path.write_text(ID + "\n" + "\n".join(rows) + "\n")
    return path


def test_unknown_fp16_roof_is_floored_at_the_fp32_roof(tmp_path: Path) -> None:
    # roofs without a non-tensor fp16 one: fp32 20 TFLOP/s, DRAM 4 TB/s
    roofs = tmp_path / "roofs.json"
    roofs.write_text(json.dumps({"fp32": 2e13, "dram": 4e12}))
    pts, _c, _n = build(traceparse.load(_fp16_page(tmp_path / "h.csv")), ceilings_file=roofs)
    p = {r["kernel_name"]: r for r in pts.iter_rows(named=True)}
    m = p["half_mem"]
    # the ceiling is unknown (no fp16 roof), but at least 4e12 / (2e12/2e13 + 2e12/2e13)
    # = 2e13 (fp16 at the fp32 roof); the DRAM roof at intensity 2 is 8e12 < 2e13, so the
    # kernel is held by memory at any ceiling: memory, 4e12 / 8e12 = 50 % (exact)
    assert m["precision"] in ("fp16+fp32", "fp32+fp16") and m["peak_flop_per_s"] is None
    assert m["bound"] == "memory" and m["pct_of_roof"] == pytest.approx(50.0)
    assert "the fp32 roof is its floor" in m["note"]
    t = p["half_tiny"]
    # 4e9 FLOP/s < 5 % of the 2e13 floor and 1e9 B/s < 5 % of 4e12: latency at any
    # ceiling; its DRAM roof (AI 4 x 4e12 = 1.6e13) lies under the floor: 4e9/1.6e13
    assert t["bound"] == "latency" and t["pct_of_roof"] == pytest.approx(0.025)
    d = p["half_dense"]
    # pure fp16, AI 1e13 / 1e9 = 10,000: the DRAM roof (4e16) is above the floor and
    # 1e13 FLOP/s is 50 % of it: the unknown fp16 roof decides, so nothing is claimed
    # (before, % of roof was quoted against the DRAM roof alone: 0.025 %)
    assert d["precision"] == "fp16" and d["bound"] is None and d["pct_of_roof"] is None
