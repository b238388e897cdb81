"""The what-if replay over time-ordered pieces of an nsys export
(analyses/replay_pieces.py, traceparse/replay_chunks.py, ``whatif --executor chunks``)
against the in-memory replay.

* a generated export whose pieces (one GPU row each) cut a blocking sync (entered in the
  first piece, returned in the second), a queued kernel and a launch-bound kernel (each
  launched in one piece and started in the next): hand-computed replayed ends with and
  without the sync, and ``whatif --fix host-sync`` on both executors;
* a generated export whose launch-overhead interval (a long launch call while the GPU
  sat idle) is cut by a piece edge: a later launch moves earlier by both halves (hand
  computed), ``whatif --no-launch-overhead`` the same on both executors;
* every shared nsys export and every bundled sample, pieces of 300 GPU rows (about 16
  pieces for an export under 1,200, 3 rows for the samples):
  every replayed start and end equal to the in-memory replay's to the nanosecond,
  unchanged (each measured end reproduced), with every blocking sync dropped, with the
  pageable copies pinned, without launch overhead and under CUDA graphs (the whole
  launch host set removed), or the one reasoned fallback
  (``NotOrdered``); the files are named so a new fallback fails;
* ``whatif --fix cuda-graphs|host-sync|pinned-memory``, ``whatif --no-launch-overhead`` and
  ``predict`` (the measured durations) with ``--executor chunks`` byte-identical to
  ``--executor memory``.
* the carried removed length (per rank, across pieces; a sync's return placed later)
  and the whole-trace check that sends a process without blocking syncs to memory.
* an export with step ranges (whose memory summary has per-step rows) replayed in
  memory by every chunked command, with one stderr line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files

from traceparse.analyses.mechanisms import replay_args
from traceparse.analyses.replay import predicted
from traceparse.analyses.replay_pieces import Proc, Removed, State, check_removed
from traceparse.cli import main
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.replay_chunks import GraphNotes, NotOrdered, pieces
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import SCENARIOS, Activity, Call, Scenario, write_sqlite

US = 1000
LAUNCH = "cudaLaunchKernel_v7000"
NSYS = shared_files("nsys", "*.sqlite")
#: shared exports replayed in memory instead, and why (see replay_pieces.NotOrdered)
FALLBACK = {"nsys-ai__mfu_2gpu_before.sqlite": "launched after the edge starts before"}
#: shared exports without any GPU activity (nothing to replay)
NO_GPU = {"qcu__report10.sqlite"}


def _k(start_us: int, end_us: int) -> Activity:
    return Activity("kernel", 7, start_us * US, (end_us - start_us) * US, name="gemm")


def _edge_export(path: Path) -> Path:
    """One stream: A (call 0-5 us, runs 10-50, the stream's first: host-bound), B (call
    6-8, runs 50-90: queued behind A, gap 0), a stream sync entered at 9 that returns at
    95 (blocking: it waits for B, tail 5 us), C (call 100-103, runs 108-118: the stream
    idle since 90, launch-bound, latency 8 us) and D (call 104-106, runs 118-128: queued
    behind C)."""
    calls = (Call(LAUNCH, 0, 5 * US, _k(10, 50)),
             Call(LAUNCH, 6 * US, 8 * US, _k(50, 90)),
             Call("cudaStreamSynchronize_v3020", 9 * US, 95 * US, sync="stream",
                  sync_stream=7),
             Call(LAUNCH, 100 * US, 103 * US, _k(108, 118)),
             Call(LAUNCH, 104 * US, 106 * US, _k(118, 128)))
    return samplegen_sqlite.write(Scenario("edges", "replay across piece edges", calls), path)


def _rows(path: str, rows: int, change: str) -> pl.DataFrame | None:
    got = list(pieces(path, chunk_rows=rows, drop_syncs=change == "host_sync",
                      pinned=change == "pinned_memory",
                      no_launch_overhead=change == "no_launch_overhead",
                      graphs=GraphNotes() if change == "cuda_graphs" else None))
    return pl.concat(got) if got else None


def test_generated_pieces_cut_a_sync_a_queue_and_a_launch(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    # pieces: host time [-inf, 50), [50, 108), [108, 118), [118, inf): A, B and the sync
    # in the first (B runs in the second, the sync returns in it), C and D in the second
    # (C runs in the third, D in the fourth: read there again without their calls)
    assert [w[0] for w in chunks.plan(path, block_rows=1).windows(1)] == [
        10 * US, 50 * US, 108 * US, 118 * US]
    per = [f.height for f in pieces(path, chunk_rows=1)]
    assert per == [2, 2, 0, 0]
    same = pl.concat(list(pieces(path, chunk_rows=1))).sort("start_ns")
    assert same["pred_end_ns"].to_list() == [50 * US, 90 * US, 118 * US, 128 * US]
    # the sync no longer waits: the host goes on at its entry (9 us), 86 us earlier than
    # its return; C's call (100 -> 14) plus its latency (8) is 22 + 10 < B's end 90, so C
    # runs 90..100 and D (queued, gap 0) 100..110
    dropped = pl.concat(list(pieces(path, chunk_rows=1, drop_syncs=True))).sort("start_ns")
    assert dropped["pred_end_ns"].to_list() == [50 * US, 90 * US, 100 * US, 110 * US]
    tl = read(path)
    for drop, got in ((False, same), (True, dropped)):
        mem = predicted(tl, drop_syncs=drop).sort("start_ns")
        assert got["pred_end_ns"].to_list() == mem["pred_end_ns"].to_list()
    # whatif --fix host-sync: window 118 us measured, 100 us replayed (the 18 us the GPU
    # sat idle between B and C, all of its non-busy time): the same on both executors
    out = {}
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, ["whatif", path, "--fix", "host-sync", "--format", "csv",
                                      "--executor", ex, "--chunk-rows", "1"])
        assert r.exit_code == 0, r.output
        out[ex] = r.stdout
    assert out["memory"] == out["chunks"]
    assert out["chunks"].splitlines()[1].startswith("window,0,all,4,118000,100000,")


def test_generated_launch_overhead_cut_by_an_edge(tmp_path: Path) -> None:
    """Device 0, stream 7: A (call 0-5 us, runs 10-20), B (call 22-40: 18 us of launch
    call while the GPU sat idle, the rank's launch overhead [22, 40); runs 45-55) and D
    (call 60-61, runs 63-70, the stream idle since 55: launch-bound, latency 3 us).
    Device 1 (thread 1): C (call 1-2, runs 30-31), whose start is a window edge: the
    pieces are host time [-inf, 30), [30, 45), [45, 63), [63, inf), so the launch
    overhead is 8 us in the first piece and 10 us in the second. Without it, D's call
    moves 18 us earlier (60 -> 42, + 3 us latency = 45 < B's end): D runs 55..62 (B's
    own call is not before itself: it keeps its end)."""
    calls = (Call(LAUNCH, 0, 5 * US, _k(10, 20)),
             Call(LAUNCH, 1 * US, 2 * US,
                  Activity("kernel", 9, 30 * US, 1 * US, name="gemm", device=1), tid=1),
             Call(LAUNCH, 22 * US, 40 * US, _k(45, 55)),
             Call(LAUNCH, 60 * US, 61 * US, _k(63, 70)))
    path = str(samplegen_sqlite.write(Scenario("cut", "launch overhead cut", calls),
                                      tmp_path / "cut.sqlite"))
    assert [w[0] for w in chunks.plan(path, block_rows=1).windows(1)] == [
        10 * US, 30 * US, 45 * US, 63 * US]
    got = list(pieces(path, chunk_rows=1, no_launch_overhead=True))
    assert [f["pred_end_ns"].to_list() for f in got] == [
        [20 * US, 31 * US, 55 * US], [], [62 * US], []]
    mem = predicted(read(path), no_launch_overhead=True).sort("start_ns")
    assert mem["pred_end_ns"].to_list() == [20 * US, 31 * US, 55 * US, 62 * US]
    out = {}
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, ["whatif", path, "--no-launch-overhead", "--format",
                                      "csv", "--executor", ex, "--chunk-rows", "1"])
        assert r.exit_code == 0, r.output
        out[ex] = (r.stdout, r.stderr)
    assert out["memory"][0] == out["chunks"][0] and out["chunks"][1] == ""
    # window 60 us measured (10..70), 52 us without the launch overhead (10..62)
    assert out["chunks"][0].splitlines()[1].startswith("window,0,all,4,60000,52000,")


def _compare(path: str, rows: int) -> str:
    """'chunks' when every replayed start and end equals memory's (unchanged, without
    syncs, pageable copies pinned, without launch overhead, under CUDA graphs), else the
    fallback's reason."""
    tl = read(path)
    key = ["rank", "start_ns", "end_ns", "pred_start_ns", "pred_end_ns"]
    for change in ("none", "host_sync", "pinned_memory", "no_launch_overhead",
                   "cuda_graphs"):
        try:
            got = _rows(path, rows, change)
        except NotOrdered as exc:
            return exc.why
        args: dict[str, object] = (
            {"no_launch_overhead": True} if change == "no_launch_overhead"
            else replay_args(tl, "no_launch_overhead")[0] or {} if change == "cuda_graphs"
            else replay_args(tl, change)[0] or {} if change != "none" else {})
        mem = predicted(tl, **args)  # type: ignore[arg-type]
        if got is None:
            assert mem.height == 0
            return "no GPU activity"
        assert got.height == mem.height
        if change == "none":  # the unchanged replay reproduces every measured end
            assert (got["pred_end_ns"] == got["end_ns"]).all()
        got = got.with_columns(pred_start_ns=pl.col("pred_end_ns") - pl.col("pred_dur_ns"))
        a = got.select(pl.col(c).cast(pl.Int64) for c in key).sort(key)
        b = mem.select(pl.col(c).cast(pl.Int64) for c in key).sort(key)
        assert np.array_equal(a.to_numpy(), b.to_numpy()), (path, change)
    return "chunks"


BUNDLED = sorted((Path(__file__).parent.parent / "sample_traces").glob("*.sqlite"))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_samples_pieces_equal_memory(tmp_path: Path, name: str) -> None:
    path = str(write_sqlite(name, tmp_path / f"{name}.sqlite"))
    assert _compare(path, 3) == "chunks"


@pytest.mark.parametrize("path", BUNDLED, ids=ids(BUNDLED))
def test_bundled_samples_pieces_equal_memory(path: Path) -> None:
    assert len(BUNDLED) >= 5  # the repository's sample exports
    assert _compare(str(path), 3) == "chunks"


def _piece_rows(path: Path) -> int:
    """300 GPU rows a piece (as test_chunked_gaps.py); an export under 1,200 rows in
    about 16 pieces (at least 7 rows each), so that every export is cut."""
    n = sum(b.rows for b in chunks.plan(str(path), block_rows=1 << 30).blocks)
    return 300 if n >= 1200 else max(7, n // 16)


@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_pieces_equal_memory(path: Path) -> None:
    why = _compare(str(path), _piece_rows(path))
    if path.name in FALLBACK:
        assert FALLBACK[path.name] in why
    else:
        assert why == ("no GPU activity" if path.name in NO_GPU else "chunks")


COMMANDS = {"cuda-graphs": ["whatif", "--fix", "cuda-graphs"],
            "host-sync": ["whatif", "--fix", "host-sync"],
            "pinned-memory": ["whatif", "--fix", "pinned-memory"],
            "no-launch-overhead": ["whatif", "--no-launch-overhead"],
            "replay": ["predict"]}


@pytest.mark.parametrize("cmd", list(COMMANDS))
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_cli_byte_identical(path: Path, cmd: str) -> None:
    out = {}
    args = COMMANDS[cmd]
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, [args[0], str(path), *args[1:], "--format", "csv",
                                      "--executor", ex, "--chunk-rows", "300"])
        assert r.exit_code == 0, r.output
        out[ex] = (r.stdout, r.stderr)
    assert out["chunks"][0] == out["memory"][0]
    if path.name in FALLBACK:
        assert out["chunks"][1].count("\n") == 1
        assert f"{path}: {args[0]} replayed in memory, not in chunks" in out["chunks"][1]
    else:
        assert out["chunks"][1] == ""


@pytest.mark.parametrize("fix", ["cuda-graphs", "host-sync", "pinned-memory",
                                 "no-launch-overhead"])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_cli_formats_byte_identical(tmp_path: Path, fmt: str, fix: str) -> None:
    path = str(write_sqlite("sync_bound", tmp_path / "s.sqlite"))
    change = ["--no-launch-overhead"] if fix == "no-launch-overhead" else ["--fix", fix]
    out = [CliRunner().invoke(main, ["whatif", path, *change, "--format", fmt,
                                     *ex]).stdout
           for ex in ([], ["--executor", "chunks", "--chunk-rows", "2"])]
    assert out[0] == out[1] and "window" in out[0]


def test_cli_refuses_what_it_cannot_replay_in_pieces(tmp_path: Path) -> None:
    path = str(write_sqlite("sync_bound", tmp_path / "s.sqlite"))
    r = CliRunner().invoke(main, ["predict", path, "--steps", "step", "--executor", "chunks"])
    assert r.exit_code == 2 and "replays the measured durations only" in r.stderr
    for args in (["--fix", "fusion"], ["--fix", "host-sync", "--speedup", "gemm=2"],
                 ["--no-launch-overhead", "--fix", "host-sync"],
                 ["--no-launch-overhead", "--overlap-comm"]):
        r = CliRunner().invoke(main, ["whatif", path, *args, "--executor", "chunks"])
        assert r.exit_code == 2
        assert ("only --executor chunks with --fix cuda-graphs / host-sync / "
                "pinned-memory or --no-launch-overhead alone") in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_out_of_order_lane_falls_back_to_memory(tmp_path: Path) -> None:
    """Stream 7: A launched at 0 us runs 50-60; B has no launch call (its runtime row is
    deleted), so its host instant is its start, 20 us: B belongs to a later piece than A
    but starts before it. The pieces cannot continue the lane in stream order: the CLI
    says so on one stderr line and prints what memory prints."""
    import sqlite3

    calls = (Call(LAUNCH, 0, 5 * US, _k(50, 60)),
             Call(LAUNCH, 1 * US, 2 * US, Activity("kernel", 8, 10 * US, 5 * US, name="g")),
             Call(LAUNCH, 3 * US, 4 * US, _k(20, 30)))
    path = samplegen_sqlite.write(Scenario("order", "out of order", calls),
                                  tmp_path / "order.sqlite")
    with sqlite3.connect(path) as db:
        assert db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE start = ?",
                          (3 * US,)).rowcount == 1
    assert [w[0] for w in chunks.plan(str(path), block_rows=1).windows(1)] == [
        10 * US, 20 * US, 50 * US]
    with pytest.raises(NotOrdered, match="starts before one launched before it"):
        list(pieces(str(path), chunk_rows=1))
    out = {}
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, ["whatif", str(path), "--fix", "host-sync",
                                      "--executor", ex, "--chunk-rows", "1"])
        assert r.exit_code == 0, r.output
        out[ex] = (r.stdout, r.stderr)
    assert out["chunks"][0] == out["memory"][0]
    assert out["chunks"][1].splitlines() == [
        f"traceparse: {path}: whatif replayed in memory, not in chunks: a lane's activity "
        "launched after the edge starts before one launched before it"]
    # with one piece for the whole file, the same export replays in chunks
    assert _compare(str(path), 1000) == "chunks"


def test_removed_length_carried_per_rank_and_the_whole_trace_check() -> None:
    """Rank 0's intervals [10, 20) and [15, 30) us merge (20 long), rank 1's [20, 25)
    is 5: in the next piece those lengths are carried, plus the piece's own. A sync's
    return past the piece is placed later (-1). A process without blocking syncs that
    launched after launch overhead, beside one with them, falls back."""
    r = Removed()
    r.enter(pl.DataFrame({"rank": [0, 0, 1], "start_ns": [10, 15, 20],
                          "end_ns": [20, 30, 25]}), -chunks.END, 30)
    assert r.at(np.array([0, 0, 1]), np.array([12, 29, 29])).tolist() == [2, 19, 5]
    assert r.known(0, np.array([25, 30])).tolist() == [15, -1]
    r.enter(pl.DataFrame({"rank": [0], "start_ns": [30], "end_ns": [40]}), 30, 50)
    assert r.at(np.array([0, 1]), np.array([35, 45])).tolist() == [25, 5]
    with pytest.raises(NotOrdered, match="lies outside it"):
        r.at(np.array([0]), np.array([29]))
    st = State(procs={(0, 1): Proc(0, synced=True), (0, 2): Proc(0, low=0)})
    check_removed(st)  # its least length is 0 (an activity without a call, or none)
    st.procs[(0, 2)].low = 7
    with pytest.raises(NotOrdered, match="process 2 of rank 0 has no blocking sync"):
        check_removed(st)


@pytest.mark.parametrize("cmd", list(COMMANDS))
def test_step_ranges_fall_back_to_memory(tmp_path: Path, cmd: str) -> None:
    """mini_train has NVTX ``step N`` ranges: the memory summary has one row per step,
    which the pieces do not compute, so the chunked commands replay it in memory (one
    stderr line) instead of printing a summary without them."""
    path = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    args = COMMANDS[cmd]
    out = {}
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, [args[0], path, *args[1:], "--format", "csv",
                                      "--executor", ex, "--chunk-rows", "3"])
        assert r.exit_code == 0, r.output
        out[ex] = (r.stdout, r.stderr)
    assert out["chunks"][0] == out["memory"][0] and "\nstep,0,step 1," in out["memory"][0]
    assert out["chunks"][1].splitlines() == [
        f"traceparse: {path}: {args[0]} replayed in memory, not in chunks: the export has "
        "step ranges (per-step rows are computed in memory only)"]
