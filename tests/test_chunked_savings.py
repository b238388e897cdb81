"""The CUDA-graphs replay and the savings engine over time-ordered pieces of an nsys
export (``replay_chunks.graph_segments``, ``savings_chunks.savings``,
``executor_breakdown.span_launch_set_task``) against the in-memory engine.

* a generated export whose launch call runs while the GPU is busy and is cut by a piece
  edge: the CUDA-graphs fix removes both halves (busy time included, unlike the launch
  overhead), hand-computed replayed ends, the fix's note, ``whatif --fix cuda-graphs``
  and the savings frame the same on both executors;
* a generated export whose fusion chain crosses three piece edges and passes through a
  piece with no activity of its lane: the fusion fix's hand-computed saving and notes,
  equal to memory at 1, 2 and 1,000 GPU rows a piece; a copy between two fusible
  kernels breaks the chain (no row) in pieces as in memory;
* every generated sample (3 GPU rows a piece) and every shared nsys export at small
  pieces: the chunked breakdown equal to the
  attribution, and ``savings_chunks.savings`` equal to ``savings.savings`` frame for
  frame, or the named refusal listed in :data:`REFUSED` (a new refusal fails).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids
from polars.testing import assert_frame_equal
from test_chunked_replay import LAUNCH, NSYS, US, _k, _piece_rows

from traceparse import executor_breakdown as eb
from traceparse import replay_chunks as rc
from traceparse import savings_chunks as svc
from traceparse.analyses.attribution import breakdown as attribution
from traceparse.analyses.mechanisms import replay_args
from traceparse.analyses.replay import predicted
from traceparse.analyses.savings import savings
from traceparse.cli import main
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import SCENARIOS, Activity, Call, Scenario, write_sqlite

#: shared exports whose savings the pieces refuse, and why (a substring of the reason)
REFUSED = {
    "nsys-ai__mfu_2gpu_after.sqlite": "overlap_comm: the export has communication",
    "nsys-ai__mfu_2gpu_before.sqlite": "launched after the edge starts before",
    "p2p-acc__mpiV100.sqlite": "overlap_comm: the export has communication",
}


def _busy_export(path: Path) -> str:
    """Device 0, stream 7: A (call 0-2 us, runs 5-50), B (call 10-30: a 20 us launch call
    while A keeps the GPU busy; runs 50-60, queued behind A) and D (call 70-71, runs
    75-80: the stream idle since 60, launch-bound, latency 5 us from its call). Device 1
    (thread 1): C (call 3-4, runs 20-21), whose start is a window edge: the pieces are
    host time [-inf, 20), [20, 50), [50, 75), [75, inf), so B's call is cut at 20 us."""
    calls = (Call(LAUNCH, 0, 2 * US, _k(5, 50)),
             Call(LAUNCH, 3 * US, 4 * US,
                  Activity("kernel", 9, 20 * US, 1 * US, name="gemm", device=1), tid=1),
             Call(LAUNCH, 10 * US, 30 * US, _k(50, 60)),
             Call(LAUNCH, 70 * US, 71 * US, _k(75, 80)))
    return str(samplegen_sqlite.write(Scenario("busy", "launch set cut while busy", calls),
                                      path))


def test_generated_launch_set_cut_while_the_gpu_is_busy(tmp_path: Path) -> None:
    """The launch host set is every launch call (the GPU busy or not): [0, 2), [3, 4),
    [10, 30) (cut: [10, 20) in the first piece, [20, 30) in the second) and [70, 71),
    24 us on rank 0. A call moves earlier by the length before its entry: C (call 3) by
    2 us, starting 18 (host-bound, latency 17) and ending 19; B by 3, still queued
    behind A (ends 60); D by 23 (call 70 -> 47, + 5 latency = 52 < B's end 60): D runs
    60..65. The launch overhead alone (the GPU idle) leaves D at 80."""
    path = _busy_export(tmp_path / "busy.sqlite")
    assert [w[0] for w in chunks.plan(path, block_rows=1).windows(1)] == [
        5 * US, 20 * US, 50 * US, 75 * US]
    notes = rc.GraphNotes()
    got = list(rc.pieces(path, chunk_rows=1, graphs=notes))
    assert [f["pred_end_ns"].to_list() for f in got] == [
        [50 * US, 19 * US, 60 * US], [], [65 * US], []]
    tl = read(path)
    args, mem_notes = replay_args(tl, "no_launch_overhead")
    assert args is not None
    mem = predicted(tl, **args).sort("start_ns")
    assert mem["pred_end_ns"].to_list() == [50 * US, 19 * US, 60 * US, 65 * US]
    assert notes.notes() == mem_notes == ["host issuing time removed, rank 0: 24.0 µs"]
    # the launch overhead alone (the GPU idle: D's own call [70, 71), not before itself)
    # does not move D
    lo = pl.concat(list(rc.pieces(path, chunk_rows=1, no_launch_overhead=True)))
    assert lo.sort("start_ns")["pred_end_ns"].to_list()[-1] == 80 * US
    out = {}
    for ex in ("memory", "chunks"):
        r = CliRunner().invoke(main, ["whatif", path, "--fix", "cuda-graphs", "--format",
                                      "csv", "--executor", ex, "--chunk-rows", "1"])
        assert r.exit_code == 0, r.output
        out[ex] = (r.stdout, r.stderr)
    assert out["memory"][0] == out["chunks"][0] and out["chunks"][1] == ""
    # window 75 us measured (5..80), 60 us replayed (5..65): the GPU's busy time (45 +
    # 10 + 5 on device 0, 1 on device 1 inside it), so the cap does not bind
    assert out["chunks"][0].splitlines()[1].startswith("window,0,all,4,75000,60000,")
    assert_frame_equal(svc.savings(path, chunk_rows=1), savings(tl))


def _chain_export(path: Path) -> str:
    """Stream 7: three elementwise kernels (one fusion chain, each longer than a kernel's
    fixed cost): A (call 0-1 us, runs 2-7), B (call 10-11, runs 12-15), D (call 13-14,
    runs 17-21, queued 2 us behind B). Stream 9: C (gemm, call 3-4, runs 8-9) and E
    (gemm, call 9-9.5, runs 9.6-10). At one GPU row a window the pieces are host time
    [-inf, 8), [8, 9.6), [9.6, 12), [12, 17), [17, inf): A in the first, B in the third,
    D in the fourth, so the chain crosses three edges and passes through the second
    piece (only E's call) with no activity of its lane."""
    def k(at: int, dur: int, stream: int = 7, name: str = "vectorized_elementwise_kernel"
          ) -> Activity:
        return Activity("kernel", stream, at, dur, name=name)

    calls = (Call(LAUNCH, 0, 1 * US, k(2 * US, 5 * US)),
             Call(LAUNCH, 3 * US, 4 * US, k(8 * US, 1 * US, 9, "gemm")),
             Call(LAUNCH, 9 * US, 9_500, k(9_600, 400, 9, "gemm")),
             Call(LAUNCH, 10 * US, 11 * US, k(12 * US, 3 * US)),
             Call(LAUNCH, 13 * US, 14 * US, k(17 * US, 4 * US)))
    return str(samplegen_sqlite.write(Scenario("chain", "a chain across edges", calls), path))


@pytest.mark.parametrize("rows", [1, 2, 1000])
def test_generated_fusion_chain_across_edges(tmp_path: Path, rows: int) -> None:
    """The chain A, B, D fused: A and B last 0, D as long as the longest (A's 5 us). Its
    launch calls span [0, 13) us, so the launch calls inside it are removed: [0, 1),
    [3, 4), [9, 9.5) (in the piece the chain passes through) and [10, 11), 3.5 us. A
    (no time removed before its call) starts 2 us after it and ends at once (2 us); B's
    call moves to 10 - 2.5 = 7.5, after A's measured end, so B is host-bound: 7.5 + its
    2 us latency = 9.5, lasting 0; D was queued behind B (its call returned at 14, before
    B's end 15) and keeps its 2 us gap: 9.5 + 2 + 5 = 16.5. The window 2..21 (19 us)
    becomes 2..16.5 (14.5 us): 4.5 us saved, the same frame and notes as memory at 1, 2
    and 1,000 GPU rows a window. With a copy between A and B, B and D alone chain."""
    path = _chain_export(tmp_path / "chain.sqlite")
    assert [w[0] for w in chunks.plan(path, block_rows=1).windows(1)] == [
        2 * US, 8 * US, 9_600, 12 * US, 17 * US]
    mem = savings(read(path))
    got = svc.savings(path, chunk_rows=rows)
    assert_frame_equal(got, mem)
    row = got.filter(pl.col("change") == "fusion").row(0, named=True)
    assert (row["measured_ns"], row["predicted_ns"], row["saving_ns"]) == (
        19 * US, 14_500, 4_500)
    assert row["note"].startswith("1 chains of 3 fusible kernels, each fused into one "
                                  "kernel: 1 as long as the chain's longest; the largest "
                                  "saving: 3 kernels")
    assert row["note"].endswith("12.0 µs of kernel time fused into 5.0 µs")


def test_generated_fusion_chain_broken_by_a_copy(tmp_path: Path) -> None:
    """Two elementwise kernels of 5 us launched in two pieces with a copy between them
    on their stream: no chain, no fusion row, in memory or in pieces; without the copy
    one chain across the edge, equal to memory."""
    def kern(a: int) -> Activity:
        return Activity("kernel", 7, a * US, 5 * US, name="vectorized_elementwise_kernel")

    calls = (Call(LAUNCH, 0, 1 * US, kern(10)), Call(LAUNCH, 12 * US, 13 * US, kern(20)))
    path = str(samplegen_sqlite.write(Scenario("chain", "a chain cut", calls),
                                      tmp_path / "chain.sqlite"))
    sv = savings(read(path))
    assert "fusion" in sv["change"].to_list()
    assert_frame_equal(svc.savings(path, chunk_rows=1), sv)
    calls = (calls[0], Call("cudaMemcpyAsync_v3020", 5 * US, 6 * US,
                            Activity("memcpy", 7, 16 * US, 1 * US, copy_kind="HtoD",
                                     bytes=1 << 20, src_kind="Pinned", dst_kind="Device")),
             calls[1])
    path = str(samplegen_sqlite.write(Scenario("nochain", "no chain", calls),
                                      tmp_path / "nochain.sqlite"))
    sv = savings(read(path))
    assert "fusion" not in sv["change"].to_list()
    assert_frame_equal(svc.savings(path, chunk_rows=1), sv)


@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_savings_equal_memory(path: Path) -> None:
    """The chunked breakdown (what the chunked summary passes) equals the attribution,
    and the savings computed in pieces with it equal the engine's, or are refused."""
    rows = _piece_rows(path)
    tl = read(str(path))
    mem = savings(tl)
    bd = eb.breakdown(str(path), chunk_rows=rows)
    if bd is not None:
        assert_frame_equal(bd[0].sort("rank", "device_id"),
                           attribution(tl).sort("rank", "device_id"))
    try:
        got = svc.savings(str(path), chunk_rows=rows,
                         breakdown=None if bd is None else bd[0])
    except rc.NotOrdered as exc:
        assert path.name in REFUSED, exc.why
        assert REFUSED[path.name] in exc.why
        return
    assert path.name not in REFUSED
    assert_frame_equal(got, mem)
    if mem.height:
        assert set(mem["change"]) >= {"no_launch_overhead", "host_sync"}


#: samples whose savings the pieces refuse, and the change named
SAMPLE_REFUSED = {"comm_bound": "overlap_comm", "mini_train": "no_launch_overhead"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_samples_savings_equal_memory(tmp_path: Path, name: str) -> None:
    """Every generated sample at 3 GPU rows a piece: the frame equal to the engine's, or
    the change named (communication: ``overlap_comm``; step ranges:
    ``no_launch_overhead``, one CUDA-graph region per step). ``launch_bound``'s chain of
    elementwise kernels is fused in pieces (:mod:`traceparse.fusion_chunks`)."""
    path = str(write_sqlite(name, tmp_path / f"{name}.sqlite"))
    mem = savings(read(path))
    try:
        got = svc.savings(path, chunk_rows=3)
    except svc.ChangeNotInPieces as exc:
        assert exc.change == SAMPLE_REFUSED.get(name), exc.why
        assert exc.change in mem["change"].to_list()
        return
    assert name not in SAMPLE_REFUSED
    assert_frame_equal(got, mem)


@pytest.mark.parametrize("rows", [1, 1000])
def test_launch_bound_chain_one_and_all_rows_a_piece(tmp_path: Path, rows: int) -> None:
    """The ``launch_bound`` sample's one chain of 10 GELU kernels (11 GPU rows): at one
    GPU row a piece it crosses every edge, at 1,000 none; the fusion row (103 us window
    replayed to 13 us) and both notes equal memory's either way."""
    path = str(write_sqlite("launch_bound", tmp_path / "launch_bound.sqlite"))
    mem = savings(read(path))
    got = svc.savings(path, chunk_rows=rows)
    assert_frame_equal(got, mem)
    row = got.filter(pl.col("change") == "fusion").row(0, named=True)
    assert (row["measured_ns"], row["predicted_ns"]) == (103 * US, 13 * US)
    assert row["note"].startswith("1 chains of 10 fusible kernels")
