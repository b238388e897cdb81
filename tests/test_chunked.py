"""The chunked executors (traceparse/executor.py) against the in-memory path.

* hand-computed window edges: a kernel crossing an edge, an overlap across an edge, empty
  windows (pure functions of analyses/chunked.py, and a generated nsys export read one
  row per piece);
* the exact standard deviation at a rounding boundary;
* every shared nsys export: ``kernels`` (each name/--by choice) and the GPU-only breakdown,
  chunks vs memory, and the GPU-only breakdown against the full ``breakdown``'s columns;
* the CLI: byte-identical stdout in every format, bad input exits 2 with one line;
* Dask (skipped without ``distributed``): the same frames from a local cluster.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import polars as pl
import pytest
from chunked_exports import launched_export
from click.testing import CliRunner
from conftest import ids, shared_files
from perf_helpers import activities

from traceparse import executor
from traceparse.analyses import attribution, chunked, nsys_stats
from traceparse.cli import main
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.samplegen.scenarios import Activity, write_sqlite

NSYS = shared_files("nsys", "*.sqlite")
HAVE_DASK = importlib.util.find_spec("distributed") is not None
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def _windows(acts: pl.DataFrame, edges: list[int]) -> pl.DataFrame:
    """The merged breakdown of ``acts`` cut at ``edges`` (every window reads all rows)."""
    bounds = list(zip(edges, [*edges[1:], chunks.END], strict=True))
    return chunked.gpu_breakdown_from_parts(
        chunked.merge_parts([chunked.window_parts(acts, a, b) for a, b in bounds]))


def test_window_parts_clip_at_the_edge() -> None:
    # compute [50, 150) and a copy [120, 250), window [100, 200): hand-computed
    acts = activities([(0, 50, 150, "compute"), (0, 120, 250, "memory")])
    p = chunked.window_parts(acts, 100, 200).row(0, named=True)
    assert (p["_c"], p["_cm"], p["_all"], p["_m"]) == (50, 50, 100, 0)
    assert (p["first_ns"], p["last_ns"]) == (120, 250)  # only the copy starts inside


def test_edges_crossing_overlap_and_empty_windows() -> None:
    # compute [1000, 5000), compute [3000, 4000), comm [4500, 9000) (500 ns under compute),
    # copy [9500, 10000); device 1: compute [2000, 2500)
    acts = activities([(0, 1000, 5000, "compute"), (0, 3000, 4000, "compute"),
                  (0, 4500, 9000, "communication"), (0, 9500, 10000, "memory"),
                  (1, 2000, 2500, "compute")])
    want = {"window_ns": [9000, 500], "compute_ns": [4000, 500],
            "communication_ns": [4000, 0], "memory_ns": [500, 0],
            "no_gpu_activity_ns": [500, 0], "overlapped_comm_ns": [500, 0]}
    whole = chunked.gpu_breakdown(acts)
    for col, vals in want.items():
        assert whole[col].to_list() == vals, col
    assert whole["comm_overlap_pct"].to_list()[0] == pytest.approx(100 * 500 / 4500)
    # edges inside the crossing kernels (3500 cuts both computes, 4700 the overlap),
    # windows with nothing in them (20000, 30000), an edge at a start (9500)
    for edges in ([0], [1000, 3500], [1000, 3500, 4700, 9500, 20000, 30000],
                  [999, 1001, 2250, 4999, 5001, 8999, 9999], list(range(1000, 10001, 7))):
        assert _windows(acts, edges).equals(whole), edges


def test_std_tenths_exact_at_a_rounding_boundary() -> None:
    # fifteen 1000s and one 1003: var = 9 * 15 / 240 = 0.5625, std 0.75 exactly -> 0.8
    assert chunked._std_tenths(16, 15 * 1000 + 1003, 15 * 10**6 + 1003**2) == 8
    frame = pl.DataFrame({"name": ["k"] * 16, "dur_ns": [1000] * 15 + [1003]})
    mem = nsys_stats._summary(frame, "dur_ns", "name", "Name", "Instances", None)
    hist = chunked.kernel_histogram(frame.with_columns(kind=pl.lit("kernel")))
    assert mem["StdDev (ns)"].to_list() == [0.8]
    assert chunked.kern_sum_from_histogram(hist).equals(mem)
    for n, vals in ((2, [3, 8]), (5, [1, 1, 2, 9, 100]), (3, [7, 7, 7])):
        m = sum(vals) / n
        std = math.sqrt(sum((v - m) ** 2 for v in vals) / (n - 1))
        assert chunked._std_tenths(n, sum(vals), sum(v * v for v in vals)) == \
            math.floor(std * 10 + 0.5)


def _edge_export(path: Path) -> Path:
    """The activities of :func:`test_edges_crossing_overlap_and_empty_windows` in an nsys
    export (each launched by its own call), plus a third gemm on device 1."""
    acts = [Activity("kernel", 7, 1000, 4000, name="gemm"),
            Activity("kernel", 8, 3000, 1000, name="gemm"),
            Activity("kernel", 9, 4500, 4500, name=NCCL),
            Activity("memcpy", 7, 9500, 500, bytes=4096, copy_kind="HtoD",
                     src_kind="Pinned", dst_kind="Device"),
            Activity("kernel", 7, 2000, 500, name="gemm", device=1)]
    return launched_export(path, acts, "window edges")


def test_generated_export_one_row_per_piece(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    p = chunks.plan(path, block_rows=1)
    # one block per row: windows start at 1000, 2000, 3000, 4500, 9500 and cut the kernels
    assert [w[0] for w in p.windows(1)] == [1000, 2000, 3000, 4500, 9500]
    got = executor.gpu_breakdown(path, executor="chunks", chunk_rows=1)
    assert got is not None
    assert got.select("compute_ns", "communication_ns", "memory_ns", "no_gpu_activity_ns",
                      "overlapped_comm_ns").rows() == [(4000, 4000, 500, 500, 500),
                                                       (500, 0, 0, 0, 0)]
    tl = read(path)
    assert got.equals(chunked.gpu_breakdown(attribution.busy_activities(tl)))
    k = executor.kern_sum(path, executor="chunks", chunk_rows=2)
    assert k is not None
    assert k.row(0, named=True) == {
        "Time (%)": 55.0, "Total Time (ns)": 5500, "Instances": 3, "Avg (ns)": 1833.3,
        "Med (ns)": 1000.0, "Min (ns)": 500, "Max (ns)": 4000, "StdDev (ns)": 1893.0,
        "Name": "gemm"}
    assert k.equals(nsys_stats.kern_sum(tl))


def _gpu_columns(bd: pl.DataFrame) -> pl.DataFrame:
    """The GPU-only breakdown's columns out of the full breakdown."""
    rest = ("launch_overhead_ns", "warmup_ns", "host_sync_ns", "idle_ns")
    return bd.select("rank", "device_id", "window_start_ns", "window_end_ns", "window_ns",
                     "compute_ns", "memory_ns", "communication_ns",
                     pl.sum_horizontal(*rest).alias("no_gpu_activity_ns"),
                     "overlapped_comm_ns", "comm_overlap_pct")


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_chunks_equal_memory(path: Path) -> None:
    tl = read(path)
    n = max(tl.gpu.height // 7, 1)  # about 7 pieces (more where tables interleave)
    for name in ("demangled", "short"):
        for by in (None, "device", "stream"):
            mem = nsys_stats.kern_sum(tl, name=name, by=by)  # type: ignore[arg-type]
            got = executor.kern_sum(str(path), name=name, by=by,  # type: ignore[arg-type]
                                    chunk_rows=n)
            if got is None:
                assert mem.height == 0
                continue
            if by is None:
                assert got.equals(mem), (name, by)
            else:  # the in-memory sort leaves exact ties in any order
                assert got.sort(got.columns).equals(mem.sort(mem.columns)), (name, by)
    whole = chunked.gpu_breakdown(attribution.busy_activities(tl))
    assert whole.equals(_gpu_columns(attribution.breakdown(tl)))
    got_b = executor.gpu_breakdown(str(path), chunk_rows=n)
    if got_b is None:
        assert whole.height == 0
    else:
        assert got_b.equals(whole)


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["--no-cache", *args])
    return res.exit_code, res.output


@pytest.mark.parametrize("scenario", ["mini_train", "comm_bound"])
def test_cli_byte_identical(tmp_path: Path, scenario: str) -> None:
    path = str(write_sqlite(scenario, tmp_path / f"{scenario}.sqlite"))
    for fmt in ("table", "csv", "json"):
        for cmd in (["kernels"], ["kernels", "--by", "stream", "--name", "short"],
                    ["breakdown", "--gpu-only"]):
            rc, mem = _cli(*cmd, path, "--format", fmt)
            rc2, got = _cli(*cmd, path, "--format", fmt, "--executor", "chunks",
                            "--chunk-rows", "3")
            assert rc == rc2 == 0 and got == mem, (cmd, fmt)


def test_cli_bad_input_one_line(tmp_path: Path) -> None:
    good = write_sqlite("compute_bound", tmp_path / "c.sqlite")
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(good.read_bytes()[:3000])
    other = tmp_path / "x.json"
    other.write_text('{"traceEvents": []}')
    for args in (["kernels", str(cut), "--executor", "chunks"],
                 ["breakdown", "--gpu-only", str(cut), "--executor", "chunks"],
                 ["kernels", str(other), "--executor", "chunks"],
                 ["kernels", str(good), str(good), "--executor", "chunks"],
                 ["breakdown", "--by-stream", str(good), "--executor", "chunks"],
                 ["breakdown", "--window", "0:9", str(good), "--executor", "chunks"],
                 ["breakdown", "--gpu-only", "--by-stream", str(good)]):
        rc, out = _cli(*args)
        assert rc == 2, args
        assert len(out.strip().splitlines()) == 1 and "Traceback" not in out, out


@pytest.mark.skipif(not HAVE_DASK, reason="distributed is not installed (the optional "
                    "extra traceparse[dask]); the dask executor is not tested")
def test_dask_executor_equals_memory(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    mini = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    for p in (path, mini):
        tl = read(p)
        assert executor.kern_sum(p, executor="dask", chunk_rows=2, workers=2) \
            .equals(nsys_stats.kern_sum(tl))  # type: ignore[union-attr]
        assert executor.gpu_breakdown(p, executor="dask", chunk_rows=2, workers=2) \
            .equals(chunked.gpu_breakdown(attribution.busy_activities(tl)))  # type: ignore[union-attr]
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(Path(path).read_bytes()[:3000])
    rc, out = _cli("kernels", str(bad), "--executor", "dask", "--workers", "1")
    assert rc == 2 and len(out.strip().splitlines()) == 1


@pytest.mark.skipif(not HAVE_DASK, reason="distributed is not installed (the optional "
                    "extra traceparse[dask]); the dask executor is not tested")
def test_dask_running_scheduler(tmp_path: Path) -> None:
    import logging

    from distributed import LocalCluster

    path = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster:
        for cmd in (["kernels"], ["breakdown", "--gpu-only"]):
            rc, mem = _cli(*cmd, path, "--format", "csv")
            rc2, got = _cli(*cmd, path, "--format", "csv", "--chunk-rows", "4",
                            "--executor", f"dask={cluster.scheduler_address}")
            assert rc == rc2 == 0 and got == mem, cmd
    rc, out = _cli("kernels", path, "--executor", "chunks=tcp://x:1")
    assert rc == 2 and "dask=ADDRESS" in out
