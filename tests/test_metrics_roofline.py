"""Roofline of nsys-only traces with GPU metrics: bandwidth-only points (DRAM bytes, no FLOPs)
and ceilings at the measured GPC clock; throttling in summary and report.

Generated exports (tests/nsys_extra.py: an H100 80GB HBM3, 132 SMs, listed clock 1,980 MHz,
memoryBandwidth PEAK_BW) with expectations worked out by hand, and resest__report2.sqlite
(RTX 3090, 10 kHz GPU metrics) against SQL written here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import TRACES
from tests.nsys_extra import KERNEL_SAMPLES_SQL, PEAK_BW, add_metrics, write_base
from traceparse.cli import main
from traceparse.nsys.reader import read
from traceparse.roofline.build import METRICS_CLOCK, build
from traceparse.roofline.chart import title_for
from traceparse.roofline.metrics_points import BANDWIDTH_ONLY

RESEST = TRACES / "nsys" / "resest__report2.sqlite"


def _export(tmp_path: Path, clock: list[int]) -> Path:
    """One kernel 'gemm' on [1150, 1350) ns; samples every 100 ns from 1000 ns:
    DRAM read 10, 20, 30, 40, 50 %; GPC clock ``clock`` (Hz)."""
    p = write_base(tmp_path / "m.sqlite", [("gemm", 1_150, 1_350)])
    t = [1_000 + 100 * i for i in range(5)]
    add_metrics(p, {"DRAM Read Throughput": list(zip(t, [10, 20, 30, 40, 50], strict=True)),
                    "GPC Clock Frequency": list(zip(t, clock, strict=True))})
    return p


THROTTLED = [1_500_000_000, 1_500_000_000, 1_200_000_000, 1_200_000_000, 1_500_000_000]


def test_bandwidth_only_points_and_clock_scaled_ceilings(tmp_path: Path) -> None:
    tl = read(_export(tmp_path, THROTTLED))
    points, ceil, notes = build(tl)
    # clock over [1150, 1350): 50 ns at 1.5 GHz, 100 ns at 1.2, 50 ns at 1.2 -> 1.275 GHz
    clk = (50 * 1.5e9 + 100 * 1.2e9 + 50 * 1.2e9) / 200
    assert clk == 1.275e9
    assert notes["sm_clock_hz"] == pytest.approx(clk)
    assert notes["clock_source"] == METRICS_CLOCK
    roof = dict(zip(ceil["name"], ceil["value"], strict=True))
    # H100 SXM datasheet: FP32 67 TFLOP/s at 1,980 MHz, BF16 dense 989.4 at 1,830 MHz
    assert roof["fp32"] == pytest.approx(67e12 * 1.275 / 1.98)
    assert roof["bf16_tensor"] == pytest.approx(989.4e12 * 1.275 / 1.83)
    assert roof["dram"] == 3.35e12  # memory roof: no SM clock in it
    assert set(ceil.filter(pl.col("kind") == "compute")["clock_hz"]) == {clk}
    # one point: 30 % of PEAK_BW over the kernel (20/30/40 % for 50/100/50 ns)
    assert points.height == 1
    r = points.row(0, named=True)
    assert r["placed"] is True and r["note"] == BANDWIDTH_ONLY
    assert r["provenance"] == "measured (nsys GPU metrics, sampled at 10 MHz)"
    assert r["dram_bytes_per_s"] == pytest.approx(0.30 * PEAK_BW)
    # bounds (see tests/test_gpu_metrics.py): lo = 0.3 P x 100 ns - q, hi = 0.9 P x 100 ns + q
    # with q = 0.5 % x P x 200 ns; per second over the 200 ns kernel
    q = 0.005 * PEAK_BW * 200e-9
    assert r["dram_bytes_per_s_lo"] == pytest.approx((0.3 * PEAK_BW * 100e-9 - q) / 200e-9)
    assert r["dram_bytes_per_s_hi"] == pytest.approx((0.9 * PEAK_BW * 100e-9 + q) / 200e-9)
    assert r["flop_per_s"] is None and r["bound"] is None and r["precision"] is None
    c = notes["coverage"]
    assert (c["total_ns"], c["measured_ns"], c["bandwidth_only_ns"], c["not_placed_ns"]) == \
        (200.0, 200.0, 200.0, 0.0)
    assert c["bound_ns"]["unknown"] == 200.0 and c["mfu"] is None


def test_cli_chart_title_and_coverage(tmp_path: Path) -> None:
    p = _export(tmp_path, THROTTLED)
    out = tmp_path / "r.svg"
    res = CliRunner().invoke(main, ["roofline", str(p), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<?xml")
    assert "measured 100.0%" in res.output and "(bandwidth-only 100.0%" in res.output
    _, _, notes = build(read(p))
    assert title_for(notes["ceiling_table_row"], notes["sm_clock_hz"],
                     clock_source=notes["clock_source"]) == (
        "Roofline: H100 SXM5 80GB @ 1,275 MHz SM clock (nsys GPU metrics GPC clock over the "
        "kernels)")


def test_throttling_in_summary_and_report(tmp_path: Path) -> None:
    p = _export(tmp_path, THROTTLED)
    res = CliRunner().invoke(main, ["summary", str(p)])
    assert res.exit_code == 0, res.output
    # 1.275 / 1.98 = 0.644; ceilings at the listed clock 1.98 / 1.275 - 1 = 55 % too high
    assert ("SM clock 1,275 MHz during kernels (nsys GPU metrics, time-weighted) = 0.64x the "
            "listed 1,980 MHz: THROTTLED") in res.output
    assert "are 55% too high for this run" in res.output
    html = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(p), "-o", str(html)])
    assert res.exit_code == 0, res.output
    text = html.read_text()
    line = "0.64x the listed 1,980 MHz: THROTTLED"
    assert 'id="gpu-clock"><strong>Clock:</strong> rank 0 GPU 0: SM clock 1,275 MHz' in text
    assert "<strong>Ceiling clock:</strong> rank 0 GPU 0: SM clock 1,275 MHz" in text
    assert text.count(line) >= 2


def test_no_throttling_when_boosted(tmp_path: Path) -> None:
    tl = read(_export(tmp_path, [2_000_000_000] * 5))
    _, ceil, notes = build(tl)
    assert notes["sm_clock_hz"] == 2.0e9
    roof = dict(zip(ceil["name"], ceil["value"], strict=True))
    assert roof["fp32"] == pytest.approx(67e12 * 2.0 / 1.98)
    res = CliRunner().invoke(main, ["summary", str(tmp_path / "m.sqlite")])
    assert "1.01x the listed 1,980 MHz: no throttling (boosted above the listed clock)" \
        in res.output


def test_user_ceilings_not_rescaled(tmp_path: Path) -> None:
    p = _export(tmp_path, THROTTLED)
    f = tmp_path / "c.json"
    f.write_text('{"fp32": 5.0e13}')
    _, ceil, _ = build(read(p), ceilings_file=f)
    assert dict(zip(ceil["name"], ceil["value"], strict=True))["fp32"] == 5.0e13


# ------------------------------------------------------------------ real trace
def _sql(con: sqlite3.Connection, metric: str) -> list[tuple[str, float, float, float]]:
    """Per kernel launch: name, duration, integral of ``metric`` x ns over it, covered ns."""
    sql = KERNEL_SAMPLES_SQL + """
    SELECT k.name, k.ke - k.ks,
           SUM(s.v * (MIN(k.ke, s.t1) - MAX(k.ks, s.t0))) * 1.0,
           SUM(MIN(k.ke, s.t1) - MAX(k.ks, s.t0)) * 1.0
    FROM k JOIN s ON s.t0 < k.ke AND s.t1 > k.ks
    GROUP BY k.ks, k.ke, k.name"""
    return [(str(a), float(b), float(c), float(d)) for a, b, c, d in
            con.execute(sql, (metric,))]


@pytest.mark.shared
def test_resest_roofline_against_sql() -> None:
    con = sqlite3.connect(f"file:{RESEST}?mode=ro", uri=True)
    try:
        clk = _sql(con, "GPC Clock Frequency")
        rd, wr = _sql(con, "DRAM Read Throughput"), _sql(con, "DRAM Write Throughput")
        bw = float(con.execute("SELECT memoryBandwidth FROM TARGET_INFO_GPU").fetchone()[0])
        listed = float(con.execute("SELECT clockRate FROM TARGET_INFO_GPU").fetchone()[0])
        kernel_ns = float(con.execute(
            'SELECT SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0])
    finally:
        con.close()
    points, ceil, notes = build(read(RESEST))
    # clock: time-weighted over all 4 launches
    mean_clk = sum(r[2] for r in clk) / sum(r[3] for r in clk)
    assert len(clk) == 4 and 1.9e9 < mean_clk < 2.0e9
    assert notes["sm_clock_hz"] == pytest.approx(mean_clk, rel=1e-9)
    roof = dict(zip(ceil["name"], ceil["value"], strict=True))
    # RTX 3090 datasheet FP32 35.6 TFLOP/s at the 1,695 MHz boost clock (= clockRate, Hz)
    assert listed == 1_695_000_000
    assert roof["fp32"] == pytest.approx(35.6e12 * mean_clk / 1.695e9, rel=1e-9)
    # DRAM B/s per kernel name = (read + write) % x memoryBandwidth over its launches' time
    per: dict[str, list[float]] = {}
    for (name, dur, r_int, _), (_, _, w_int, _) in zip(sorted(rd), sorted(wr), strict=True):
        acc = per.setdefault(name, [0.0, 0.0])
        acc[0] += (r_int + w_int) / 100.0 * bw * 1e-9  # bytes
        acc[1] += dur
    assert points.height == len(per) == 3
    for r in points.iter_rows(named=True):
        b, ns = per[r["kernel_name"]]
        assert r["time_ns"] == ns
        assert r["dram_bytes_per_s"] == pytest.approx(b / (ns * 1e-9), rel=1e-9)
        assert r["dram_bytes_per_s_lo"] <= r["dram_bytes_per_s"] <= r["dram_bytes_per_s_hi"]
        assert r["placed"] and r["flop_per_s"] is None
    c = notes["coverage"]
    assert c["total_ns"] == kernel_ns == c["measured_ns"] == c["bandwidth_only_ns"]


@pytest.mark.shared
def test_resest_chart_png(tmp_path: Path) -> None:
    out = tmp_path / "resest.png"
    res = CliRunner().invoke(main, ["roofline", str(RESEST), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "measured 100.0%" in res.output and "(bandwidth-only 100.0%" in res.output


def test_unknown_gpu_keeps_points_without_a_clock_claim(tmp_path: Path) -> None:
    """No ceiling table row (the device renamed): the DRAM point stays, no roof claims the
    measured clock."""
    p = _export(tmp_path, THROTTLED)
    with sqlite3.connect(p) as db:
        db.execute("UPDATE TARGET_INFO_GPU SET name = 'Mystery GPU', smCount = 7")
    db.close()
    points, ceil, notes = build(read(p))
    assert ceil.filter(pl.col("kind") == "compute").height == 0
    assert "clock_source" not in notes and notes["sm_clock_hz"] is None
    assert points.height == 1 and points["placed"].to_list() == [True]
    assert points["dram_bytes_per_s"][0] == pytest.approx(0.30 * PEAK_BW)
