"""Typed (msgspec) Kineto decoding: identical timelines to the full orjson decode on every
real trace, exact times from the raw JSON text (hand-computed ns, missing, negative,
refused values), ``[memory]`` allocator events in the ``memory`` table (hand-computed on a small
trace, independent counts on real ones), and a UTF-8 byte-order mark accepted."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import ids, shared_files
from traceparse import schema
from traceparse.errors import TraceError
from traceparse.kineto import times
from traceparse.kineto.reader import read

TORCH = shared_files("torch")
BASE = 1_700_000_000_000_000_000
BOM = b"\xef\xbb\xbf"


@pytest.mark.shared
@pytest.mark.parametrize("path", TORCH, ids=ids(TORCH))
def test_typed_decoder_equals_orjson_decoder(path: Path) -> None:
    """Every table and the meta of the typed path equal those of the full orjson decode."""
    typed = read(path)
    full = read(path, decoder="orjson")
    for name in schema.TABLES:
        assert_frame_equal(typed.table(name), full.table(name), check_exact=True)
    assert typed.meta == full.meta


def _independent_memory(path: Path) -> list[dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    return [e for e in events if e.get("name") == "[memory]" and e.get("ph") == "i"]


MEMORY_FILES = [p for p in TORCH if p.name.startswith(("hta__df_index", "kineto__resnet50_worker0.",
                                                      "tracelens__sglang_decode_capture"))]


@pytest.mark.shared
@pytest.mark.parametrize("path", MEMORY_FILES, ids=ids(MEMORY_FILES))
def test_memory_events_real(path: Path) -> None:
    """Row count, byte sums, host rows and ingest accounting against plain json counts."""
    mem = _independent_memory(path)
    assert mem, "the corpus file is expected to hold [memory] events"
    tl = read(path)
    m = tl.memory
    assert m.height == len(mem)
    assert m["bytes"].sum() == sum(e["args"]["Bytes"] for e in mem)
    assert (m["kind"] == "alloc").sum() == sum(e["args"]["Bytes"] > 0 for e in mem)
    assert (m["kind"] == "free").sum() == sum(e["args"]["Bytes"] < 0 for e in mem)
    host = sum(e["args"]["Device Type"] == 0 for e in mem)
    assert (m["device_id"] == -1).sum() == host
    peak = max((e["args"].get("Total Allocated") for e in mem
                if e["args"].get("Total Allocated") is not None), default=None)
    assert m["allocated_bytes"].max() == peak
    parsed = tl.ingest.filter((pl.col("table") == "memory") & (pl.col("outcome") == "parsed"))
    assert parsed["count"].sum() == len(mem)


def _write(path: Path, doc: object, *, gz: bool = False, prefix: bytes = b"") -> Path:
    text = prefix + json.dumps(doc).encode()
    path.write_bytes(gzip.compress(text) if gz else text)
    return path


def _memory_doc() -> dict:
    return {"baseTimeNanoseconds": BASE, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        # CUDA alloc of 512 B on device 1 at 1.5 us
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 10,
         "tid": 11, "ts": 1.5, "args": {"Device Type": 1, "Device Id": 1, "Addr": 4096,
                                        "Bytes": 512, "Total Allocated": 1536,
                                        "Total Reserved": 2097152}},
        # host free of 8 B (Device Type 0 -> device_id -1), 2021 layout: no cat, no totals
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 12, "ts": 2.25,
         "args": {"Device Type": 0, "Device Id": -1, "Bytes": -8}},
        # no Bytes: counted as skipped
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11,
         "ts": 3.0, "args": {"Device Type": 1, "Device Id": 1}},
        # another instant: stays skipped in the meta table
        {"ph": "i", "cat": "cpu_instant_event", "name": "[OutOfMemory]", "pid": 10, "tid": 11,
         "ts": 3.5, "args": {}},
    ]}


def test_memory_events_hand_computed(tmp_path: Path) -> None:
    tl = read(_write(tmp_path / "m.json", _memory_doc()))
    m = tl.memory.sort("ts_ns")
    assert m.select("device_id", "ts_ns", "kind", "bytes", "allocated_bytes",
                    "reserved_bytes", "address", "process_id", "thread_id").rows() == [
        (1, BASE + 1500, "alloc", 512, 1536, 2097152, 4096, 10, 11),
        (-1, BASE + 2250, "free", -8, None, None, None, 10, 12),
    ]
    assert m["source"].to_list() == ["kineto [memory]"] * 2
    rows = {(r["table"], r["source"], r["outcome"], r["reason"]): r["count"]
            for r in tl.ingest.iter_rows(named=True)}
    assert rows[("memory", "cpu_instant_event", "parsed", None)] == 1
    assert rows[("memory", "cpu_instant_event", "skipped", "missing args.Bytes")] == 1
    assert rows[("memory", "(no cat, ph i)", "parsed", None)] == 1
    assert rows[("meta", "cpu_instant_event", "skipped",
                 "category cpu_instant_event not used")] == 1
    # parsed + skipped == events in the file
    assert tl.ingest["count"].sum() == 5


@pytest.mark.parametrize("gz", [False, True])
def test_utf8_bom_accepted(tmp_path: Path, gz: bool) -> None:
    plain = read(_write(tmp_path / "a.json", _memory_doc(), gz=gz))
    bom = read(_write(tmp_path / "b.json", _memory_doc(), gz=gz, prefix=BOM))
    for name in ("gpu", "memory", "ingest"):
        assert_frame_equal(plain.table(name), bom.table(name))
    assert bom.gpu.height == 1


def test_bom_only_is_empty(tmp_path: Path) -> None:
    p = tmp_path / "bom.json"
    p.write_bytes(BOM)
    with pytest.raises(TraceError, match="empty file"):
        read(p)


@pytest.mark.parametrize(("text", "message"), [
    (b'{"traceEvents": [{"ph": "X"}, 3]}', "traceEvents holds a int"),
    (b'{"traceEvents": {"a": 1}}', "traceEvents is a dict"),
    (b'{"other": []}', "no traceEvents key"),
    (b'{"traceEvents": [', "invalid JSON"),
    (b'{"traceEvents": [{"name": "\xff"}]}', "invalid JSON"),
])
def test_typed_decoder_keeps_error_messages(tmp_path: Path, text: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(text)
    with pytest.raises(TraceError, match=message):
        read(p)


def test_invalid_text_inside_args_is_a_trace_error(tmp_path: Path) -> None:
    """The typed pass keeps ``args`` undecoded; a lone surrogate escape inside them (found by
    the fuzzer) must still be the one-line 'invalid JSON' error of the full decode."""
    p = tmp_path / "surrogate.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, '
                  b'"dur": 2, "args": {"a": "\\ud800"}}]}')
    with pytest.raises(TraceError, match="invalid JSON"):
        read(p)


def _raws(*texts: bytes) -> list[msgspec.Raw]:
    return [msgspec.Raw(t) for t in texts]


@pytest.mark.parametrize(("texts", "expected"), [
    # plain decimals: exact, ties to even (1001.5 -> 1002, 4928.5 -> 4928), epoch us with
    # ns digits beyond float64 (1694128201545123.456 us)
    ((b"1694128201545123.456", b"2", b"1.0015", b"4.9285", b"-2"),
     [1694128201545123456, 2000, 1002, 4928, -2000]),
    # absent (empty text) and null -> missing; the others still exact
    ((b"", b"null", b"7.25"), [None, None, 7250]),
    # a quoted time is its text; an exponent goes through Decimal
    ((b'"12.5"', b"1.5e3", b"3"), [12500, 1500000, 3000]),
])
def test_time_column_exact(texts: tuple[bytes, ...], expected: list) -> None:
    col = times.time_column(_raws(*texts))
    keep = times.present(col)
    assert keep == [v is not None for v in expected]
    ns = times.to_ns(times.take(col, keep), "ts", "t").to_list()
    assert ns == [v for v in expected if v is not None]


@pytest.mark.parametrize("texts", [(b"-1", b"-0.0", b"-0", b"2", b"", b"-0.001"),
                                   (b"-1", b"-0.0", b"-0", b"2", b"null", b"-1e-3")])
def test_negative_durations(texts: tuple[bytes, ...]) -> None:
    """Below zero is negative; -0 is not; missing is not (counted as missing instead)."""
    col = times.time_column(_raws(*texts))
    assert times.negative(col) == [True, False, False, False, False, True]
    assert not times.complete(col) and not times.nonnegative(col)
    plain = times.time_column(_raws(b"0", b"2.5", b"17"))
    assert times.complete(plain) and times.nonnegative(plain)


@pytest.mark.parametrize(("texts", "plain"), [
    ((b"-12.5", b"0", b"1694128201545123.456", b""), True),  # digits . - and absent
    ((b"1", b"null"), False), ((b"1", b"1E3"), False), ((b"1", b"true"), False),
    ((b"1", b'"2"'), False), ((b"1", b"[2]"), False),
])
def test_time_column_plain_bytes_decide_the_path(texts: tuple[bytes, ...],
                                                 plain: bool) -> None:
    """Only digits, ``.``, ``-`` (and absent values) stay a text column; any other byte
    sends the bucket through the per-value path."""
    col = times.time_column(_raws(*texts))
    assert isinstance(col, pl.Series) is plain


def test_time_beyond_float64_is_invalid_json() -> None:
    with pytest.raises(TraceError, match="invalid JSON"):
        times.time_column(_raws(b"1", b"1e400"), "t")


def test_time_of_wrong_type_is_refused() -> None:
    col = times.time_column(_raws(b"1", b"true"))
    with pytest.raises(TraceError, match="holds a bool"):
        times.to_ns(col, "ts", "t")


def test_typed_times_equal_float_path_on_decimals(tmp_path: Path) -> None:
    """Relative times with up to 3 decimals, absolute epoch-us times with ns digits and
    nulls: the text path gives the float/quoted path's tables (the reference decoder)."""
    evs = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7,
            "ts": ts, "dur": dur, "args": {"device": 0, "stream": 7, "correlation": i}}
           for i, (ts, dur) in enumerate([(1.5, 2.25), (3, 0), (4.001, None), (None, 1),
                                          (5.999, -1.5), (7.125, 0.5)])]
    for doc in ({"traceEvents": evs}, {"baseTimeNanoseconds": BASE, "traceEvents": evs}):
        p = _write(tmp_path / "t.json", doc)
        typed, full = read(p), read(p, decoder="orjson")
        for name in schema.TABLES:
            assert_frame_equal(typed.table(name), full.table(name), check_exact=True)
        assert typed.gpu["dur_ns"].to_list() == [2250, 0, 500]


def test_events_decoded_by_phase_equal_orjson(tmp_path: Path) -> None:
    """Events are decoded as structs of their phase (a flow keeps only ``cat``); a trace
    with an event whose ``ph`` is missing or not a phase of the format is decoded with
    every event alike. Both give the orjson decoder's tables: here 2 kernels, 1 runtime
    call, 3 flow events counted as skipped (ac2g s + f), 1 metadata event."""
    from traceparse.kineto.decode import FLOW_PHASES, RawEvent, decode_events

    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "python"}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10.5, "dur": 2, "args": {"correlation": 7, "External id": 3}},
        {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 10.5, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 7, "pid": 0, "tid": 7, "ts": 20, "cat": "ac2g", "name": "ac2g",
         "bp": "e"},
        {"ph": "f", "id": 8, "pid": 0, "tid": 7, "ts": 21, "cat": "ac2g", "name": "ac2g"},
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 20, "dur": 5.25,
         "args": {"correlation": 7, "device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 30, "dur": 1,
         "args": {"correlation": 8, "device": 0, "stream": 7}},
    ]
    for extra, by_phase in (([], True), ([{"cat": "x", "name": "no phase"}], False),
                            ([{"ph": "Q", "cat": "x", "name": "unknown phase"}], False)):
        path = tmp_path / "t.json"
        raw = json.dumps({"traceEvents": events + extra}).encode()
        path.write_bytes(raw)
        _, decoded = decode_events(raw, path)
        assert all((type(e) is RawEvent) != by_phase for e in decoded)
        flows = [e for e in decoded if isinstance(e.ph, str) and e.ph in FLOW_PHASES]
        assert len(flows) == 3
        if by_phase:
            assert all(type(e).__struct_fields__ == ("cat",) for e in flows)
        typed, full = read(path), read(path, decoder="orjson")
        for name in schema.TABLES:
            assert_frame_equal(typed.table(name), full.table(name), check_exact=True)
        assert typed.meta == full.meta
        assert typed.gpu.sort("start_ns")["dur_ns"].to_list() == [5250, 1000]
        ingest = typed.ingest.filter(pl.col("source") == "ac2g")
        assert ingest["count"].sum() == 3
