"""Collectives read in pieces (traceparse/analyses/chunked_comm.py, traceparse/comm_chunks.py):
the chunked summary's ``communication`` and ``stragglers`` sections.

* a generated export, two devices of one process, whose collectives cross piece edges
  and overlap compute that started in earlier pieces (hand-computed exposed and
  overlapped ns, and stragglers), at one GPU row per piece, three and all in one;
* the window step alone on inline frames (the module docstring's example);
* every export with NCCL kernels (the two ``nsys-ai`` mfu_2gpu exports, the comm_bound
  sample): the frame equals memory's :func:`comm.collectives`, its op-named collectives
  named from memory's ranges (those exports have NVTX ranges: the summary itself falls
  back at ``phases`` before reading them);
* the summary: an export with collectives now falls back at ``savings``
  (``overlap_comm``), no longer at ``communication``; ranges that name collectives
  are refused by name.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from conftest import REPO, ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import comm_chunks
from traceparse import summary_chunks as sc
from traceparse.analyses import chunked_comm as cc
from traceparse.analyses import comm, savings, summary
from traceparse.analyses.gaps import DEFAULT_MIN_NS
from traceparse.nsys.reader import read
from traceparse.nsys.spans import span_plan
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import NCCL, US, Activity, Call, Scenario

#: Every shared export with NCCL/RCCL kernels, and the sample with one.
WITH_NCCL = ([p for p in shared_files("nsys", "*.sqlite") if p.stem.startswith("nsys-ai__mfu")]
             + [REPO / "sample_traces" / "comm_bound.sqlite"])


def _export(path: Path) -> Path:
    """Device 0: compute k1 [5, 55) and k2 [70, 80), k3 [110, 200) on stream 7; allreduce
    A0 [40, 100) and B0 [120, 150) on stream 20. Device 1: compute k4 [60, 65) on stream
    8; allreduce A1 [50, 90) and B1 [130, 160) on stream 21 (us; one process)."""
    k = "cudaLaunchKernel"

    def launch(at: int, stream: int, start: int, dur: int, name: str, device: int) -> Call:
        return Call(k, at * US, (at + 1) * US,
                    Activity("kernel", stream, start * US, dur * US, name, device=device))

    calls = (launch(0, 7, 5, 50, "k1", 0), launch(2, 20, 40, 60, NCCL, 0),
             launch(4, 21, 50, 40, NCCL, 1), launch(6, 8, 60, 5, "k4", 1),
             launch(8, 7, 70, 10, "k2", 0), launch(10, 7, 110, 90, "k3", 0),
             launch(12, 20, 120, 30, NCCL, 0), launch(14, 21, 130, 30, NCCL, 1))
    return samplegen_sqlite.write(Scenario("comm_edges", "comm pieces", calls), path)


def _pieces(path: Path, rows: int) -> pl.DataFrame:
    plan = span_plan(path, block_rows=rows)
    return comm_chunks.collectives(plan, plan.windows(rows))


@pytest.mark.parametrize("rows", [1, 3, 100])
def test_generated_export_hand_computed(tmp_path: Path, rows: int) -> None:
    path = _export(tmp_path / "comm.sqlite")
    tl = read(path)
    got = _pieces(path, rows)
    assert_frame_equal(got, comm.collectives(tl), check_exact=True)
    # A0 [40, 100) under k1 to 55 (15, k1 from an earlier piece) and k2 [70, 80) (10);
    # A1 [50, 90) under k4 [60, 65) (5); B0 [120, 150) wholly under k3 [110, 200), which
    # started a piece earlier; B1 [130, 160): nothing on device 1
    assert got.select("device_id", "start_ns", "dur_ns", "overlapped_ns",
                      "exposed_ns").rows() == [
        (0, 40 * US, 60 * US, 25 * US, 35 * US), (0, 120 * US, 30 * US, 30 * US, 0),
        (1, 50 * US, 40 * US, 5 * US, 35 * US), (1, 130 * US, 30 * US, 0, 30 * US)]
    s = comm.summarize(got)
    assert_frame_equal(s, comm.comm_summary(tl), check_exact=True)
    assert s.select("collective", "count", "ranks", "time_ns", "exposed_ns", "overlapped_ns",
                    "exposed_pct").rows() == [
        ("allreduce", 4, 1, 160 * US, 100 * US, 60 * US, 62.5)]
    # call 0: A0 at 40, A1 at 50; call 1: B0 at 120, B1 at 130: device 1 starts last
    # both times, 10 us each (every call: min end >= max start, one call)
    st = comm.stragglers(comm.skew(got))
    assert_frame_equal(st, comm.straggler_summary(tl), check_exact=True)
    assert st.rows() == [(0, 1, 2, 20 * US, 20 * US, 1.0)]


def test_pieces_cross_edges(tmp_path: Path) -> None:
    """One GPU row per piece: eight windows, and the collectives cross their edges."""
    path = _export(tmp_path / "comm.sqlite")
    assert len(span_plan(path, block_rows=1).windows(1)) == 8


def test_step_carries_reach_and_open_kernels() -> None:
    """The module docstring's example: windows [0, 100) and [100, 200) of device 0."""
    def rows(*r: tuple[str, str, int, int]) -> pl.DataFrame:
        return pl.DataFrame(
            [(0, 0, 7, 1, n, None, None, s, e, e - s, None, None, None, None, 1, "kernel", c)
             for n, c, s, e in r],
            schema={"rank": pl.Int32, "device_id": pl.Int32, "stream_id": pl.Int64,
                    "process_id": pl.Int64, "name": pl.String, "coll_name": pl.String,
                    "coll_pg": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64,
                    "dur_ns": pl.Int64, "coll_group_size": pl.Int32, "coll_dtype": pl.String,
                    "coll_in_nelems": pl.Int64, "coll_out_nelems": pl.Int64,
                    "correlation_id": pl.Int64, "kind": pl.String, "category": pl.String},
            orient="row")
    first = rows(("k", "compute", 50, 150), (NCCL, "communication", 80, 190))
    carry = cc.start(first)
    done, carry = cc.step(first, 0, 100, carry)
    assert done.height == 0 and carry.open["_ov"].to_list() == [20]
    assert carry.reach["end_ns"].to_list() == [150]
    done, carry = cc.step(rows(("k", "compute", 170, 180)), 100, 200, carry)
    assert done["_ov"].to_list() == [80] and carry.open.height == 0
    out = cc.finish([done], carry)
    assert out["start_ns"].to_list() == [80]


@pytest.mark.parametrize("path", WITH_NCCL, ids=ids(WITH_NCCL))
def test_exports_with_collectives_equal_memory(path: Path) -> None:
    tl = read(path)
    rows = 3 if "sample_traces" in str(path) else 300
    plan = span_plan(path, block_rows=rows)
    got = comm_chunks.collectives(plan, plan.windows(rows), tl.ranges)
    assert got.height and got.height == tl.gpu.filter(
        (pl.col("kind") == "kernel") & (pl.col("category") == "communication")).height
    assert_frame_equal(got, comm.collectives(tl), check_exact=True)
    assert_frame_equal(comm.summarize(got).head(10),
                       summary.summarize(tl)["sections"]["communication"], check_exact=True)
    assert_frame_equal(comm.stragglers(comm.skew(got)), comm.straggler_summary(tl),
                       check_exact=True)


def test_summary_composed_with_collectives(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole summary of the generated export (its savings from memory: overlap_comm
    is not computed in pieces), at one row per piece and all in one; end to end it
    falls back at ``savings``."""
    path = _export(tmp_path / "comm.sqlite")
    tl = read(path)
    mem = summary.summarize(tl)
    with pytest.raises(sc.SectionNotInPieces) as exc:
        sc.summary(str(path), top=10, min_gap_ns=DEFAULT_MIN_NS, chunk_rows=1)
    assert exc.value.section == "savings" and "overlap_comm" in exc.value.why
    monkeypatch.setattr(sc, "_savings", lambda *_: savings.savings(tl))
    for rows in (1, 100):
        plan = span_plan(path, block_rows=rows)
        got = sc.compose(str(path), rows, 10,
                         *sc.read_pieces(plan, plan.windows(rows), DEFAULT_MIN_NS))  # type: ignore[misc]
        for name, frame in mem["sections"].items():
            assert_frame_equal(got["sections"][name], frame, check_exact=True)
        assert got["verdict"] == mem["verdict"]


def test_op_ranges_refused(tmp_path: Path) -> None:
    path = _export(tmp_path / "comm.sqlite")
    plan = span_plan(path, block_rows=100)
    with pytest.raises(comm_chunks.OpNamed, match="nvtx_push_pop"):
        comm_chunks.sections(plan, plan.windows(100), 10, frozenset({"nvtx_push_pop", "osrt"}))
    got = comm_chunks.sections(plan, plan.windows(100), 10, frozenset({"osrt"}))
    assert got[0].height == 1 and got[1].height == 1


@pytest.mark.parametrize("path", [None, REPO / "sample_traces" / "comm_bound.sqlite"],
                         ids=["generated", "comm_bound"])
def test_payload_comm_in_pieces(path: Path | None, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixes' payload (its savings from memory) with collectives: the ``comm``
    section (per collective, stragglers, largest skews, the concurrency note) and every
    other section equal memory's."""
    from traceparse import payload_chunks as pc
    from traceparse.reports.payload import build_payload

    path = path or _export(tmp_path / "comm.sqlite")
    tl = read(path)
    want = dict(build_payload(tl))
    want.pop("timeline")
    monkeypatch.setattr(sc, "_savings", lambda *_: savings.savings(tl))
    for rows in (1, 3):
        got = pc.payload(str(path), chunk_rows=rows)
        assert got is not None and sorted(got) == sorted(want)
        assert got["comm"] == want["comm"] and got["comm"]["collectives"]
        for key in want:
            assert got[key] == want[key], key


def test_concurrency_in_pieces(tmp_path: Path) -> None:
    """Two collectives at once on one device, one under compute from an earlier piece
    (:func:`comm.concurrency`'s docstring example, us): compute [0, 50); allreduce
    [0, 100) and a second [80, 120) on another stream -> concurrent 20, exposed 20."""
    k = "cudaLaunchKernel"
    calls = (Call(k, 0, 1, Activity("kernel", 7, 0, 50 * US, "k1")),
             Call(k, 2, 3, Activity("kernel", 20, 0, 100 * US, NCCL)),
             Call(k, 4, 5, Activity("kernel", 21, 80 * US, 40 * US, NCCL)))
    path = samplegen_sqlite.write(Scenario("conc", "concurrency", calls), tmp_path / "c.sqlite")
    tl = read(path)
    want = comm.concurrency(tl)
    assert want == {"concurrent_ns": 20 * US, "concurrent_exposed_ns": 20 * US}
    for rows in (1, 3):
        plan = span_plan(path, block_rows=rows)
        c, under = comm_chunks.collected(plan, plan.windows(rows))
        assert under == 50 * US and comm.concurrency_of(c, under) == want
