"""Columnar JSON readers against traceparse's Kineto decoding, on one trace (issue 28).

The question (kjson3): can a native columnar path (JSON -> Arrow/polars columns of only the
keys the tables read, exact decimal times) make one rank's ingest several times cheaper
than the msgspec + orjson path of :mod:`traceparse.kineto.decode`? Each row is the best
``time.process_time`` of ``--repeat`` calls in one process, the cyclic GC paused (as
``kineto.read`` does):

* today: the whole ``kineto.read``, its ``decode_events`` (msgspec) and ``decode_args``
  (orjson, the args of the events that feed a table), and a bare ``orjson.loads``;
* polars' own reader: ``pl.read_json`` of the document with an explicit schema (1 key, the
  7 event keys as text, and those plus an ``args`` struct of 11 keys);
* newline-delimited readers (``pl.read_ndjson``, ``pyarrow.json``) on the events re-lined
  in memory, one per line (they cannot read the file itself unless it already has that
  layout: the line says whether it does);
* polars on msgspec's raw ``args`` text in bulk: ``str.json_decode`` of the cpu_op args
  (5 keys) and ``str.json_path_match`` of ``Input Dims``/``Input type``, against orjson;
* ``--native``: ``benchmarks/kineto_scan_poc.c`` compiled with ``cc -O3`` (a scanner that
  records value spans and gathers them into Arrow string columns; a lower bound, it checks
  almost nothing), then the int casts, ``ts``/``dur`` to ns and the split by (cat, ph) in
  polars; and again with the integers and ns parsed in C (plain integers and decimals of at
  most 3 places only) into Arrow Int64 columns.

``--survey`` instead checks every Kineto file under ``../shared/traces/torch`` and
``../shared/traces/gpu`` (and each DIR given): whether a float64 reader could give exact
ns (every ``ts``/``dur`` text equal to the shortest repr of its float64; ``round(f64 *
1000)`` equal to the exact ns), and whether the file has one event per line.

Usage::

    PYTHONPATH=. python3 benchmarks/kineto_json_readers.py TRACE.json [--repeat 7] [--native]
    PYTHONPATH=. python3 benchmarks/kineto_json_readers.py --survey [DIR ...]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import io
import subprocess
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.json as pj

from traceparse.errors import TraceError
from traceparse.kineto import reader, times
from traceparse.kineto.decode import decode_args, decode_events
from traceparse.kineto.events import CATEGORIES
from traceparse.kineto.io import read_bytes

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "traces"
EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur")
#: args keys the native scanner records (those the tables read as columns).
ARG_KEYS = ("External id", "external id", "correlation", "device", "stream", "context",
            "Sequence number", "Record function id", "Ev Idx", "Input Dims", "Input type",
            "Concrete Inputs", "grid", "block", "registers per thread", "shared memory",
            "bytes", "flops", "Collective name", "Bytes")
#: native gather mode per column: 1 strip the quotes of a string, 2 JSON text made compact
MODES = {"ph": 1, "cat": 1, "name": 1, "Collective name": 1, "Input Dims": 2,
         "Input type": 2, "Concrete Inputs": 2, "grid": 2, "block": 2}
INT_COLS = ("pid", "tid", "External id", "correlation", "device", "stream", "context",
            "Sequence number", "Record function id", "Ev Idx", "registers per thread",
            "shared memory", "bytes")


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Best process_time of ``repeat`` calls, in ms (each result freed inside the timing)."""
    out = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        r = fn()
        del r
        out = min(out, time.process_time() - t)
    return out * 1000


def _ndjson(raw: bytes, path: Path) -> bytes:
    doc = orjson.loads(raw)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return b"\n".join(map(orjson.dumps, evs)) + b"\n"


class Native:
    """``kineto_scan_poc.c`` loaded through ctypes (compiled into a temporary directory)."""

    def __init__(self, tmp: str) -> None:
        so = Path(tmp) / "scan.so"
        subprocess.run(["cc", "-O3", "-march=native", "-shared", "-fPIC", "-o", str(so),
                        str(HERE / "kineto_scan_poc.c")], check=True)
        self.lib = ctypes.CDLL(str(so))
        self.lib.scan.restype = ctypes.c_long
        self.lib.gather.restype = ctypes.c_long
        self.lib.to_int.restype = self.lib.us_to_ns.restype = ctypes.c_long
        self.lib.gather.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_long,
                                    ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_int,
                                    ctypes.POINTER(ctypes.c_long)]
        keys = [*EVENT_KEYS, "args"]
        self.keep = [k.encode() for k in (*keys, *ARG_KEYS)]  # alive while the lib reads
        self.top = (ctypes.c_char_p * len(keys))(*self.keep[:len(keys)])
        self.top_len = (ctypes.c_int * len(keys))(*map(len, self.keep[:len(keys)]))
        self.args = (ctypes.c_char_p * len(ARG_KEYS))(*self.keep[len(keys):])
        self.args_len = (ctypes.c_int * len(ARG_KEYS))(*map(len, self.keep[len(keys):]))
        self.n_top, self.stride = len(keys), len(keys) + len(ARG_KEYS)

    def scan(self, raw: bytes) -> tuple[int, np.ndarray]:
        most = raw.count(b'"ph"') + 1
        spans = np.empty(most * self.stride * 2, dtype=np.int32)
        n = self.lib.scan(raw, len(raw), self.top, self.top_len, self.n_top, self.args,
                          self.args_len, len(ARG_KEYS), ctypes.c_void_p(spans.ctypes.data),
                          most)
        if n < 0:
            raise ValueError("the scanner does not handle this layout")
        return n, spans

    def column(self, raw: bytes, n: int, spans: np.ndarray, key: int, mode: int) -> pl.Series:
        lens = spans.reshape(-1, self.stride, 2)[:n, key, 1]
        dst = np.empty(int(lens[lens > 0].sum()) + 1, dtype=np.uint8)
        offsets = np.empty(n + 1, dtype=np.int32)
        valid = np.empty(n, dtype=np.uint8)
        odd = ctypes.c_long()
        self.lib.gather(raw, ctypes.c_void_p(spans.ctypes.data + key * 8), n, self.stride * 2,
                        ctypes.c_void_p(dst.ctypes.data), ctypes.c_void_p(offsets.ctypes.data),
                        ctypes.c_void_p(valid.ctypes.data), mode, ctypes.byref(odd))
        arr = pa.Array.from_buffers(pa.string(), n, [
            pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets),
            pa.py_buffer(dst)])
        return pl.Series(pl.from_arrow(arr))

    def frame(self, raw: bytes) -> pl.DataFrame:
        n, spans = self.scan(raw)
        names = [*EVENT_KEYS, "args", *ARG_KEYS]
        return pl.DataFrame({
            names[i]: self.column(raw, n, spans, i, MODES.get(names[i], 0))
            for i in range(self.stride) if names[i] != "args"})

    def numbers(self, raw: bytes, n: int, spans: np.ndarray, key: int, ns: bool) -> pl.Series:
        """Int64 column parsed in C (``ns``: exact ns of decimal microsecond text)."""
        out = np.empty(n, dtype=np.int64)
        valid = np.empty(n, dtype=np.uint8)
        fn = self.lib.us_to_ns if ns else self.lib.to_int
        fn(raw, ctypes.c_void_p(spans.ctypes.data + key * 8), ctypes.c_long(n),
           ctypes.c_int(self.stride * 2), ctypes.c_void_p(out.ctypes.data),
           ctypes.c_void_p(valid.ctypes.data))
        arr = pa.Array.from_buffers(pa.int64(), n, [
            pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(out)])
        return pl.Series(pl.from_arrow(arr))

    def typed(self, raw: bytes) -> dict[Any, pl.DataFrame]:
        """Like :meth:`tables`, the numbers parsed in C instead of by polars casts."""
        n, spans = self.scan(raw)
        names = [*EVENT_KEYS, "args", *ARG_KEYS]
        cols = {}
        for i, k in enumerate(names):
            if k == "args":
                continue
            if k in INT_COLS:
                cols[k] = self.numbers(raw, n, spans, i, False)
            elif k in ("ts", "dur"):
                cols[k + "_ns"] = self.numbers(raw, n, spans, i, True)
            else:
                cols[k] = self.column(raw, n, spans, i, MODES.get(k, 0))
        return pl.DataFrame(cols).partition_by("cat", "ph", as_dict=True)

    def tables(self, raw: bytes, path: Path) -> dict[Any, pl.DataFrame]:
        df = self.frame(raw).with_columns(pl.col(INT_COLS).cast(pl.Int64, strict=False))
        df = df.with_columns(ts_ns=times.to_ns(df["ts"], "ts", path),
                             dur_ns=times.to_ns(df["dur"], "dur", path))
        return df.partition_by("cat", "ph", as_dict=True)


def measure(path: Path, repeat: int, native: bool) -> None:
    raw = read_bytes(path)
    _, events = decode_events(raw, path)
    table = [e for e in events if e.ph == "X" and isinstance(e.cat, str)
             and e.cat.lower() in CATEGORIES]
    cpu = [e for e in table if e.cat == "cpu_op"]
    lines = raw.count(b"\n")
    print(f"{path.name}: {len(raw) / 1e6:.1f} MB, {len(events)} events ({len(table)} in "
          f"tables, {len(cpu)} cpu_op), {lines} newlines; best of {repeat}, ms CPU")
    text = dict.fromkeys(EVENT_KEYS, pl.String)
    args = pl.Struct({"External id": pl.Int64, "Sequence number": pl.Int64,
                      "Record function id": pl.Int64, "Ev Idx": pl.Int64,
                      "correlation": pl.Int64, "device": pl.Int64, "stream": pl.Int64,
                      "Input Dims": pl.List(pl.List(pl.Int64)), "Input type": pl.List(pl.String),
                      "grid": pl.List(pl.Int64), "block": pl.List(pl.Int64)})
    nd = _ndjson(raw, path)
    cpu_args = decode_args(cpu, path)
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("kineto.read (whole)", lambda: reader.read(path)),
        ("decode_events (msgspec typed)", lambda: decode_events(raw, path)),
        ("decode_args, table events (orjson)", lambda: decode_args(table, path)),
        ("orjson.loads (whole document)", lambda: orjson.loads(raw)),
        ("pl.read_json: ph only", lambda: pl.read_json(
            io.BytesIO(raw), schema={"traceEvents": pl.List(pl.Struct({"ph": pl.String}))})),
        ("pl.read_json: 7 event keys as String", lambda: pl.read_json(
            io.BytesIO(raw), schema={"traceEvents": pl.List(pl.Struct(text))})),
        ("pl.read_json: 7 keys + args struct (11 keys)", lambda: pl.read_json(
            io.BytesIO(raw),
            schema={"traceEvents": pl.List(pl.Struct({**text, "args": args}))})),
        ("pl.read_ndjson (re-lined): 7 keys", lambda: pl.read_ndjson(
            io.BytesIO(nd), schema=text)),
        ("pyarrow.json (re-lined): ph cat name ts dur(decimal128)", lambda: pj.read_json(
            io.BytesIO(nd), read_options=pj.ReadOptions(use_threads=False, block_size=1 << 24),
            parse_options=pj.ParseOptions(explicit_schema=pa.schema(
                [("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
                 ("ts", pa.decimal128(22, 3)), ("dur", pa.decimal128(22, 3))]),
                unexpected_field_behavior="ignore"))),
        ("cpu_op args: orjson decode_args", lambda: decode_args(cpu, path)),
        ("cpu_op args: polars str.json_decode (5 keys)", lambda: _raw_args(cpu).str.json_decode(
            pl.Struct({"External id": pl.Int64, "Sequence number": pl.Int64,
                       "Record function id": pl.Int64, "Ev Idx": pl.Int64,
                       "Input Dims": pl.List(pl.List(pl.Int64))}))),
        ("cpu_op Input Dims/type text: orjson.dumps", lambda: [
            orjson.dumps(a[k]).decode() for a in cpu_args for k in ("Input Dims", "Input type")
            if k in a]),
        ("cpu_op Input Dims/type text: polars json_path_match", lambda: [
            _raw_args(cpu).str.json_path_match(f"$['{k}']")
            for k in ("Input Dims", "Input type")]),
    ]
    gc.disable()
    try:
        for label, fn in rows:
            try:
                print(f"  {label:58s} {best(fn, repeat):7.1f}")
            except Exception as exc:  # a reader that refuses the input: say so
                print(f"  {label:58s} refused: {str(exc).splitlines()[0][:90]}")
        try:
            pj.read_json(io.BytesIO(nd), parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([("pid", pa.string()), ("tid", pa.string())]),
                unexpected_field_behavior="ignore"))
        except pa.ArrowInvalid as exc:
            print(f"  pyarrow.json with pid/tid as string refused: {exc}")
        if native:
            with tempfile.TemporaryDirectory(prefix="kjson3-") as tmp:
                nat = Native(tmp)
                for label, fn in [
                        ("native PoC: scan (spans of 7 keys + 20 args keys)",
                         lambda: nat.scan(raw)),
                        ("native PoC: scan + 27 text columns", lambda: nat.frame(raw)),
                        ("native PoC: + int casts, ts/dur ns, split by (cat, ph)",
                         lambda: nat.tables(raw, path)),
                        ("native PoC: numbers parsed in C, split by (cat, ph)",
                         lambda: nat.typed(raw))]:
                    print(f"  {label:58s} {best(fn, repeat):7.1f}")
    finally:
        gc.enable()


def _raw_args(events: list[Any]) -> pl.Series:
    """The raw ``args`` texts of ``events`` as one polars String series (one join, one
    split in polars)."""
    joined = b"\n".join(e.args or b"null" for e in events).decode()
    return pl.Series([joined]).str.split("\n").explode()


def _time_texts(events: list[Any]) -> set[bytes]:
    out = set()
    for e in events:
        for v in (getattr(e, "ts", None), getattr(e, "dur", None)):
            if type(v) is msgspec.Raw and len(v):
                out.add(bytes(v))
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out.add(repr(v).encode())
    return out


def survey(dirs: list[str]) -> None:
    files = sorted(p for d in ("torch", "gpu") for p in (SHARED / d).rglob("*")
                   if p.name.endswith((".json", ".json.gz")))
    files += sorted(p for d in dirs for p in Path(d).iterdir()
                    if p.name.endswith((".json", ".json.gz")))
    n = per_line = inexact_repr = inexact_mul = 0
    print("file | events | one event per line | times not their f64 shortest repr | "
          "times where round(f64*1000) is not the exact ns")
    for p in files:
        try:
            raw = read_bytes(p)
            _, events = decode_events(raw, p)
        except TraceError:
            continue  # not a trace (the .meta.json / .truth.json beside the captures)
        n += 1
        bad_repr = bad_mul = 0
        for t in _time_texts(events):
            try:
                d = Decimal(t.decode())
                x = float(d)
            except (InvalidOperation, ValueError, UnicodeDecodeError):
                continue
            bad_repr += Decimal(repr(x)) != d
            bad_mul += round(Decimal(x) * 1000) != round(d * 1000)
        lines = raw.count(b"\n") >= len(events)
        per_line += lines
        inexact_repr += bool(bad_repr)
        inexact_mul += bool(bad_mul)
        if bad_repr or bad_mul or not lines:
            print(f"{p.name} | {len(events)} | {'yes' if lines else 'no'} | {bad_repr} | "
                  f"{bad_mul}")
    print(f"{n} traces: {per_line} with one event per line; float64 text inexact in "
          f"{inexact_repr}; round(f64*1000) inexact in {inexact_mul}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="a trace file (or, with --survey, extra dirs)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--native", action="store_true", help="also time the C scanner PoC")
    ap.add_argument("--survey", action="store_true")
    a = ap.parse_args()
    if a.survey:
        survey(a.paths)
    else:
        for p in a.paths:
            measure(Path(p), a.repeat, a.native)


if __name__ == "__main__":
    main()
