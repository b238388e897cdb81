"""Reading a Kineto (PyTorch profiler) trace file into its header and raw event list.

This is the byte-level half of the Kineto parser (see :mod:`traceparse.kineto`):

* plain JSON or gzip (detected by the magic bytes ``1f 8b``, not by the extension), with a
  decompression limit so a gzip bomb is refused instead of exhausting memory;
* a top-level object with ``traceEvents`` or a bare list of events;
* timestamps kept **exact**: ``ts``/``dur`` are microseconds, and newer traces write them
  as decimals with nanosecond digits (``"ts": 1712195495505583.123``). A float64 cannot hold
  such a value (its spacing at 1.7e15 is 0.25 us), so when a file contains decimal
  ``ts``/``dur`` we quote those numbers in the raw bytes before decoding; the decimal text
  is then converted to integer ns by :func:`us_text_to_ns` with integer arithmetic only.

Example:
    >>> header, events = decode(b'{"traceEvents": [{"ph": "X", "ts": 1.5, "dur": 2}]}', "t")
    >>> events[0]["ts"], events[0]["dur"]
    ('1.5', '2')
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from traceparse.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
#: Refuse to inflate a gzip trace beyond this many bytes (override with the environment
#: variable ``TRACEPARSE_MAX_JSON_BYTES``). 16 GiB is far above any real trace we know of.
MAX_JSON_BYTES = 16 << 30

_HAS_DECIMAL_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*-?\d+(?:\.|[eE])')
_TIME_NUMBER = re.compile(rb'"(ts|dur)"\s*:\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)')


def max_json_bytes() -> int:
    """The decompression limit in bytes (environment override included)."""
    env = os.environ.get("TRACEPARSE_MAX_JSON_BYTES")
    return int(env) if env and env.isdigit() else MAX_JSON_BYTES


def read_bytes(path: Path) -> bytes:
    """Return the JSON text of ``path`` (inflated if gzip); raise :class:`TraceError` for
    unreadable, empty, truncated or oversized input."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise TraceError(path, "empty file")
    if not raw.startswith(GZIP_MAGIC):
        return raw
    limit = max_json_bytes()
    out = bytearray()
    data = raw
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while data:
                chunk = inflater.decompress(data, 1 << 26)
                out += chunk
                if len(out) > limit:
                    raise TraceError(path, f"gzip inflates beyond {limit} bytes (limit; set "
                                           "TRACEPARSE_MAX_JSON_BYTES to raise it): refusing "
                                           "a possible gzip bomb")
                data = inflater.unconsumed_tail
            if not inflater.eof:
                raise TraceError(path, "truncated gzip stream (file cut short)")
            data = inflater.unused_data  # concatenated gzip members
            if data and not data.startswith(GZIP_MAGIC):
                break  # trailing garbage after the last member; gzip(1) ignores it too
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"corrupt gzip data: {exc}") from None
    if not out:
        raise TraceError(path, "gzip holds an empty file")
    return bytes(out)


def decode(raw: bytes, path: Path | str) -> tuple[dict[str, Any], list[Any]]:
    """Decode JSON text into ``(header, events)``.

    ``header`` holds every top-level key except ``traceEvents`` (empty for a bare list).
    Decimal ``ts``/``dur`` values come back as strings (exact decimal text), integer ones as
    ints when the file has no decimal time at all.
    """
    if _HAS_DECIMAL_TIME.search(raw):
        raw = _TIME_NUMBER.sub(rb'"\1":"\2"', raw)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON: {exc}") from None
    if isinstance(doc, list):
        return {}, doc
    if not isinstance(doc, dict):
        raise TraceError(path, f"not a trace: top-level JSON is a {type(doc).__name__}, "
                               "expected an object with traceEvents or a list of events")
    if "traceEvents" not in doc:
        raise TraceError(path, "not a Kineto/Chrome trace: no traceEvents key")
    events = doc.pop("traceEvents")
    if not isinstance(events, list):
        raise TraceError(path, f"traceEvents is a {type(events).__name__}, expected a list")
    return doc, events


def us_to_ns(values: list[Any], name: str, path: Path | str, *,
             ns_units: bool = False) -> pl.Series:
    """Microsecond values (ints, decimal strings or None) -> exact int64 ns (Int64 Series).

    Ints are multiplied by 1000; decimal text goes through :func:`us_text_to_ns`. With
    ``ns_units`` the values are already nanoseconds (rounded half to even).
    Anything else (a bool, a list, text that is not a number) raises :class:`TraceError`.
    """
    if all(type(v) is int for v in values):
        return pl.Series(name, values, dtype=pl.Int64) * (1 if ns_units else 1000)
    if ns_units:
        from decimal import Decimal

        return pl.Series(name, [None if v is None else int(round(Decimal(str(v))))
                                for v in values], dtype=pl.Int64)
    text = []
    for v in values:
        t = type(v)
        if t is str or v is None:
            text.append(v)
        elif t is int:
            text.append(str(v))
        elif t is float:  # only reachable for JSON written in an unusual layout
            text.append(repr(v))
        else:
            raise TraceError(path, f"'{name}' holds a {t.__name__} ({str(v)[:40]}), "
                                   "expected a number")
    return us_text_to_ns(pl.Series(name, text, dtype=pl.String), path)


def us_text_to_ns(text: pl.Series, path: Path | str = "") -> pl.Series:
    """Decimal microsecond text -> int64 ns, equal to ``round(Decimal(x) * 1000)``
    (ties to even, as Python's ``round``), with integer arithmetic only.

    Example:
        >>> us_text_to_ns(pl.Series(["1694128201545123.456", "4.9285", "-2", "1.0005"])).to_list()
        [1694128201545123456, 4928, -2000, 1000]
    """
    name = text.name
    frame = pl.DataFrame({"t": text})
    if frame.select(pl.col("t").str.contains(r"[eE]").any()).item():
        from decimal import Decimal, InvalidOperation

        out = []
        for v in text.to_list():
            try:
                out.append(None if v is None else int(round(Decimal(v) * 1000)))
            except (InvalidOperation, ValueError):
                raise TraceError(path, f"'{name}' is not a number: {v[:40]!r}") from None
        return pl.Series(name, out, dtype=pl.Int64)
    parts = frame.select(
        neg=pl.col("t").str.starts_with("-"),
        whole=pl.col("t").str.strip_prefix("-").str.split_exact(".", 1)
    ).unnest("whole")
    bad = parts.filter(pl.col("field_0").is_not_null()
                       & ~pl.col("field_0").str.contains(r"^\d+$")
                       | (pl.col("field_1").is_not_null()
                          & ~pl.col("field_1").str.contains(r"^\d*$")))
    if bad.height:
        raise TraceError(path, f"'{name}' is not a number: {bad['field_0'][0]!r}")
    frac = pl.col("field_1").fill_null("")
    ms3 = (frac + "000").str.slice(0, 3).cast(pl.Int64)
    rest = frac.str.slice(3).str.strip_chars_end("0")
    up = (rest > "5") | ((rest == "5") & (ms3 % 2 == 1))
    mag = pl.col("field_0").cast(pl.Int64) * 1000 + ms3 + up.cast(pl.Int64)
    out = parts.select(pl.when(pl.col("neg")).then(-mag).otherwise(mag).alias(name))
    return out.to_series()
