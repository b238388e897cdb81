"""Issue 25: exact stream and event ids of stream waits on nsys exports
(:mod:`traceparse.nsys.syncids`, :mod:`traceparse.analyses.streamwait`).

A generated export with CUPTI synchronization and CUDA-event records and a hand-computed
answer, the same export without them (the waiting stream inferred), and a shared export whose
records give the ids.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import TRACES

from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.streamwait import EXACT, INFERRED, NO_PRODUCER, stream_waits
from traceparse.nsys.reader import read
from traceparse.nsys.syncids import CUDA_EVENT, NO_CALL, SYNC
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import FIRST_CORRELATION_ID, PID, Activity, Call, Scenario

US = 1_000
LAUNCH = "cudaLaunchKernel_v7000"
WAIT = "cudaStreamWaitEvent_v3020"
RECORD = "cudaEventRecord_v3020"
B = 77  # the second thread


def _calls() -> tuple[Call, ...]:
    """Thread A (main) and thread B of one process, times in us:

    A  cudaLaunchKernel [0,1)    -> K0 on stream 1 [10,100)   (the producer of event 5)
    A  cudaEventRecord  [2,3)       event 5 on stream 1
    B  cudaStreamWaitEvent [20,21)  stream 4 waits on event 5
    B  cudaStreamWaitEvent [22,23)  stream 2 waits on event 9 (recorded by no call here)
    B  cudaLaunchKernel [24,25)  -> K2 on stream 3 [30,40)    (B's next launch)
    A  cudaLaunchKernel [40,41)  -> K3 on stream 4 [100,110)
    A  cudaLaunchKernel [42,43)  -> K1 on stream 2 [400,410)
    """
    def k(name: str, stream: int, s: int, e: int) -> Activity:
        return Activity("kernel", stream, s * US, (e - s) * US, name)

    return (Call(LAUNCH, 0, 1 * US, k("K0", 1, 10, 100)),
            Call(RECORD, 2 * US, 3 * US),
            Call(WAIT, 20 * US, 21 * US, tid=B),
            Call(WAIT, 22 * US, 23 * US, tid=B),
            Call(LAUNCH, 24 * US, 25 * US, k("K2", 3, 30, 40), tid=B),
            Call(LAUNCH, 40 * US, 41 * US, k("K3", 4, 100, 110)),
            Call(LAUNCH, 42 * US, 43 * US, k("K1", 2, 400, 410)))


def _export(path: Path, *, ids: bool) -> Path:
    sc = Scenario("waits", "stream waits with and without their ids", _calls(),
                  threads=((PID, "python3"), (B, "worker")))
    samplegen_sqlite.write(sc, path)
    if not ids:
        return path
    gpid = samplegen_sqlite.global_pid(PID)
    corr = {i: FIRST_CORRELATION_ID + i for i in range(len(sc.calls))}
    with sqlite3.connect(path) as db:
        db.execute(f"DROP TABLE IF EXISTS {SYNC}")
        db.execute(f"CREATE TABLE {SYNC} (start INTEGER, end INTEGER, deviceId INTEGER, "
                   "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid "
                   "INTEGER, syncType INTEGER, eventId INTEGER)")
        # syncType 3: what the older exports write for a stream wait (the ids say what it is)
        db.executemany(f"INSERT INTO {SYNC} VALUES (?,?,?,?,?,?,?,?,?)", [
            (20 * US, 21 * US, 0, 1, 4, corr[2], gpid, 3, 5),
            (22 * US, 23 * US, 0, 1, 2, corr[3], gpid, 3, 9),
            (0, 1, 0, 1, 2, 999_999, gpid, 3, 9)])  # a row whose call is not in the export
        db.execute(f"CREATE TABLE {CUDA_EVENT} (deviceId INTEGER, contextId INTEGER, "
                   "streamId INTEGER, correlationId INTEGER, globalPid INTEGER, "
                   "eventId INTEGER)")
        db.execute(f"INSERT INTO {CUDA_EVENT} VALUES (0, 1, 1, ?, ?, 5)", (corr[1], gpid))
    db.close()
    return path


def test_records_give_the_waiting_stream_the_event_and_its_producer(tmp_path: Path) -> None:
    tl = read(_export(tmp_path / "ids.sqlite", ids=True))
    # ingest: parsed + skipped = input rows for both tables
    acct = {(r["source"], r["outcome"], r["reason"]): r["count"]
            for r in tl.ingest.iter_rows(named=True) if r["source"] in (SYNC, CUDA_EVENT)}
    assert acct == {(SYNC, "parsed", None): 2, (SYNC, "skipped", NO_CALL): 1,
                    (CUDA_EVENT, "parsed", None): 1}
    calls = tl.api.filter(pl.col("stream_id").is_not_null()).sort("start_ns")
    assert calls.select(pl.col("name").cast(pl.String), "stream_id", "event_id").rows() == [
        (RECORD, 1, 5), (WAIT, 4, 5), (WAIT, 2, 9)]
    # wait 1: stream 4 held K3 (launched by A at 40, after the wait) over [41, 100): its
    # event 5 was recorded on stream 1 after K0, which ends at 100. wait 2: stream 2 held K1
    # over [43, 400); event 9 has no record here.
    sw = stream_waits(tl).sort("stream_id")
    assert sw.select("stream_id", "start_ns", "end_ns", "blocked_name", "event_id",
                     "producer", "stream_source").rows() == [
        (2, 43 * US, 400 * US, "K1", 9, NO_PRODUCER, EXACT),
        (4, 41 * US, 100 * US, "K3", 5, "K0 (stream 1)", EXACT)]
    assert sw["event"].to_list() == ["9 (its record not in this trace)",
                                     f"5 (recorded by {RECORD} at {2 * US} ns on stream 1)"]
    # the GPU idles [110, 400): the stream-2 hold covers it
    g = idle_gaps(tl).row(0, named=True)
    assert (g["start_ns"], g["end_ns"], g["cause"]) == (110 * US, 400 * US, "stream_wait")
    assert g["cause_name"] == (f"{WAIT} on stream 2: held K1 back; event 9 (its record not in "
                               f"this trace); {NO_PRODUCER}; {EXACT}")


def test_without_records_the_stream_is_inferred_and_says_so(tmp_path: Path) -> None:
    # the same calls without the two tables: B's waits are matched to B's next launch, K2 on
    # stream 3 ([30,40) after its call ended at 25: held [25,30)); the process's last record
    # (A's, at 2) names A's last launch before it, K0, as the producer. The [110,400) gap is
    # no longer a stream wait: nothing in the file says stream 2 waited.
    tl = read(_export(tmp_path / "plain.sqlite", ids=False))
    assert tl.api["stream_id"].null_count() == tl.api.height
    sw = stream_waits(tl)
    assert sw.select("stream_id", "start_ns", "end_ns", "producer", "stream_source").rows() \
        == [(3, 25 * US, 30 * US, "K0 (stream 1)", INFERRED)]
    g = idle_gaps(tl).row(0, named=True)
    assert (g["start_ns"], g["end_ns"]) == (110 * US, 400 * US) and g["cause"] != "stream_wait"


DLPROF = TRACES / "nsys" / "dlprof__nsys_profile.sqlite"


@pytest.mark.shared
@pytest.mark.skipif(not DLPROF.exists(), reason=f"{DLPROF.name} not in the corpus")
def test_shared_export_waits_are_joined_to_their_records() -> None:
    # dlprof's export has 68 synchronization rows (40 stream waits) and 58 CUDA-event records.
    # Independent count with sqlite3: the waits with both ids, and the record of each
    # waited event on its recording stream.
    con = sqlite3.connect(f"file:{DLPROF}?mode=ro", uri=True)
    waits = con.execute(f"SELECT streamId, eventId, correlationId FROM {SYNC} WHERE streamId "
                        "!= 4294967295 AND eventId != 4294967295").fetchall()
    con.close()
    tl = read(DLPROF)
    w = tl.api.filter(pl.col("name").cast(pl.String).str.starts_with("cudaStreamWaitEvent"))
    assert sorted(w.select("stream_id", "event_id", "correlation_id").rows()) == sorted(waits)
    sw = stream_waits(tl)
    assert sw.height and set(sw["stream_source"]) == {EXACT}
    # the hold the file shows: a wait on stream 7 for event 8, recorded on stream 20
    row = sw.row(0, named=True)
    assert (row["stream_id"], row["event_id"]) == (7, 8)
    assert row["event"].startswith("8 (recorded by cudaEventRecord_v3020") \
        and row["event"].endswith("on stream 20)")


def test_kineto_stream_wait_event_rows_give_the_ids(tmp_path: Path) -> None:
    # Kineto: cudaEventRecord (corr 1) on thread 1; cudaStreamWaitEvent (corr 2) on thread 2
    # whose cuda_sync "Stream Wait Event" row says stream 4 waits on event 5 recorded on
    # stream 1 by corr 1; thread 2 then launches K2 on stream 3, thread 1 K3 on stream 4.
    # The exact path holds K3 (stream 4) from its call's end (41) to its start (100), ended
    # by the producer K0 (launched to stream 1 before the record, ends at 100).
    import json

    def x(cat: str, name: str, tid: int, ts: float, dur: float, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts,
                "dur": dur, "args": args}
    ev = [x("cuda_runtime", "cudaLaunchKernel", 1, 0, 1, correlation=10),
          x("kernel", "K0", 7, 10, 90, device=0, stream=1, correlation=10),
          x("cuda_runtime", "cudaEventRecord", 1, 2, 1, correlation=1),
          x("cuda_runtime", "cudaStreamWaitEvent", 2, 20, 1, correlation=2),
          x("cuda_sync", "Stream Wait Event", 7, 20.5, 0.1, device=0, stream=4, correlation=2,
            wait_on_stream=1, wait_on_cuda_event_id=5, wait_on_cuda_event_record_corr_id=1),
          x("cuda_runtime", "cudaLaunchKernel", 2, 24, 1, correlation=11),
          x("kernel", "K2", 7, 30, 10, device=0, stream=3, correlation=11),
          x("cuda_runtime", "cudaLaunchKernel", 1, 40, 1, correlation=12),
          x("kernel", "K3", 7, 100, 10, device=0, stream=4, correlation=12)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": ev}))
    from traceparse.kineto.reader import read as kread

    tl = kread(p)
    ids = tl.api.filter(pl.col("stream_id").is_not_null()).sort("start_ns")
    assert ids.select(pl.col("name").cast(pl.String), "stream_id", "event_id").rows() == [
        ("cudaEventRecord", 1, 5), ("cudaStreamWaitEvent", 4, 5)]
    sw = stream_waits(tl)
    assert sw.select(pl.col("end_ns") - pl.col("start_ns"), "blocked_name", "producer",
                     "stream_source").rows() == [(59 * US, "K3", "K0 (stream 1)", EXACT)]


ALEXNET = TRACES / "torch" / "hta__alexnet_benchmark_trace.json.gz"


@pytest.mark.shared
@pytest.mark.skipif(not ALEXNET.exists(), reason=f"{ALEXNET.name} not in the corpus")
def test_kineto_shared_trace_waits_carry_their_ids() -> None:
    # independent count with json: 20 "Stream Wait Event" rows, each with its wait call's
    # correlation id, waiting stream and event
    import gzip
    import json

    with gzip.open(ALEXNET, "rt") as f:
        ev = json.load(f)["traceEvents"]
    want = sorted((e["args"]["correlation"], e["args"]["stream"],
                   e["args"]["wait_on_cuda_event_id"]) for e in ev
                  if e.get("cat") == "cuda_sync" and e.get("name") == "Stream Wait Event")
    assert len(want) == 20
    from traceparse.kineto.reader import read as kread

    w = kread(ALEXNET).api.filter(pl.col("name").cast(pl.String) == "cudaStreamWaitEvent")
    # the waits with a record carry its ids; the other calls (no cuda_sync row) none
    got = w.filter(pl.col("stream_id").is_not_null())
    assert sorted(got.select("correlation_id", "stream_id", "event_id").rows()) == want
    assert w.height > 20 and w["event_id"].null_count() == w.height - 20
