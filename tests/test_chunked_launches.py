"""``launches --report graphs`` in time-ordered pieces (analyses/chunked_launches.py,
traceparse/launch_chunks.py) against the in-memory :func:`graph_recoverable`.

* a generated export with hand-computed launch-bound gaps, read one row per piece, where
  a kernel is launch-bound only against the kernels of earlier pieces and a graph node's
  gap is bound but not recoverable;
* merges in order and pairwise (as on Dask) give the same frame;
* every shared nsys export and the bundled samples: pieces of ~300 rows equal memory;
* the CLI: byte-identical stdout in every format; other reports refuse the executor.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import launch_chunks
from traceparse.analyses import chunked_launches as cl
from traceparse.analyses import savings
from traceparse.analyses.launches import _launch_rows, graph_recoverable, launch_summary
from traceparse.cli import main
from traceparse.nsys.reader import read
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import Activity, Call, Scenario, write_sqlite

NSYS = shared_files("nsys", "*.sqlite")
SAMPLES = sorted((Path(__file__).parent.parent / "sample_traces").glob("*.sqlite"))
HAVE_DASK = importlib.util.find_spec("distributed") is not None


def _export(path: Path) -> Path:
    k = "cudaLaunchKernel"
    calls = (
        # stream 7: k1 5..15 us; k2 (call at 30 us, after k1 ended) 40..50 us: bound,
        # gap 25 us, launch latency min(25, 40 - 30) = 10 us, recoverable 10 - 1 = 9 us
        Call(k, 0, 4_000, Activity("kernel", 7, 5_000, 10_000, "k1")),
        Call(k, 30_000, 38_000, Activity("kernel", 7, 40_000, 10_000, "k2")),
        # k3: its call (12 us) began before k2 ended: queued, not bound
        Call(k, 12_000, 20_000, Activity("kernel", 7, 50_000, 10_000, "k3")),
        # k4: call at 65 us, after k3 ended (60 us, an earlier piece's end): bound, gap
        # 10 us, latency min(10, 70 - 65) = 5 us, recoverable 4 us
        Call(k, 65_000, 66_000, Activity("kernel", 7, 70_000, 5_000, "k4")),
        # stream 9: k5 72..73 us, then a graph launch at 80 us whose node runs 90..91 us:
        # bound (gap 17 us) but a graph already launched it: nothing to recover
        Call(k, 70_000, 71_000, Activity("kernel", 9, 72_000, 1_000, "k5")),
        Call("cudaGraphLaunch", 80_000, 81_000, Activity("kernel", 9, 90_000, 1_000, "g1")),
    )
    return samplegen_sqlite.write(Scenario("launch_edges", "launch-bound edges", calls), path)


def test_generated_export_hand_computed(tmp_path: Path) -> None:
    path = str(_export(tmp_path / "edges.sqlite"))
    want = [(0, 0, 7, 4, 2, 35_000, 13_000), (0, 0, 9, 2, 1, 17_000, 0)]
    mem = graph_recoverable(read(path))
    assert mem.rows() == want
    for rows in (1, 2, 3, 100):
        got = launch_chunks.graph_recoverable(path, chunk_rows=rows)
        assert got is not None
        assert_frame_equal(got, mem, check_exact=True)


def test_merge_in_order_and_pairwise(tmp_path: Path) -> None:
    t = _launch_rows(read(str(_export(tmp_path / "edges.sqlite"))))
    # pieces hold the kernels starting in consecutive windows: order them by start
    parts = [cl.launch_part(t.sort("start_ns").slice(i, 1)) for i in range(t.height)]
    folded = cl.graph_recoverable_from_part(cl.merge_launch_parts(parts))
    tree = parts
    while len(tree) > 1:
        tree = [cl.merge_launch_parts(tree[i:i + 2]) if i + 1 < len(tree) else tree[i]
                for i in range(0, len(tree), 2)]
    assert_frame_equal(cl.graph_recoverable_from_part(tree[0]), folded, check_exact=True)
    assert folded.rows() == [(0, 0, 7, 4, 2, 35_000, 13_000), (0, 0, 9, 2, 1, 17_000, 0)]
    with pytest.raises(AssertionError, match="out of time order"):
        cl.graph_recoverable_from_part(cl.merge_launch_parts(parts[::-1]))


def _summary_from_parts(parts: launch_chunks.Parts, tl: object) -> object:
    """The chunked distributions, the CUDA-graph saving taken from the memory engine (the
    replay is not read in pieces yet)."""
    rec = cl.graph_recoverable_from_part(parts[0])
    best = savings.best(savings.savings(tl), "no_launch_overhead")  # type: ignore[arg-type]
    return cl.launch_summary_from_part(
        parts[1], launch_bound_kernels=int(rec["launch_bound_kernels"].sum()), saving=best)


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS + SAMPLES, ids=ids(NSYS + SAMPLES))
def test_exports_chunks_equal_memory(path: Path) -> None:
    tl = read(path)
    mem = graph_recoverable(tl)
    parts = launch_chunks.launch_parts(str(path), chunk_rows=300)
    if parts is None:  # no GPU activity: the CLI falls back to the whole timeline
        assert mem.height == 0
        return
    assert_frame_equal(cl.graph_recoverable_from_part(parts[0]), mem, check_exact=True)
    # the distributions: exact percentiles, mean and sums from the merged histograms
    assert_frame_equal(_summary_from_parts(parts, tl), launch_summary(tl),  # type: ignore[arg-type]
                       check_exact=True)


def test_distributions_hand_computed(tmp_path: Path) -> None:
    path = str(_export(tmp_path / "edges.sqlite"))
    tl = read(path)
    parts = launch_chunks.launch_parts(path, chunk_rows=1)
    assert parts is not None
    got = _summary_from_parts(parts, tl)
    assert_frame_equal(got, launch_summary(tl), check_exact=True)  # type: ignore[arg-type]
    # five kernels of their own call: launch 4, 8, 8, 1, 1 us -> p50 4 us, mean 4.4 us;
    # p95 at rank 3.8 between 8 and 8 us; one graph launch call (1 us) with one node
    row = got.row(0, named=True)  # type: ignore[attr-defined]
    assert (row["count"], row["mean"], row["p50"], row["p95"], row["min"], row["max"]) == \
        (5, 4400.0, 4000.0, 8000.0, 1000.0, 8000.0)
    graphs = got.filter(pl.col("metric") == "graph_launches").row(0, named=True)  # type: ignore[attr-defined]
    assert (graphs["count"], graphs["sum"], graphs["p50"]) == (1, 1.0, 1000.0)


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["--no-cache", *args])
    return res.exit_code, res.output


def test_cli_byte_identical_and_refusals(tmp_path: Path) -> None:
    for path in (str(write_sqlite("mini_train", tmp_path / "mini.sqlite")),
                 str(_export(tmp_path / "edges.sqlite"))):
        for fmt in ("table", "csv", "json"):
            rc, mem = _cli("launches", "--report", "graphs", path, "--format", fmt)
            rc2, got = _cli("launches", "--report", "graphs", path, "--format", fmt,
                            "--executor", "chunks", "--chunk-rows", "2")
            assert rc == rc2 == 0 and got == mem, fmt
        rc, out = _cli("launches", path, "--executor", "chunks")
        assert rc == 2 and "--report graphs only" in out and len(out.strip().splitlines()) == 1


@pytest.mark.skipif(not HAVE_DASK, reason="distributed is not installed (the optional "
                    "extra traceparse[dask]); the dask executor is not tested")
def test_dask_executor_equals_memory(tmp_path: Path) -> None:
    path = str(_export(tmp_path / "edges.sqlite"))
    got = launch_chunks.graph_recoverable(path, executor="dask", chunk_rows=1, workers=2)
    assert got is not None
    assert_frame_equal(got, graph_recoverable(read(path)), check_exact=True)
