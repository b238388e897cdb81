"""``host_sync_by_op`` in pieces (analyses/chunked_host_sync.py, from the chunked
summary's pass-2 spans) against the in-memory frame.

* a generated export whose blocking sync crosses two piece edges, with a zero-length sync
  of another thread on an edge inside the host-sync time, cut one GPU row per piece, two
  and all in one: the per-op ns and calls hand-computed, the summary's verdict and the
  report's ``sync_ops`` equal to memory's;
* every shared nsys export and bundled sample at small pieces (300 GPU rows, the samples
  3): the frame equals :func:`host_sync_by_op` of the whole timeline wherever the
  summary's pass 2 runs in pieces.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import REPO, ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import payload_chunks as pc
from traceparse import summary_chunks as sc
from traceparse.analyses import summary
from traceparse.analyses.gaps import DEFAULT_MIN_NS
from traceparse.analyses.host_sync import host_sync_by_op
from traceparse.nsys.reader import read
from traceparse.nsys.spans import span_plan
from traceparse.reports.payload import build_payload
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Scenario

NSYS = shared_files("nsys", "*.sqlite")
SAMPLES = sorted((REPO / "sample_traces").glob("*.sqlite"))
FILES = NSYS + SAMPLES


def _export(path: Path) -> Path:
    """Device 0: k1 +5..15 us, k2 +40..50, k3 +65..75; the main thread blocks in a
    cudaStreamSynchronize +16..60 us; thread 1 launches k2 at +38..39; thread 2 makes a
    zero-length cudaStreamSynchronize at +30; thread 3 launches k4 on device 1 at +30
    (a piece edge inside device 0's host-sync time); no SM count."""
    k, sync = "cudaLaunchKernel", "cudaStreamSynchronize"
    calls = (
        Call(k, 0, 2 * US, Activity("kernel", 7, 5 * US, 10 * US, "k1")),
        Call(sync, 16 * US, 60 * US, sync="stream"),
        Call(k, 28 * US, 29 * US, Activity("kernel", 9, 30 * US, 1 * US, "k4", device=1),
             tid=3),
        Call(sync, 30 * US, 30 * US, tid=2, sync="stream"),
        Call(k, 38 * US, 39 * US, Activity("kernel", 7, 40 * US, 10 * US, "k2"), tid=1),
        Call(k, 61 * US, 62 * US, Activity("kernel", 7, 65 * US, 10 * US, "k3")),
    )
    samplegen_sqlite.write(Scenario("sync_edges", "host sync pieces", calls), path)
    with sqlite3.connect(path) as con:  # no SM count: no launch can be underfilled
        con.execute("UPDATE TARGET_INFO_GPU SET smCount = 0, name = 'Test GPU'")
    return path


def _pieces(path: Path, rows: int) -> sc.Pieces | None:
    plan = span_plan(str(path), block_rows=rows)
    wins = plan.windows(rows)
    return sc.read_pieces(plan, wins, DEFAULT_MIN_NS) if wins else None


@pytest.mark.parametrize("rows", [1, 2, 100])
def test_generated_export_hand_computed(tmp_path: Path, rows: int) -> None:
    path = _export(tmp_path / "sync.sqlite")
    tl = read(path)
    got = _pieces(path, rows)
    assert got is not None
    # pieces at the GPU row starts +5, +30 (k4), +40, +65 us with one row each
    assert [w[0] for w in span_plan(str(path), block_rows=1).windows(1)] == [
        5 * US, 30 * US, 40 * US, 65 * US]
    frame = sc.sync_by_op(got[4])
    # device 0's host-sync time: +16..38 (launch overhead +38..39: thread 1 issues k2),
    # +39..40 and +50..60 us: 33 us, all in the main thread's sync (14 us before the
    # +30 edge, 9 between +30 and +40, 10 after it), counted once; the zero-length sync
    # at +30 lies inside that time (0 ns, one call): no op recorded around either
    want = pl.DataFrame({"op": [None], "call": ["cudaStreamSynchronize"], "calls": [2],
                         "host_sync_ns": [33 * US]},
                        schema={"op": pl.String, "call": pl.String, "calls": pl.Int64,
                                "host_sync_ns": pl.Int64})
    assert_frame_equal(frame, want, check_exact=True)
    assert_frame_equal(frame, host_sync_by_op(tl), check_exact=True)
    whole = sc.summary(str(path), top=10, min_gap_ns=DEFAULT_MIN_NS, chunk_rows=rows)
    assert whole is not None
    mem = summary.summarize(tl)
    assert whole["verdict"] == mem["verdict"] and "(mostly cudaStreamSynchronize)" in \
        mem["verdict"]
    report = pc.payload(str(path), chunk_rows=rows)
    assert report is not None
    assert report["gaps"]["sync_ops"] == build_payload(tl)["gaps"]["sync_ops"] == [
        {"op": None, "call": "cudaStreamSynchronize", "calls": 2, "host_sync_ns": 33 * US}]


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_equals_memory(path: Path) -> None:
    try:
        got = _pieces(path, 3 if path in SAMPLES else 300)
    except sc.SectionNotInPieces as exc:
        pytest.skip(f"pass 2 not in pieces: {exc}")
    if got is None:
        pytest.skip("no busy GPU activity")
    assert_frame_equal(sc.sync_by_op(got[4]), host_sync_by_op(read(path)), check_exact=True)
