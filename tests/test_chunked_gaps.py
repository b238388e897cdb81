"""``gaps`` on the chunked executors (traceparse/executor.py ``idle_gaps``) against the
in-memory path.

* the first pass (analyses/chunked_gaps.py): hand-computed gaps across window edges, an
  activity that runs over several windows, a sync row that is not busy, min_ns filtering
  after a cut;
* every shared nsys export with windows of 300 GPU rows (every trace splits into many
  windows): CSV byte-identical to ``--executor memory``. Two exports still differ and are
  marked xfail(strict) with the rule that is not local yet (docs/performance.md,
  "Chunked gaps").
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files

from traceparse.analyses import chunked_gaps
from traceparse.cli import main
from traceparse.nsys import chunks
from traceparse.samplegen.scenarios import SCENARIOS, write_sqlite

NSYS = shared_files("nsys", "*.sqlite")
#: exports whose chunked gaps still differ, with the non-local rule that causes it
NOT_LOCAL = {
    "darknet-thesis__keras_darknet53.sqlite":
        "lazy-loading warm-up: a name's first launch and the process's median call are "
        "trace-wide",
    "uvm-pytorch__report4.sqlite":
        "a launch call in a gap whose kernel starts 46 ms later, past the next window",
}


def _acts(rows: list[tuple[int, int, int, str]]) -> pl.DataFrame:
    return pl.DataFrame({"rank": [0] * len(rows), "device_id": [r[0] for r in rows],
                         "start_ns": [r[1] for r in rows], "end_ns": [r[2] for r in rows],
                         "category": [r[3] for r in rows]},
                        schema={"rank": pl.Int32, "device_id": pl.Int32, "start_ns": pl.Int64,
                                "end_ns": pl.Int64, "category": pl.String})


def _gaps(acts: pl.DataFrame, edges: list[int], min_ns: int) -> list[tuple[int, int, int]]:
    bounds = list(zip(edges, [*edges[1:], chunks.END], strict=True))
    part = chunked_gaps.merge_gaps([chunked_gaps.window_gaps(acts, a, b, min_ns)
                                    for a, b in bounds], min_ns)
    return [(r[1], r[2], r[3]) for r in chunked_gaps.gap_list(part).iter_rows()]


def test_docstring_example() -> None:
    acts = _acts([(0, 0, 100, "compute"), (0, 150, 400, "compute"),
                  (0, 300, 320, "compute"), (0, 450, 500, "compute")])
    assert _gaps(acts, [0, 300], 10) == [(0, 100, 150), (0, 400, 450)]


def test_edges_long_activity_sync_and_cut_below_min() -> None:
    # device 0: [0, 1000) runs over windows [0,200) [200,400) [400,600) [600,...);
    # [300, 310) inside it; [1050, 1100) after a 50 ns gap; device 1: a sync row
    # [0, 500) is not busy, so [100, 700) on device 1 is one gap between two kernels.
    acts = _acts([(0, 0, 1000, "compute"), (0, 300, 310, "compute"),
                  (0, 1050, 1100, "memory"), (1, 0, 100, "compute"), (1, 50, 500, "sync"),
                  (1, 700, 800, "compute"),
                  # device 0: a hole [620, 700) inside window 3 that [0, 1000) covers
                  (0, 610, 620, "compute"), (0, 700, 710, "compute")])
    assert _gaps(acts, [0, 200, 400, 600], 10) == [(0, 1000, 1050), (1, 100, 700)]
    # the same on one window (the whole trace)
    assert _gaps(acts, [0], 10) == [(0, 1000, 1050), (1, 100, 700)]
    # a hole cut below min_ns by an earlier activity is dropped: [1000, 1050) is 50 ns
    assert _gaps(acts, [0, 600], 60) == [(1, 100, 700)]


def _cli(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.output


@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_chunks_equal_memory(path: Path) -> None:
    if path.name in NOT_LOCAL:
        pytest.xfail(NOT_LOCAL[path.name])
    for fmt in ("csv", "json", "table"):
        mem = _cli(["--no-cache", "gaps", str(path), "--format", fmt])
        chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "300",
                    str(path), "--format", fmt])
        assert mem[0] == 0
        assert chk == mem, f"{path.name} {fmt}"
        if fmt != "csv":
            continue
        # --top N is the head of the same order
        top = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "300",
                    "--top", "3", str(path), "--format", fmt])
        assert top[1].splitlines() == mem[1].splitlines()[:4]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_generated_gaps_across_edges(tmp_path: Path, scenario: str) -> None:
    # the generated scenarios (host sync, launch-bound, training steps) with 1-3 GPU rows
    # per window: every gap crosses or touches a window edge
    path = str(write_sqlite(scenario, tmp_path / f"{scenario}.sqlite"))
    mem = _cli(["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    assert mem[0] == 0 and len(mem[1].splitlines()) > 1, mem
    for rows in (2, 3):
        chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", str(rows),
                    path, "--format", "csv", "--min-gap-us", "1"])
        assert chk == mem, (scenario, rows)


@pytest.mark.xfail(strict=True, reason="not local yet: with one GPU row per window, a "
                   "launch call lies more than one window before its kernel (queue depth), "
                   "outside the span the gap's window reads (docs/performance.md)")
def test_queue_deeper_than_the_margin(tmp_path: Path) -> None:
    path = str(write_sqlite("compute_bound", tmp_path / "c.sqlite"))
    mem = _cli(["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "1", path,
                "--format", "csv", "--min-gap-us", "1"])
    assert chk == mem


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="--executor dask needs the optional 'distributed' package")
def test_dask_executor_equals_memory(tmp_path: Path) -> None:
    path = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    mem = _cli(["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    chk = _cli(["--no-cache", "gaps", "--executor", "dask", "--workers", "2", "--chunk-rows",
                "3", path, "--format", "csv", "--min-gap-us", "1"])
    assert chk == mem
