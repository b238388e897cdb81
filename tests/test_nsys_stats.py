"""nsys stats summaries: hand-computed small cases and every oracle CSV of the corpus."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import ORACLE, REPO, ids, shared_files
from traceparse import schema
from traceparse.analyses import nsys_stats as ns
from traceparse.cli.common import render_csv
from traceparse.cli.main import main
from traceparse.nsys import reader as nsys
from traceparse.timeline import Timeline

NSYS = shared_files("nsys", "*.sqlite")
REPORTS = {"cuda_gpu_kern_sum": (ns.kern_sum, ns.DECIMALS_NS),
           "cuda_gpu_mem_time_sum": (ns.mem_time_sum, ns.DECIMALS_NS),
           "cuda_gpu_mem_size_sum": (ns.mem_size_sum, ns.DECIMALS_MB),
           "cuda_api_sum": (ns.api_sum, ns.DECIMALS_NS)}
CASES = [(p, r) for p in NSYS for r in REPORTS
         if (ORACLE / "nsys" / p.stem / f"{r}.csv").is_file()]


def _gpu(rows: list[dict]) -> pl.DataFrame:
    f = pl.DataFrame(rows).with_columns(
        rank=pl.lit(0), category=pl.lit("compute"), device_id=pl.lit(0),
        dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    return schema.conform("gpu", f)


def test_kern_sum_hand_computed() -> None:
    # k: durations 10 and 30 -> total 40, avg 20, med (10+30)/2 = 20, sample sd
    #    sqrt(((10-20)^2 + (30-20)^2) / (2-1)) = 14.142 -> 14.1; m: one launch of 20.
    # Time (%): 40/60 = 66.67 -> 66.7; 20/60 = 33.33 -> 33.3.
    gpu = _gpu([{"kind": "kernel", "name": "k", "start_ns": 0, "end_ns": 10},
                {"kind": "kernel", "name": "k", "start_ns": 50, "end_ns": 80},
                {"kind": "kernel", "name": "m", "start_ns": 10, "end_ns": 30}])
    out = ns.kern_sum(Timeline(gpu=gpu))
    assert out.columns == ["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)",
                           "Min (ns)", "Max (ns)", "StdDev (ns)", "Name"]
    assert out.rows() == [(66.7, 40, 2, 20.0, 20.0, 10, 30, 14.1, "k"),
                          (33.3, 20, 1, 20.0, 20.0, 20, 20, 0.0, "m")]


def test_half_up_rounding_and_even_median() -> None:
    # durations 1, 2, 2, 4 -> total 9, avg 2.25 -> 2.3 (half up, not 2.2),
    # median = (2 + 2) / 2 = 2.0; with 1, 2 -> avg 1.5, median 1.5.
    gpu = _gpu([{"kind": "kernel", "name": "a", "start_ns": 0, "end_ns": d} for d in (1, 2, 2, 4)])
    row = ns.kern_sum(Timeline(gpu=gpu)).row(0)
    assert row[3] == 2.3 and row[4] == 2.0
    gpu = _gpu([{"kind": "kernel", "name": "a", "start_ns": 0, "end_ns": d} for d in (1, 2)])
    assert ns.kern_sum(Timeline(gpu=gpu)).row(0)[3:5] == (1.5, 1.5)


def test_mem_size_sum_in_decimal_megabytes() -> None:
    # 1e6 + 1e6 + 5e5 bytes -> Total 2.5 MB (10^6), Avg 0.8333 -> 0.833, Med 1.0, Min 0.5,
    # sd = sqrt(((1-.8333)^2*2 + (.5-.8333)^2)/2) = 0.2887 -> 0.289
    gpu = _gpu([{"kind": "memcpy", "name": "[CUDA memcpy Host-to-Device]", "start_ns": 0,
                 "end_ns": 5, "bytes": b, "copy_kind": "HtoD"} for b in (10**6, 10**6, 5 * 10**5)])
    out = ns.mem_size_sum(Timeline(gpu=gpu))
    assert out.rows() == [(2.5, 3, 0.833, 1.0, 0.5, 1.0, 0.289, "[CUDA memcpy Host-to-Device]")]


def test_api_suffix_strip() -> None:
    names = pl.Series(["cudaMalloc_v3020", "cudaLaunchKernelExC_v11060",
                       "cudaGetDeviceProperties_v2_v12000", "cuMemAlloc_v2", "cuLaunchKernel"])
    got = pl.select(ns.strip_api_version(pl.lit(names))).to_series().to_list()
    assert got == ["cudaMalloc", "cudaLaunchKernelExC_v11060",
                   "cudaGetDeviceProperties_v2_v12000", "cuMemAlloc_v2", "cuLaunchKernel"]


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _group_ties(rows: list[list[str]], key: int) -> list[tuple[str, frozenset[tuple[str, ...]]]]:
    """Consecutive rows with the same sort key become one set (nsys orders ties its own way)."""
    out: list[tuple[str, set[tuple[str, ...]]]] = []
    for r in rows:
        if out and out[-1][0] == r[key]:
            out[-1][1].add(tuple(r))
        else:
            out.append((r[key], {tuple(r)}))
    return [(k, frozenset(v)) for k, v in out]


_tl_cache: dict[Path, Timeline] = {}


def _tl(path: Path) -> Timeline:
    if path not in _tl_cache:
        _tl_cache[path] = nsys.read(path)
    return _tl_cache[path]


@pytest.mark.shared
@pytest.mark.parametrize("path,report", CASES, ids=[f"{p.stem}-{r}" for p, r in CASES])
def test_matches_nsys_stats_oracle(path: Path, report: str) -> None:
    fn, dec = REPORTS[report]
    mine = _rows(render_csv(fn(_tl(path)), decimals=dec))
    want = _rows((ORACLE / "nsys" / path.stem / f"{report}.csv").read_text())
    assert mine[0] == want[0]
    assert len(mine) == len(want)
    key = 0 if report == "cuda_gpu_mem_size_sum" else 1  # Total (MB) / Total Time (ns)
    assert _group_ties(mine[1:], key) == _group_ties(want[1:], key)


def test_oracle_cases_cover_every_file() -> None:
    if not NSYS:
        pytest.skip("no corpus")
    assert len(NSYS) == 19  # the third round added nsys-ai__mfu_2gpu_after (SOURCES.md)
    assert {p for p, _ in CASES} == set(NSYS)  # every file has at least cuda_api_sum


_CLI_FILES = [p for p in NSYS if p.stem in
              ("p2p-acc__mpiV100", "abacus__report2", "dlprof__nsys_profile")]


@pytest.mark.shared
@pytest.mark.parametrize("path", _CLI_FILES, ids=ids(_CLI_FILES))
def test_cli_csv_equals_oracle_bytes(path: Path) -> None:
    runner = CliRunner()
    for args, report in ((["kernels"], "cuda_gpu_kern_sum"), (["api"], "cuda_api_sum"),
                         (["memops"], "cuda_gpu_mem_time_sum"),
                         (["memops", "--report", "size"], "cuda_gpu_mem_size_sum")):
        res = runner.invoke(main, [*args, str(path), "--format", "csv"])
        assert res.exit_code == 0, res.output
        want = (ORACLE / "nsys" / path.stem / f"{report}.csv").read_text()
        if _rows(res.output) != _rows(want):  # only tie order may differ
            assert sorted(_rows(res.output)) == sorted(_rows(want))


@pytest.mark.shared
def test_kern_sum_by_device_keeps_gpus_apart() -> None:
    path = next(p for p in NSYS if p.stem == "p2p-acc__mpiV100")
    tl = _tl(path)
    by = ns.kern_sum(tl, by="device")
    assert "Device" in by.columns
    assert sorted(by["Device"].unique().to_list()) == [0, 1, 2, 3]
    assert by["Total Time (ns)"].sum() == ns.kern_sum(tl)["Total Time (ns)"].sum()
    assert by["Instances"].sum() == tl.kernels.height == 45


@pytest.mark.shared
def test_cli_info_and_convert(tmp_path: Path) -> None:
    path = next(p for p in NSYS if p.stem == "nsys-ai__mfu_2gpu_before")
    runner = CliRunner()
    res = runner.invoke(main, ["info", str(path), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert '"tool version": "2026.2.1.210"' in res.output
    out = tmp_path / "tl"
    res = runner.invoke(main, ["convert", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert Timeline.load(out).gpu.height == 4010 + 1020 + 269


BAD = ["not a database", "truncated", "other app", "empty", "directory"]


def _bad_input(kind: str, tmp: Path) -> Path:
    if kind == "not a database":
        p = tmp / "junk.sqlite"
        p.write_bytes(b"hello, this is text\n" * 50)
    elif kind == "truncated":
        src = next(p for p in NSYS if p.stem == "casio__nerf_output-file")
        p = tmp / "trunc.sqlite"
        p.write_bytes(src.read_bytes()[: 64 * 1024])
    elif kind == "other app":
        import sqlite3

        p = tmp / "other.sqlite"
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE users(id INTEGER, name TEXT)")
        con.execute("INSERT INTO users VALUES (1, 'a')")
        con.commit()
        con.close()
    elif kind == "empty":
        p = tmp / "empty.sqlite"
        p.write_bytes(b"")
    else:
        p = tmp / "adir"
        p.mkdir()
    return p


@pytest.mark.shared
@pytest.mark.parametrize("kind", BAD)
def test_bad_input_exit_2_one_line(kind: str, tmp_path: Path) -> None:
    p = _bad_input(kind, tmp_path)
    cmd = "info" if kind == "directory" else "kernels"
    if kind == "directory":
        # a directory is a Kineto run dir for the loader; the nsys reader rejects it itself
        with pytest.raises(Exception) as err:
            nsys.read(p)
        assert type(err.value).__name__ == "TraceError" and str(p) in str(err.value)
        return
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "traceparse", cmd, str(p)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and p.name in lines[0] and "Traceback" not in r.stderr
