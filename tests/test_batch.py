"""Batch ingest: dataset partitions, summary rows, failures, local and Dask executors."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceparse
from traceparse.batch import discover, parse_executor, run_batch, trace_ids
from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.samplegen import scenarios as samplegen

SCENARIOS = ("compute_bound", "memory_bound", "launch_bound", "comm_bound", "sync_bound")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five generated nsys exports in two sub-directories (plus a non-trace file)."""
    root = tmp_path_factory.mktemp("fleet")
    for i, name in enumerate(SCENARIOS):
        sub = root / ("job_a" if i < 3 else "job_b")
        sub.mkdir(exist_ok=True)
        samplegen.write_sqlite(name, sub / f"{name}.sqlite")
    (root / "README.txt").write_text("not a trace")
    return root


def _expected(paths: list[Path]) -> dict[str, dict[str, int]]:
    out = {}
    for p in paths:
        tl = traceparse.load(p)
        out[p.name] = {t: tl.table(t).height for t in ("gpu", "api", "ranges")}
        out[p.name]["kernels"] = tl.kernels.height
        out[p.name]["kernel_time_ns"] = int(tl.kernels["dur_ns"].sum())
    return out


def _check(out: Path, summary: pl.DataFrame, paths: list[Path]) -> None:
    want = _expected(paths)
    assert summary.height == len(paths)
    assert summary["status"].to_list() == ["ok"] * len(paths)
    for table in ("gpu", "api", "ranges"):
        ds = pl.scan_parquet(out / table / "**" / "*.parquet", hive_partitioning=True).collect()
        # dataset rows = sum of the per-trace row counts, and per partition exactly the trace's
        assert ds.height == sum(w[table] for w in want.values()), table
        per = dict(ds.group_by("trace").len().iter_rows())
        for row in summary.iter_rows(named=True):
            name = Path(row["file"]).name
            assert per.get(row["trace"], 0) == want[name][table], (table, name)
    for row in summary.iter_rows(named=True):
        w = want[Path(row["file"]).name]
        assert row["kernels"] == w["kernels"]
        assert row["kernel_time_ns"] == w["kernel_time_ns"]
        parts = [row[f"{p}_pct"] for p in ("compute", "communication", "memory",
                                           "launch_overhead", "warmup", "host_sync",
                                           "idle")]
        assert sum(parts) == pytest.approx(100.0)
    on_disk = pl.read_parquet(out / "summary.parquet")
    assert on_disk.equals(summary)


def test_discover_directory_recursive_and_glob(fleet: Path) -> None:
    found = discover(fleet)
    assert [p.name for p in found] == [f"{n}.sqlite" for n in
                                       ("compute_bound", "launch_bound", "memory_bound",
                                        "comm_bound", "sync_bound")]
    assert [p.name for p in discover(str(fleet / "job_b" / "*.sqlite"))] == [
        "comm_bound.sqlite", "sync_bound.sqlite"]
    with pytest.raises(TraceError, match="no trace files"):
        discover(str(fleet / "nothing*.sqlite"))


def test_trace_ids_are_unique_and_safe() -> None:
    ids = trace_ids([Path("/r/a b/x.json"), Path("/r/a_b/x.json"), Path("/r/c/y.json")])
    assert ids == ["a_b_x.json", "a_b_x.json~1", "c_y.json"]


def test_local_executor_dataset_counts_equal_per_trace_counts(fleet: Path, tmp_path: Path) -> None:
    paths = discover(fleet)
    out = tmp_path / "out"
    done: list[int] = []
    summary = run_batch(paths, out, executor="local", workers=2,
                        on_done=lambda: done.append(1))
    assert len(done) == len(paths)
    _check(out, summary, paths)
    # the launch_bound scenario: 11 kernels (samplegen ground truth)
    lb = summary.filter(pl.col("trace").str.contains("launch_bound")).row(0, named=True)
    assert lb["kernels"] == 11
    assert sorted(summary["trace"].to_list())[0] == "job_a_compute_bound.sqlite"


def test_failed_trace_is_an_error_row(fleet: Path, tmp_path: Path) -> None:
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    paths = [*discover(fleet / "job_b"), bad]
    summary = run_batch(paths, tmp_path / "out", workers=1)
    row = summary.filter(pl.col("status") == "error").row(0, named=True)
    assert row["trace"].endswith("broken.sqlite")
    assert "broken.sqlite" in row["error"]
    assert row["kernels"] is None
    assert summary.filter(pl.col("status") == "ok").height == 2
    assert not (tmp_path / "out" / "gpu" / f"trace={row['trace']}").exists()
    assert len(list((tmp_path / "out" / "gpu").iterdir())) == 2


def test_files_that_are_no_trace_are_skipped_not_failed(fleet: Path, tmp_path: Path) -> None:
    # a capture's sidecar (JSON without traceEvents), an unrelated CSV and an SQLite
    # database without nsys tables are no traces: skipped with the reason; a truncated
    # Kineto JSON is a damaged trace: an error, and the exit code is 2
    import sqlite3

    d = tmp_path / "in"
    d.mkdir()
    samplegen.write_sqlite("compute_bound", d / "run.sqlite")
    (d / "run.meta.json").write_text('{"tool": "capture.py", "steps": 6}')
    (d / "table.csv").write_text("a,b\n1,2\n")
    con = sqlite3.connect(d / "other.db")
    con.execute("create table t (x)")
    con.commit()
    con.close()
    summary = run_batch(discover(d), tmp_path / "out", workers=1)
    status = dict(zip([Path(f).name for f in summary["file"]], summary["status"], strict=True))
    assert status == {"run.sqlite": "ok", "run.meta.json": "skipped", "table.csv": "skipped",
                      "other.db": "skipped"}
    skipped = summary.filter(pl.col("status") == "skipped")
    assert skipped.filter(pl.col("error").str.contains("no traceEvents key")).height == 1
    res = CliRunner().invoke(main, ["--no-cache", "batch", str(d), "-o", str(tmp_path / "o"),
                                    "-j", "1"])
    assert res.exit_code == 0, res.output
    assert "1 of 1 traces (3 files skipped: not a trace" in res.output
    (d / "cut.json").write_text('{"traceEvents": [{"ph": "X", "na')
    res = CliRunner().invoke(main, ["--no-cache", "batch", str(d), "-o", str(tmp_path / "q"),
                                    "-j", "1"])
    assert res.exit_code == 2
    assert "1 of 2 traces failed" in res.output


def test_cli_batch_and_exit_code(fleet: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["--no-cache", "batch", str(fleet / "job_a"), "-o",
                                    str(tmp_path / "o"), "-j", "1"])
    assert res.exit_code == 0, res.output
    assert "compute_bound.sqlite" in res.output
    assert pl.read_csv(tmp_path / "o" / "summary.csv").height == 3
    res = CliRunner().invoke(main, ["batch", str(fleet), "-o", str(tmp_path / "p"),
                                    "--executor", "spark"])
    assert res.exit_code == 2
    assert "--executor must be" in res.output


def test_parse_executor() -> None:
    assert parse_executor("local") == ("local", None)
    assert parse_executor("dask") == ("dask", None)
    assert parse_executor("dask=tcp://10.0.0.1:8786") == ("dask", "tcp://10.0.0.1:8786")
    with pytest.raises(TraceError):
        parse_executor("local=x")


def test_dask_executor_on_a_local_cluster(fleet: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip(
        "dask.distributed",
        reason="Dask distributed not installed (pip install 'traceparse[dask]')")
    paths = discover(fleet)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        summary = run_batch(paths, tmp_path / "out", executor=f"dask={cluster.scheduler_address}")
    _check(tmp_path / "out", summary, paths)



@pytest.mark.shared
def test_ncu_pages_count_their_launches_and_profiled_time(tmp_path: Path) -> None:
    """An ncu page has no timeline: its summary row counts its launches and the sum of
    their ``gpu__time_duration`` (read here from the CSV text: a raw page has one column
    per metric and a units row; a roofline-chart page has no duration), and its counters
    are in the dataset's ``ncu`` partitions. Before, every page read "0 kernels, 0 ns"."""
    import csv

    from conftest import shared_files

    from traceparse.batch import run_batch

    pages = [p for p in shared_files("ncu", "*.csv")
             if p.name.endswith((".raw.csv", ".roofline.csv"))]
    if not pages:
        pytest.skip("no ncu pages in the corpus")
    summary = run_batch([str(p) for p in pages], tmp_path / "out", workers=1)
    ds = pl.scan_parquet(tmp_path / "out" / "ncu" / "**" / "*.parquet",
                         hive_partitioning=True).collect()
    scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
    for row in summary.iter_rows(named=True):
        text = Path(row["file"]).read_text(encoding="utf-8", errors="replace").splitlines()
        start = next(i for i, ln in enumerate(text) if ln.lstrip().startswith('"ID"'))
        rows = list(csv.reader(text[start:]))
        head, launches = rows[0], [r for r in rows[1:] if r and r[0].strip().isdigit()]
        assert row["status"] == "ok", row["file"]
        assert row["kernels"] == len({r[0] for r in launches}), row["file"]
        assert ds.filter(pl.col("trace") == row["trace"]).height == row["kernels"]
        if "gpu__time_duration.sum" not in head:  # a roofline-chart page
            assert row["kernel_time_ns"] is None, row["file"]
            continue
        i = head.index("gpu__time_duration.sum")
        f = scale[rows[1][i]]  # the units row
        # a launch ncu could not time prints "-nan" (sglang__profile: 1 of 5): no time
        want = sum(float(r[i].replace(",", "")) * f for r in launches
                   if "nan" not in r[i].lower())
        assert row["kernel_time_ns"] == pytest.approx(want, rel=1e-9, abs=1), row["file"]
