"""Nsight Compute CSV ingest: every shared file, cross-page agreement, bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import REPO, TRACES, ids, shared_files
from traceparse.errors import TraceError
from traceparse.ncu import reader as ncu
from traceparse.ncu.csv import read_page

FILES = shared_files("ncu", "*.csv")


def _report(p: Path) -> str:
    return re.sub(r"\.(raw_base|raw|details|roofline)\.csv$", "", p.name)


GROUPS: dict[str, list[Path]] = defaultdict(list)
for _p in FILES:
    GROUPS[_report(_p)].append(_p)
MULTI = {k: v for k, v in GROUPS.items() if len(v) > 1}


@pytest.mark.shared
@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_every_shared_file_ingests(path: Path) -> None:
    tl = ncu.read(path)
    n = tl.ncu
    assert n.height > 0
    assert n["kernel_name"].null_count() == 0
    assert n["launch_id"].to_list() == sorted(n["launch_id"].to_list())
    assert tl.sources["file"][0] == path.name
    # ingest accounting: parsed + skipped adds up to the data rows the reader saw
    page = read_page(path)
    acc = tl.ingest["count"].sum()
    if page.kind.startswith("raw"):
        assert tl.ingest.filter(pl.col("outcome") == "parsed")["count"][0] == n.height
    else:
        assert acc == page.metrics.height + page.rules + sum(page.skipped.values())


@pytest.mark.shared
def test_all_34_files_present() -> None:
    assert len(FILES) == 34
    assert len(GROUPS) == 13  # 13 reports (SOURCES.md)


@pytest.mark.shared
@pytest.mark.parametrize("report", sorted(MULTI), ids=sorted(MULTI))
def test_pages_of_one_report_agree(report: str) -> None:
    """Every metric printed on two pages of the same report agrees within the printing
    precision of both: one unit in the last printed digit of each, in base units (half a unit
    is the rounding bound; ncu itself prints e.g. -0.01 on the base page where the auto page
    prints 0.000000 for the same value, so a full unit is allowed)."""
    pages = {p.name: read_page(p) for p in MULTI[report]}
    counts = {k: v.launches.height for k, v in pages.items()}
    assert len(set(counts.values())) == 1, counts
    names = {k: v.launches["kernel_name"].str.strip_chars().to_list() for k, v in pages.items()}
    assert len({tuple(v) for v in names.values()}) == 1
    longs = {k: v.metrics.filter(pl.col("metric").is_not_null() & pl.col("value").is_finite())
             .unique(["launch_id", "metric"], keep="first")
             .select("launch_id", "metric", "value", "tol", "text") for k, v in pages.items()}
    keys = sorted(longs)
    compared = 0
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            j = longs[a].join(longs[b], on=["launch_id", "metric"], suffix="_b")
            bad = j.filter((pl.col("value") - pl.col("value_b")).abs()
                           > 2 * (pl.col("tol") + pl.col("tol_b")) + 1e-9 * pl.col("value").abs())
            assert bad.height == 0, (a, b, bad.head(5).to_dicts())
            compared += j.height
    assert compared > 0


def _ingredients(page_metrics: pl.DataFrame, lid: int) -> dict[str, tuple[float, float]]:
    f = page_metrics.filter((pl.col("launch_id") == lid) & pl.col("metric").is_not_null())
    return {r["metric"]: (r["value"], r["tol"]) for r in f.iter_rows(named=True)}


def _interval(terms: list[tuple[float, float]], clock: tuple[float, float]) -> tuple[float,
                                                                                    float]:
    lo = sum(v - t for v, t in terms) * (clock[0] - clock[1])
    hi = sum(v + t for v, t in terms) * (clock[0] + clock[1])
    return lo, hi


ROOF = shared_files("ncu", "*.roofline.csv") + shared_files("ncu", "*RooflineChart.csv")
S = "sass_thread_inst_executed_op_{}_pred_on"


@pytest.mark.shared
@pytest.mark.parametrize("path", ROOF, ids=ids(ROOF))
def test_computed_roofline_equals_ncu_printed_values(path: Path) -> None:
    """Our achieved/peak FP32, FP64 and DRAM values (computed from the raw page's metric
    identifiers, or from the chart page for single-page reports) lie inside the interval
    ncu's printed roofline ingredients allow: (2*fma + add + mul) per cycle x SM clock."""
    page = read_page(path)
    raw = [p for p in GROUPS[_report(path)] if p.name.endswith(".raw_base.csv")]
    ours = ncu.read(raw[0] if raw else path).ncu
    checked = 0
    for lid in page.launches["launch_id"].to_list():
        g = _ingredients(page.metrics, lid)
        row = ours.filter(pl.col("launch_id") == lid).row(0, named=True)
        if row["fp32_flop_per_s"] is None:
            continue  # empty result (replay failed): ncu printed nan
        for prec, p in (("fp32", "f"), ("fp64", "d")):
            fma = g[f"derived__smsp__{S.format(p + 'fma')}_x2"]
            add = g[f"smsp__{S.format(p + 'add')}.sum.per_cycle_elapsed"]
            mul = g[f"smsp__{S.format(p + 'mul')}.sum.per_cycle_elapsed"]
            lo, hi = _interval([fma, add, mul], g["smsp__cycles_elapsed.avg.per_second"])
            assert lo * (1 - 1e-6) <= row[f"{prec}_flop_per_s"] <= hi * (1 + 1e-6), prec
            plo, phi = _interval([g[f"derived__sm__{S.format(p + 'fma')}_x2"]],
                                 g["sm__cycles_elapsed.avg.per_second"])
            assert plo * (1 - 1e-6) <= row[f"peak_{prec}_flop_per_s"] <= phi * (1 + 1e-6)
        bw = g["dram__bytes.sum.per_second"]
        assert abs(row["dram_bytes_per_s"] - bw[0]) <= bw[1] + 1e-6 * bw[0]
        dlo, dhi = _interval([g["dram__bytes.sum.peak_sustained"]],
                             g["dram__cycles_elapsed.avg.per_second"])
        assert dlo * (1 - 1e-6) <= row["peak_dram_bytes_per_s"] <= dhi * (1 + 1e-6)
        checked += 1
    assert checked >= 1


RAW_AUTO = [p for p in shared_files("ncu", "*.raw.csv")]


@pytest.mark.shared
@pytest.mark.parametrize("path", RAW_AUTO, ids=ids(RAW_AUTO))
def test_dram_throughput_pct_equals_speedoflight(path: Path) -> None:
    """DRAM B/s / (peak_sustained x DRAM clock) x 100 == ncu's printed
    gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed (6 decimals on the raw page)."""
    n = ncu.read(path).ncu.filter(pl.col("dram_bytes_per_s").is_not_null()
                                  & pl.col("peak_dram_bytes_per_s").is_not_null())
    if n.height == 0:
        pytest.skip("report has no dram__bytes.sum.per_second (default section set)")
    pct = n["dram_bytes_per_s"] / n["peak_dram_bytes_per_s"] * 100
    # the printed % has 6 decimals (half-ulp 5e-7); the printed bytes/s, peak and clock
    # carry 7+ significant digits each (relative error well under 2e-5 together)
    err = (pct - n["dram_throughput_pct"]).abs() - 2e-5 * n["dram_throughput_pct"]
    assert err.max() <= 5e-7, list(zip(pct, n["dram_throughput_pct"], strict=True))


# ---------------------------------------------------------------------------- synthetic

DETAILS_15 = (
    '==PROF== Connected to process 1 (/usr/bin/python3)\r\n'
    'hello from the program, "quoted", stuff\r\n'
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context",'
    '"Stream","Section Name","Metric Name","Metric Unit","Metric Value","Rule Name",'
    '"Rule Type","Rule Description"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"GPU Speed Of Light","Duration","usecond","1,234.50"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","dram__bytes.sum","Mbyte","2.50"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","sm__cycles_elapsed.avg.per_second","cycle/nsecond",'
    '"1.50"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","sm__cycles_elapsed.avg","cycle","1,500,000"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","sm__sass_thread_inst_executed_op_ffma_pred_on.sum",'
    '"inst","1,000,000"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","sm__sass_thread_inst_executed_op_fadd_pred_on.sum",'
    '"inst","500"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7",'
    '"Command line profiler metrics","sm__sass_thread_inst_executed_op_fmul_pred_on.sum",'
    '"inst","0"\r\n'
    '"0","7","py","h","k<int, 2>(float *, int)","2022-Nov-17 14:13:26","1","7","SOL","","",'
    '"","R","WRN","Line one, with ""quotes""\r\nline two"\r\n'
    '==PROF== Disconnected from process 1\r\n'
)


def test_synthetic_details_page(tmp_path: Path) -> None:
    p = tmp_path / "old.csv"
    p.write_bytes(DETAILS_15.encode())
    tl = ncu.read(p)
    row = tl.ncu.row(0, named=True)
    assert row["kernel_name"] == "k<int, 2>(float *, int)"
    assert row["dur_ns"] == pytest.approx(1_234_500.0)  # 1,234.50 usecond
    assert row["dram_bytes"] == pytest.approx(2.5e6)    # 2.50 Mbyte
    # NERSC counts: FLOPs = 500 + 0 + 2 * 1e6 = 2,000,500; time = 1.5e6 cycles / 1.5e9 Hz
    # = 1 ms -> 2.0005e9 FLOP/s; DRAM 2.5e6 B / 1 ms = 2.5e9 B/s.
    assert row["flop_fp32"] == pytest.approx(2_000_500.0)
    assert row["fp32_flop_per_s"] == pytest.approx(2.0005e9)
    assert row["dram_bytes_per_s"] == pytest.approx(2.5e9)
    assert row["roofline_method"] == "nersc counts"
    page = read_page(p)
    assert page.kind == "details" and page.rules == 1 and page.log_lines == 2
    assert page.skipped == {"profiler log line": 1}


def test_synthetic_raw_page_units_row(tmp_path: Path) -> None:
    text = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
            '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum",'
            '"dram__bytes.sum.per_second","device__attribute_display_name",\n'
            '"","","","","","","","","","","","usecond","Gbyte/second","",\n'
            '"0","1","a","h","kern","1","7","(128, 2, 1)","(64, 1, 1)","0","9.0","16.448000",'
            '"1.500000","NVIDIA H800",\n')
    p = tmp_path / "r.csv"
    p.write_text(text)
    tl = ncu.read(p)
    row = tl.ncu.row(0, named=True)
    assert (row["grid_x"], row["grid_y"], row["block_x"], row["block_y"]) == (64, 1, 128, 2)
    assert row["dur_ns"] == pytest.approx(16448.0)
    assert row["dram_bytes_per_s"] == pytest.approx(1.5e9)
    assert row["device_name"] == "NVIDIA H800" and row["cc"] == "9.0"
    assert tl.devices["name"][0] == "NVIDIA H800"
    assert read_page(p).kind == "raw"


@pytest.mark.parametrize("content,needle", [
    (b"", "empty file"),
    (b"==PROF== Connected to process 1\n==ERROR== Failed to profile kernel\n", "no Nsight"),
    (b"a,b,c\n1,2\n\"x\n", "no Nsight"),
    (b'"ID","Process ID","Kernel Name"\n', "no kernel launch rows"),
    (b'"ID","Process ID"\n"0","1"\n', "Kernel Name"),
    (b'Session Info\r\n"Session Attribute","Value"\r\n"Created","2026-Nov-26"\r\n',
     "an Nsight Compute session page (--page session)"),
    (b'Launch Settings\n"Launch Attribute","Value"\n"Profiler Command Line","ncu"\n\n'
     b'Device Attributes\n"Device Attribute","Device 0"\n"display_name","NVIDIA H200"\n',
     "no kernel rows; export --page raw or --page details"),
])
def test_bad_input_raises_trace_error(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_bytes(content)
    with pytest.raises(TraceError) as ei:
        ncu.read(p)
    assert needle in str(ei.value)
    assert "\n" not in str(ei.value)


def test_cli_error_log_exit_2(tmp_path: Path) -> None:
    p = tmp_path / "log.csv"
    p.write_text("==PROF== Connected\n==ERROR== The application returned an error code (1).\n")
    r = subprocess.run([sys.executable, "-m", "traceparse", "roofline", str(p), "--format",
                        "csv"], cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"},
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "no Nsight Compute CSV" in r.stderr


@pytest.mark.shared
def test_gzipped_csv_reads_like_plain(tmp_path: Path) -> None:
    import gzip

    import traceparse

    src = TRACES / "ncu" / "rsmall__sgemm.raw.csv"
    gz = tmp_path / "rsmall__sgemm.raw.csv.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert traceparse.load(gz).ncu.drop("source_page").equals(
        traceparse.load(src).ncu.drop("source_page"))
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(gz.read_bytes()[:200])
    with pytest.raises(traceparse.TraceError, match="truncated gzip"):
        traceparse.load(cut)


@pytest.mark.shared
def test_session_page_is_named_not_mistaken(tmp_path: Path) -> None:
    """``--page session`` (the H200 capture's ``ncu_kernels.session.csv.gz``) is an ncu
    page without kernels: named as such, exit 2 on one line; ``batch`` lists it skipped."""
    from traceparse.errors import NotATrace

    src = TRACES / "gpu" / "h200" / "ncu_kernels.session.csv.gz"
    if not src.is_file():
        pytest.skip(f"{src} not in the corpus")
    with pytest.raises(NotATrace, match="session page"):
        ncu.read(src)
    r = subprocess.run([sys.executable, "-m", "traceparse", "--no-cache", "info", str(src)],
                       cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"},
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "session page (--page session)" in r.stderr
