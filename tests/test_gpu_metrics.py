"""GPU metrics: nsys GPU_METRICS ingest (schema variants) and per-kernel time-weighted means.

Real trace: resest__report2.sqlite (nsys 2024.2.3, RTX 3090, 18 metrics at 10 kHz), checked
against an SQL average written here independently of the code.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from tests.nsys_extra import KERNEL_SAMPLES_SQL, PEAK_BW, TYPE_ID, add_metrics, write_base
from traceparse.analyses import metrics as M
from traceparse.nsys.metrics import split_unit
from traceparse.nsys.reader import read

RESEST = TRACES / "nsys" / "resest__report2.sqlite"


# ------------------------------------------------------------------ generated variants
def _export(tmp_path: Path, variant: str = "2024", **kw: object) -> Path:
    # one kernel [150, 350) us-free units: ns on the trace clock
    p = write_base(tmp_path / f"{variant}.sqlite", [("gemm", 1_150, 1_350)])
    # samples every 100 ns from 1000: 10, 20, 30, 40, 50 %
    pts = [(1_000 + 100 * i, 10 * (i + 1)) for i in range(5)]
    add_metrics(p, {"SM Active": pts, "DRAM Read Throughput": pts}, variant=variant, **kw)
    return p


@pytest.mark.parametrize("variant", ["2024", "no_type", "names_no_type"])
def test_variants_time_weighted_mean(tmp_path: Path, variant: str) -> None:
    tl = read(_export(tmp_path, variant))
    assert tl.metrics.height == 10
    assert set(tl.metrics["metric"].cast(pl.String)) == {"SM Active", "DRAM Read Throughput"}
    # last sample gets the median period (100 ns)
    last = tl.metrics.filter(pl.col("start_ns") == 1_400)
    assert last["end_ns"].to_list() == [1_500, 1_500]
    k = M.kernel_metrics(tl)
    # [1150, 1350): 50 ns of 20, 100 ns of 30, 50 ns of 40 -> (1000 + 3000 + 2000) / 200 = 30
    assert k["sm_active_pct"].to_list() == [pytest.approx(30.0)]
    assert k["covered_ns"].to_list() == [200.0]
    # DRAM bytes: 30 % of peak for 200 ns; bounds from the two half-covered samples
    est = 0.30 * PEAK_BW * 200e-9
    assert k["dram_bytes"][0] == pytest.approx(est)
    # lo: sample 1100-1200 (20 %, 50 ns inside) -> max(0, 0.2*P*100 - P*50) = 0;
    #     sample 1300-1400 (40 %) -> 0; full sample 1200-1300 -> 0.3*P*100ns
    # hi: min(0.2*P*100, P*50) + 0.3*P*100 + min(0.4*P*100, P*50); quantisation 0.5 % * P * 200
    p_ns = PEAK_BW * 1e-9
    q = 0.005 * p_ns * 200
    assert k["dram_bytes_lo"][0] == pytest.approx(0.3 * p_ns * 100 - q)
    assert k["dram_bytes_hi"][0] == pytest.approx((20 + 30 + 40) * p_ns + q)
    ing = tl.ingest.filter(pl.col("source") == "GPU_METRICS")
    assert ing["count"].sum() == 10


def test_variant_without_names_is_accounted(tmp_path: Path) -> None:
    tl = read(_export(tmp_path, "no_names"))
    assert tl.metrics.height == 0
    ing = tl.ingest.filter(pl.col("source") == "GPU_METRICS")
    assert ing.filter(pl.col("outcome") == "skipped")["count"].to_list() == [10]
    assert "TARGET_INFO_GPU_METRICS" in ing["reason"].drop_nulls()[0]


def test_variant_bracket_units_and_two_gpus(tmp_path: Path) -> None:
    p = write_base(tmp_path / "b.sqlite", [("gemm", 1_000, 1_100)])
    pts = [(1_000, 1500), (1_100, 1400)]
    add_metrics(p, {"GPC Clock Frequency [MHz]": pts, "SM Active [Throughput %]": pts},
                type_ids=(TYPE_ID, TYPE_ID + 1), type_names=("GPU 0", "GPU 1"))
    tl = read(p)
    m = tl.metrics.with_columns(pl.col("metric", "unit").cast(pl.String))
    clock = m.filter((pl.col("metric") == "GPC Clock Frequency") & (pl.col("device_id") == 1))
    assert clock["unit"].to_list() == ["Hz", "Hz"]
    assert clock["value"].to_list() == [1.5e9, 1.4e9]
    assert set(m["device_id"].to_list()) == {0, 1}
    assert set(m.filter(pl.col("metric") == "SM Active")["unit"].to_list()) == {"%"}


def test_a_mhz_tagged_clock_written_in_hz_stays_in_hz(tmp_path: Path) -> None:
    """nsys 2025.3 writes 1.98e9 under 'GPC Clock Frequency [MHz]': 1.98e15 Hz would be no
    GPU's clock, so the samples are taken as Hz; a tagged clock in MHz is still converted."""
    p = write_base(tmp_path / "hz.sqlite", [("gemm", 1_000, 1_100)])
    add_metrics(p, {"GPC Clock Frequency [MHz]": [(1_000, 1_980_004_750), (1_100, 1_873_434_750)],
                    "SYS Clock Frequency [MHz]": [(1_000, 1665), (1_100, 1659)]})
    m = read(p).metrics.with_columns(pl.col("metric").cast(pl.String))
    gpc = m.filter(pl.col("metric") == "GPC Clock Frequency")["value"].to_list()
    sys_ = m.filter(pl.col("metric") == "SYS Clock Frequency")["value"].to_list()
    assert gpc == [1_980_004_750.0, 1_873_434_750.0]
    assert sys_ == [1.665e9, 1.659e9]


def test_h100_nsys_capture_clock_is_its_listed_boost() -> None:
    """The H100 warm-up scenario under nsys 2025.3 (GPU metrics at 2 kHz): the SM clock
    during kernels is the H100's 1,980 MHz boost, not a million times it."""
    cap = (Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures"
           / "scenarios_nsys" / "warmup-bottleneck.sqlite.gz")
    tl = traceparse.load(cap)
    m = tl.metrics.filter(pl.col("metric").cast(pl.String) == "GPC Clock Frequency")
    assert 1.8e9 <= float(m["value"].median()) <= 2.0e9  # type: ignore[arg-type]
    (line,) = M.clock_lines(tl)
    assert line.startswith("rank 0 GPU 0: SM clock 1,976 MHz during kernels"), line
    assert "= 1.00x the listed 1,980 MHz" in line, line


def test_variant_two_views_of_one_counter_and_old_names(tmp_path: Path) -> None:
    """'[Throughput %]' and '[Avg]' views of one counter stay two metrics; the older
    'SMs Active' name feeds the SM-active column."""
    p = write_base(tmp_path / "v.sqlite", [("gemm", 1_000, 1_200)])
    pts = [(1_000, 40), (1_100, 60)]
    add_metrics(p, {"Compute Warps in Flight [Throughput %]": pts,
                    "Compute Warps in Flight [Avg]": [(1_000, 3), (1_100, 5)],
                    "SMs Active": pts})
    tl = read(p)
    m = tl.metrics.with_columns(pl.col("metric", "unit").cast(pl.String))
    got = {(r["metric"], r["unit"]) for r in m.select("metric", "unit").unique().to_dicts()}
    assert got == {("Compute Warps in Flight", "%"),
                   ("Compute Warps in Flight [Avg]", "Avg"), ("SMs Active", "%")}
    assert M.kernel_metrics(tl)["sm_active_pct"].to_list() == [pytest.approx(50.0)]


def test_split_unit() -> None:
    assert split_unit("DRAM Read Bandwidth [Throughput %]") == ("DRAM Read Bandwidth", "%", 1.0)
    assert split_unit("PCIe Read Requests to BAR1") == ("PCIe Read Requests to BAR1", "count",
                                                        1.0)
    assert split_unit("SYS Clock Frequency [GHz]") == ("SYS Clock Frequency", "Hz", 1e9)


# ------------------------------------------------------------------ real trace
def _sql_means(path: Path, metric: str) -> dict[str, float]:
    """Independent time-weighted mean of ``metric`` per kernel name, in SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sql = KERNEL_SAMPLES_SQL + """
    SELECT k.name,
           SUM(s.v * (MIN(k.ke, s.t1) - MAX(k.ks, s.t0))) * 1.0
             / SUM(MIN(k.ke, s.t1) - MAX(k.ks, s.t0))
    FROM k JOIN s ON s.t0 < k.ke AND s.t1 > k.ks
    GROUP BY k.name"""
    try:
        return {n: float(v) for n, v in con.execute(sql, (metric,))}
    finally:
        con.close()


@pytest.mark.shared
def test_resest_kernel_means_match_sql() -> None:
    tl = read(RESEST)
    k = M.kernel_metrics(tl)
    assert k.height == 3  # 4 launches of 3 kernel names
    con = sqlite3.connect(f"file:{RESEST}?mode=ro", uri=True)
    n_samples = con.execute("SELECT COUNT(*) FROM GPU_METRICS").fetchone()[0]
    n_metrics = con.execute("SELECT COUNT(*) FROM TARGET_INFO_GPU_METRICS").fetchone()[0]
    con.close()
    assert n_samples == 109_620 and n_metrics == 18
    ing = tl.ingest.filter(pl.col("source") == "GPU_METRICS")
    assert ing["count"].sum() == n_samples
    assert tl.metrics["metric"].n_unique() == n_metrics
    assert M.sample_rate_hz(tl.metrics) == pytest.approx(10_000, rel=1e-3)
    from traceparse.roofline.metrics_points import provenance
    assert provenance(tl) == "measured (nsys GPU metrics, sampled at 10 kHz)"
    for col, metric in (("sm_active_pct", "SM Active"), ("tensor_active_pct", "Tensor Active"),
                        ("dram_read_pct", "DRAM Read Throughput"),
                        ("gpc_clock_hz", "GPC Clock Frequency")):
        want = _sql_means(RESEST, metric)
        got = dict(zip(k["name"].to_list(), k[col].to_list(), strict=True))
        assert got.keys() == want.keys()
        for name, v in want.items():
            assert got[name] == pytest.approx(v, rel=1e-9), (col, name)


@pytest.mark.shared
def test_resest_dram_bytes_bounds_hold() -> None:
    tl = read(RESEST)
    k = M.kernel_metrics(tl)
    assert (k["dram_bytes_lo"] <= k["dram_bytes"]).all()
    assert (k["dram_bytes"] <= k["dram_bytes_hi"]).all()
    # the 157 us seed kernel spans ~2 samples fully: its bounds are tighter than a 3-7 us one's
    seed = k.filter(pl.col("total_ns") == k["total_ns"].max())
    rel = (seed["dram_bytes_hi"] - seed["dram_bytes_lo"]) / seed["dram_bytes"]
    short = k.filter(pl.col("total_ns") == k["total_ns"].min())
    rel_short = (short["dram_bytes_hi"] - short["dram_bytes_lo"]) / short["dram_bytes"]
    assert rel[0] < rel_short[0]


@pytest.mark.shared
def test_resest_untraced_activity_matches_sql() -> None:
    """SM Active over the stretches between the trace's kernels (its 'idle' time), in SQL."""
    con = sqlite3.connect(f"file:{RESEST}?mode=ro", uri=True)
    ks = con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start')\
        .fetchall()
    gaps = [(a[1], b[0]) for a, b in itertools.pairwise(ks) if b[0] > a[1]]
    sql = """
    WITH s AS (SELECT g.timestamp AS t0,
                 LEAD(g.timestamp) OVER (ORDER BY g.timestamp) AS t1, g.value AS v
               FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n
                 ON n.typeId = g.typeId AND n.metricId = g.metricId
               WHERE n.metricName = 'SM Active')
    SELECT SUM(v * (MIN(?2, t1) - MAX(?1, t0))), SUM(MIN(?2, t1) - MAX(?1, t0))
    FROM s WHERE t0 < ?2 AND t1 > ?1"""
    num = den = 0.0
    for a, b in gaps:
        x, y = con.execute(sql, (a, b)).fetchone()
        num, den = num + x, den + y
    con.close()
    ua = M.untraced_activity(read(RESEST))
    assert ua["idle_ns"].to_list() == [sum(b - a for a, b in gaps)]
    assert ua["mean"][0] == pytest.approx(num / den, rel=1e-9)
    assert ua["mean"][0] > 90  # the GPU was busy while the trace shows it idle
    assert "SM Active" in (M.idle_caveat(read(RESEST)) or "")


def test_no_caveat_when_idle_hardware_is_idle(tmp_path: Path) -> None:
    p = write_base(tmp_path / "idle.sqlite", [("a", 1_000, 1_100), ("b", 1_300, 1_400)])
    # SM Active 80 % inside the kernels, 0 % in the 200 ns between them
    add_metrics(p, {"SM Active": [(1_000, 80), (1_100, 0), (1_200, 0), (1_300, 80)]})
    tl = read(p)
    ua = M.untraced_activity(tl)
    assert ua["idle_ns"].to_list() == [200] and ua["mean"].to_list() == [0.0]
    assert M.idle_caveat(tl) is None


def test_metrics_roofline_points(tmp_path: Path) -> None:
    from traceparse.roofline.metrics_points import metrics_points

    tl = read(_export(tmp_path))
    ceil = pl.DataFrame({"name": ["fp32", "dram"], "value": [60e12, 3.35232e12]})
    pts = metrics_points(tl, ceil)
    r = pts.row(0, named=True)
    assert r["provenance"] == "measured (nsys GPU metrics, sampled at 10 MHz)"  # 100 ns
    # 30 % of peak over the kernel (see test_variants_time_weighted_mean)
    assert r["dram_bytes_per_s"] == pytest.approx(0.30 * PEAK_BW)
    assert r["dram_pct_of_peak"] == pytest.approx(30.0)
    assert r["dram_bytes_per_s_lo"] <= r["dram_bytes_per_s"] <= r["dram_bytes_per_s_hi"]
    assert r["flop_per_s"] is None and r["bound"] is None
    # with FLOPs: 2e6 FLOP in 200 ns = 1e13 FLOP/s; AI = 1e13 / (0.3 * P)
    pts = metrics_points(tl, ceil, flops=pl.DataFrame({"kernel_name": ["gemm"],
                                                       "flops": [2e6]}))
    r = pts.row(0, named=True)
    assert r["flop_per_s"] == pytest.approx(1e13)
    assert r["ai_dram"] == pytest.approx(1e13 / (0.30 * PEAK_BW))
    assert r["bound"] == "memory"  # AI ~9.9 < ridge 60e12 / 3.35e12 ~ 17.9


def test_window_and_range_metrics(tmp_path: Path) -> None:
    from traceparse import schema
    from traceparse.timeline import Timeline

    tl = read(_export(tmp_path))  # SM Active 10..50 % on [1000, 1500) in 100 ns samples
    rng = [("nvtx_push_pop", "fwd", 1_000, 1_200), ("nvtx_push_pop", "fwd", 1_400, 1_500),
           ("nvtx_push_pop", "bwd", 1_250, 1_350)]
    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0] * 3, "kind": [r[0] for r in rng], "name": [r[1] for r in rng],
        "start_ns": [r[2] for r in rng], "end_ns": [r[3] for r in rng],
        "dur_ns": [r[3] - r[2] for r in rng]}))
    tl = Timeline(**{**tl.tables(), "ranges": ranges}, meta=tl.meta).validate()
    rm = {r["name"]: r for r in M.range_metrics(tl).iter_rows(named=True)}
    # fwd: 100 ns of 10 + 100 ns of 20 + 100 ns of 50 -> 80 / 3 = 26.67
    assert rm["fwd"]["sm_active_pct"] == pytest.approx(80 / 3)
    assert rm["fwd"]["instances"] == 2 and rm["fwd"]["total_ns"] == 300
    # bwd [1250, 1350): 50 ns of 30 + 50 ns of 40 -> 35
    assert rm["bwd"]["sm_active_pct"] == pytest.approx(35.0)
    wm = M.window_metrics(tl, pl.DataFrame({"rank": [0, 0], "start_ns": [1_000, 1_300],
                                            "end_ns": [1_100, 1_500], "step": ["s0", "s1"]},
                                           schema_overrides={"rank": pl.Int32}),
                          label="step")
    assert wm["step"].to_list() == ["s0", "s1"]
    assert wm["sm_active_pct"].to_list() == [pytest.approx(10.0), pytest.approx(45.0)]
    assert wm["device_id"].to_list() == [0, 0]


def test_dram_bytes_matches_brute_force_definition() -> None:
    """Random windows over irregular samples with gaps: estimate and bounds equal a direct
    per-sample evaluation of the definition (docs/metrics.md)."""
    import numpy as np

    from traceparse import schema
    from traceparse.timeline import Timeline

    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(50, 150, 400))
    ends = starts + rng.integers(40, 50, 400)  # gaps between samples
    vals = rng.integers(0, 100, 400).astype(float)
    peak = 1e12
    m = schema.conform("metrics", pl.DataFrame({
        "rank": [0] * 400, "device_id": [0] * 400, "start_ns": starts, "end_ns": ends,
        "dur_ns": ends - starts, "metric": ["DRAM Read Throughput"] * 400, "value": vals}))
    dev = schema.conform("devices", pl.DataFrame({"rank": [0], "device_id": [0],
                                                  "memory_bandwidth_bps": [peak]}))
    tl = Timeline(metrics=m, devices=dev)
    ws = rng.integers(0, int(ends[-1]), 300)
    we = ws + rng.integers(1, 3000, 300)
    w = pl.DataFrame({"_w": range(300), "rank": [0] * 300, "device_id": [0] * 300,
                      "start_ns": ws, "end_ns": we},
                     schema_overrides={"rank": pl.Int32, "device_id": pl.Int32})
    got = M.dram_bytes(tl, w).sort("_w")
    for k in range(300):
        est = lo = hi = cov = 0.0
        for s, e, v in zip(starts, ends, vals, strict=True):
            ov = (min(we[k], e) - max(ws[k], s)) / 1e9
            if ov <= 0:
                continue
            span, total = (e - s) / 1e9, v / 100 * peak * (e - s) / 1e9
            est += v / 100 * peak * ov
            cov += ov
            lo += total if ov >= span else max(0.0, total - peak * (span - ov))
            hi += total if ov >= span else min(total, peak * ov)
        assert got["dram_bytes"][k] == pytest.approx(est, rel=1e-9, abs=1e-6)
        assert got["dram_bytes_lo"][k] == pytest.approx(max(0.0, lo - 0.005 * peak * cov),
                                                        rel=1e-9, abs=1e-3)
        assert got["dram_bytes_hi"][k] == pytest.approx(hi + 0.005 * peak * cov, rel=1e-9,
                                                        abs=1e-3)
