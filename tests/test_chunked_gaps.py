"""``gaps`` on the chunked executors (traceparse/executor.py ``idle_gaps``) against the
in-memory path.

* the first pass (analyses/chunked_gaps.py): hand-computed gaps across window edges, an
  activity that runs over several windows, a sync row that is not busy, min_ns filtering
  after a cut;
* the carried call state (analyses/callparts.py): classifying a piece of the calls with
  the merged state of all pieces gives what the whole gives;
* every shared nsys export with windows of 300 GPU rows (every trace splits into many
  windows): stdout byte-identical to ``--executor memory`` (CSV, JSON, table); a file
  whose spans may not hold what their gaps' rules read (traceparse/nsys/spancheck.py)
  and cannot be met by a wider span is computed in memory and says so on stderr, one
  line naming the file and the lookup;
* generated scenarios with 1-3 GPU rows per window, including a launch queue deeper than
  a window.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import sqlite3
from itertools import pairwise
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files
from perf_helpers import activities

from traceparse import schema
from traceparse.analyses import chunked_gaps
from traceparse.analyses.callparts import call_parts, call_state, medians, merge_call_states
from traceparse.cli import main
from traceparse.nsys import chunks, spancheck
from traceparse.samplegen.scenarios import SCENARIOS, write_sqlite
from traceparse.timeline import Timeline

NSYS = shared_files("nsys", "*.sqlite")
#: the lookups a span may fail (traceparse/nsys/spancheck.py)
REASONS = ("the processes with work on device", "makes CUDA calls in the trace but none",
           "framework-op ranges", spancheck.NO_RECORD, spancheck.HELD_BACK,
           "a process spawn's next CUDA call", "a host range around a gap holds CUDA calls")


def _gaps(acts: pl.DataFrame, edges: list[int], min_ns: int) -> list[tuple[int, int, int]]:
    bounds = list(zip(edges, [*edges[1:], chunks.END], strict=True))
    part = chunked_gaps.merge_gaps([chunked_gaps.window_gaps(acts, a, b, min_ns)
                                    for a, b in bounds], min_ns)
    return [(r[1], r[2], r[3]) for r in chunked_gaps.gap_list(part).iter_rows()]


def test_docstring_example() -> None:
    acts = activities([(0, 0, 100, "compute"), (0, 150, 400, "compute"),
                  (0, 300, 320, "compute"), (0, 450, 500, "compute")])
    assert _gaps(acts, [0, 300], 10) == [(0, 100, 150), (0, 400, 450)]


def test_edges_long_activity_sync_and_cut_below_min() -> None:
    # device 0: [0, 1000) runs over windows [0,200) [200,400) [400,600) [600,...);
    # [300, 310) inside it; [1050, 1100) after a 50 ns gap; device 1: a sync row
    # [0, 500) is not busy, so [100, 700) on device 1 is one gap between two kernels.
    acts = activities([(0, 0, 1000, "compute"), (0, 300, 310, "compute"),
                  (0, 1050, 1100, "memory"), (1, 0, 100, "compute"), (1, 50, 500, "sync"),
                  (1, 700, 800, "compute"),
                  # device 0: a hole [620, 700) inside window 3 that [0, 1000) covers
                  (0, 610, 620, "compute"), (0, 700, 710, "compute")])
    assert _gaps(acts, [0, 200, 400, 600], 10) == [(0, 1000, 1050), (1, 100, 700)]
    # the same on one window (the whole trace)
    assert _gaps(acts, [0], 10) == [(0, 1000, 1050), (1, 100, 700)]
    # a hole cut below min_ns by an earlier activity is dropped: [1000, 1050) is 50 ns
    assert _gaps(acts, [0, 600], 60) == [(1, 100, 700)]


def _cli(args: list[str]) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def _j(n: int, seed: int) -> pl.DataFrame:
    """Joined launches (call_parts' columns): 2 processes, 5 kernel names, call durations
    from 1 to 400 us with a few long ones, blocking calls by name, ties in call start."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 10 * n, n)) * 1000
    dur = rng.integers(1, 40, n) * 1000
    dur[rng.random(n) < 0.05] = 400_000
    names = rng.integers(0, 5, n)
    dur[[int(np.argmax(names == k)) for k in range(3)]] = 500_000  # slow first launches
    return pl.DataFrame({
        "rank": pl.Series([0] * n, dtype=pl.Int32),
        "process_id": rng.integers(1, 3, n),
        "name": pl.Series([f"k{i}" for i in names], dtype=pl.Categorical),
        "kind": pl.Series(["kernel"] * n, dtype=pl.Categorical),
        "call_name": pl.Series(rng.choice(["cudaLaunchKernel", "cudaMemcpy"], n, p=[.9, .1]),
                               dtype=pl.Categorical),
        "api_start_ns": start, "api_end_ns": start + dur,
        "start_ns": start + rng.integers(0, 3, n) * 1000})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_carried_call_state_equals_whole(seed: int) -> None:
    j = _j(400, seed)
    whole = call_parts(j, "cudaMemcpy", 100_000)
    assert (whole == "warmup").sum() >= 1 and (whole == "host_sync").sum() >= 1
    cuts = [0, 37, 150, 151, 300, 400]
    state = merge_call_states([call_state(j.slice(a, b - a), "cudaMemcpy")
                               for a, b in pairwise(cuts)][::-1])
    for a, b in pairwise(cuts):
        piece = j.slice(a, b - a)
        assert call_parts(piece, "cudaMemcpy", 100_000, state).to_list() == \
            whole.slice(a, b - a).to_list(), (a, b)


def test_median_from_counts() -> None:
    # odd and even counts, repeated values: the median polars gives
    for vals in ([5], [5, 9], [1, 2, 2, 7], [3, 3, 3, 10, 11], [4, 1, 8, 8, 2, 6]):
        d = pl.DataFrame({"rank": [0] * len(vals), "process_id": [1] * len(vals),
                          "_dur": vals}).group_by("rank", "process_id", "_dur").agg(
            pl.len().cast(pl.Int64).alias("n"))
        from traceparse.analyses.callparts import CallState

        got = medians(CallState(pl.DataFrame(), d))["_med"].item()
        assert got == pl.Series(vals).median(), vals


@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_chunks_equal_memory(path: Path) -> None:
    for fmt in ("csv", "json", "table"):
        mem = _cli(["--no-cache", "gaps", str(path), "--format", fmt])
        chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "300",
                    str(path), "--format", fmt])
        assert mem[0] == 0
        assert chk[:2] == mem[:2], f"{path.name} {fmt}"
        note = chk[2].replace(mem[2], "", 1).strip()
        if note:  # computed in memory: one line naming the file and the lookup
            assert note.startswith(f"traceparse: {path}: gaps computed in memory, not in "
                                   "chunks: ") and "\n" not in note, note
            assert any(r in note for r in REASONS), note
        if fmt != "csv":
            continue
        # --top N is the head of the same order
        top = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "300",
                    "--top", "3", str(path), "--format", fmt])
        assert top[1].splitlines() == mem[1].splitlines()[:4]


def _shared(name: str) -> Path:
    hit = [p for p in NSYS if p.name == name]
    if not hit:
        pytest.skip(f"{name} not in ../shared/traces/nsys")
    return hit[0]


def _chunked_equals_memory(path: Path) -> tuple[int, str, str]:
    """``gaps --format csv`` of ``path`` in chunks of 300 rows, checked equal (exit code,
    stdout and stderr) to the memory path's; the chunked result."""
    mem = _cli(["--no-cache", "gaps", str(path), "--format", "csv"])
    chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "300",
                str(path), "--format", "csv"])
    assert chk == mem
    return chk


def test_deep_queue_and_lazy_warmup_carried() -> None:
    # uvm-pytorch: a cudaLaunchKernel inside a gap whose kernel starts 46 ms later (past
    # the next window); darknet53: a 678 ms gap whose first launch is lazy warm-up by the
    # trace-wide first launch and median call. Both were wrong in chunks before the state
    # was carried; uvm now runs in chunks (no stderr note) and equals memory.
    path = _shared("uvm-pytorch__report4.sqlite")
    chk = _chunked_equals_memory(path)
    # the gap [6539750394, 6540076859): its launch overhead, read from the export's own
    # tables, is the two launch calls inside it up to their kernels' starts (one kernel at
    # the gap's end, one 46 ms later): 22,083 + 11,369 ns
    gs, ge = 6539750394, 6540076859
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    calls = con.execute(
        "SELECT r.start, r.end, k.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
        "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "WHERE r.start < ? AND r.end > ?", (ge, gs)).fetchall()
    con.close()
    launch = sum(min(e, k) - max(s, gs) for s, e, k in calls if min(e, k) > max(s, gs))
    assert launch == 22_083 + 11_369
    row = next(r for r in csv.DictReader(io.StringIO(chk[1])) if r["start_ns"] == str(gs))
    assert int(row["launch_overhead_ns"]) == launch and row["end_ns"] == str(ge)


def test_lazy_warmup_from_the_whole_trace() -> None:
    # darknet53: a 678 ms gap is warm-up because its cudaLaunchKernel is the first launch
    # of its kernel's name in the trace (and far above the process's median call): the
    # first launches and the median come from every window, not from the gap's span
    path = _shared("darknet-thesis__keras_darknet53.sqlite")
    chk = _chunked_equals_memory(path)
    row = next(r for r in csv.DictReader(io.StringIO(chk[1])) if r["start_ns"] == "999538814")
    assert (row["cause"], row["cause_name"]) == ("warmup", "cudaLaunchKernel_v7000")
    cs = int(row["cause_start_ns"])
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    # the export's own tables: the call's kernel name, and the earliest call launching it
    (name,) = con.execute(
        "SELECT k.demangledName FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
        "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "WHERE r.start = ?", (cs,)).fetchone()
    (first,) = con.execute(
        "SELECT MIN(r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
        "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
        "WHERE k.demangledName = ?", (name,)).fetchone()
    con.close()
    assert first == cs


def test_not_local_falls_back_to_memory(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # a span that fails a check the chunked path cannot meet by reading more: the file is
    # computed in memory, stderr says so in one line naming the file, stdout is memory's
    path = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    mem = _cli(["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    monkeypatch.setattr(spancheck, "_cpu_ops", lambda *a: "framework-op ranges are judged "
                        "against every call of the op")
    chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "3", path,
                "--format", "csv", "--min-gap-us", "1"])
    assert chk[:2] == mem[:2]
    assert chk[2] == (f"traceparse: {path}: gaps computed in memory, not in chunks: "
                      "framework-op ranges are judged against every call of the op\n")


def test_check_processes_per_device() -> None:
    # the plan says processes 1 and 2 work on device 0; the span holds only 1's rows
    plan = chunks.Plan("x.sqlite", (), pairs=frozenset({(1, 0), (2, 0)}))
    tl = Timeline(gpu=schema.conform("gpu", pl.DataFrame({
        "rank": [0, 0], "process_id": [1, 1], "device_id": [0, 0], "stream_id": [7, 7],
        "start_ns": [0, 500], "end_ns": [100, 600], "category": ["compute", "compute"],
        "kind": ["kernel", "kernel"], "name": ["a", "b"]})))
    gaps = pl.DataFrame({"rank": [0], "device_id": [0], "start_ns": [100], "end_ns": [500]})
    assert "processes with work on device 0" in str(
        spancheck.why_not_local(plan, tl, gaps, 0, 600))
    whole = chunks.Plan("x.sqlite", (), pairs=frozenset({(1, 0)}))
    assert spancheck.why_not_local(whole, tl, gaps, 0, 600) is None


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_generated_gaps_across_edges(tmp_path: Path, scenario: str) -> None:
    # the generated scenarios (host sync, launch-bound, training steps) with 1-3 GPU rows
    # per window: every gap crosses or touches a window edge
    path = str(write_sqlite(scenario, tmp_path / f"{scenario}.sqlite"))
    mem = _cli(["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    assert mem[0] == 0, mem
    for rows in (2, 3):
        chk = _cli(["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", str(rows),
                    path, "--format", "csv", "--min-gap-us", "1"])
        assert chk[:2] == mem[:2], (scenario, rows, chk[2])


def test_queue_deeper_than_a_window(tmp_path: Path) -> None:
    # one GPU row per window: a launch call lies several windows before its kernel; the
    # spans reach back the deepest queue and read the kernels of their calls
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
