"""Reading a Kineto (PyTorch profiler) trace file into its header and raw event list.

This is the byte-level half of the Kineto parser (see :mod:`traceparse.kineto`):

* plain JSON or gzip (detected by the magic bytes ``1f 8b``, not by the extension), with a
  decompression limit so a gzip bomb is refused instead of exhausting memory;
* a top-level object with ``traceEvents`` or a bare list of events;
* timestamps kept **exact**: ``ts``/``dur`` are microseconds, and newer traces write them
  as decimals with nanosecond digits (``"ts": 1712195495505583.123``). Below 2**43 us
  (relative timestamps, durations) a float64 still resolves 1 ns, and ``floor(x)*1000 +
  rint(frac*1000)`` is exact for Kineto's 3-decimal text. Above it (absolute epoch us with
  decimals) a float64 cannot hold the value (spacing 0.25 us at 1.7e15), so those numbers
  (and any with > 3 decimals or an exponent) are quoted in the raw bytes before decoding
  (``decode(quote_big=True)``; a 1 MiB probe picks this path up front), and the decimal
  text is converted by :func:`us_text_to_ns` with integer arithmetic only. The other
  times stay numbers; :func:`us_to_ns` converts a mix of ints, floats and text per type.

Example:
    >>> doc = b'{"traceEvents": [{"ph": "X", "ts": 1.5, "dur": 2}]}'
    >>> header, events = decode(doc, "t", quote_times=True)
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

from traceparse.errors import NotATrace, TraceError

GZIP_MAGIC = b"\x1f\x8b"
#: UTF-8 byte-order mark some Windows tools write before the JSON text (plain or gzipped):
#: JSON forbids it (RFC 8259) but it carries no data, so it is dropped.
UTF8_BOM = b"\xef\xbb\xbf"
#: Refuse to inflate a gzip trace beyond this many bytes (override with the environment
#: variable ``TRACEPARSE_MAX_JSON_BYTES``). 16 GiB is far above any real trace we know of.
MAX_JSON_BYTES = 16 << 30

_TIME_NUMBER = re.compile(rb'"(ts|dur)"\s*:\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)')
#: Times float64 cannot hold exactly (13+ integer digits with a fraction, > 3 decimals,
#: exponents). Literal ``"ts":`` / ``"dur":`` prefixes let the regex engine skip ahead fast.
_BIG_TS = re.compile(rb'"ts":\s*(-?(?:\d{13,}\.\d+|\d+\.\d{4,}|\d+(?:\.\d*)?[eE][-+]?\d+))')
_ODD_DUR = re.compile(rb'"dur":\s*(-?(?:\d{13,}\.\d+|\d+\.\d{4,}|\d+(?:\.\d*)?[eE][-+]?\d+))')
#: A ``ts`` of 13+ integer digits with a fraction: beyond float64's 1 ns resolution.
_BIG_DECIMAL_TS = re.compile(rb'"ts":\s*-?\d{13,}\.\d')
#: :func:`needs_decimal_text` looks at this many leading bytes.
DECIMAL_PROBE_BYTES = 1 << 20
#: Largest |value| in us whose float64 still resolves 1 ns (ulp(2**43) = 2**-10 < 0.001).
FLOAT_EXACT_US = float(2**43)
#: Largest |value| in us whose ns value fits in int64.
MAX_US = (2**63 - 1) // 1000
#: Gzip bomb guard: once more than :data:`RATIO_MIN_BYTES` are inflated, refuse a stream
#: whose inflated/consumed ratio exceeds :data:`MAX_RATIO`. Real Kineto traces compress
#: 8-31x (the shared corpus; benchmarks/RESULTS.md "Fuzzing"); deflate tops out near
#: 1032x, which only degenerate (bomb-like) content reaches.
MAX_RATIO = 200
RATIO_MIN_BYTES = 64 << 20


def _out_of_range(path: Path | str, name: str, value: object) -> TraceError:
    return TraceError(path, f"'{name}' out of range: {str(value)[:40]} us does not fit in "
                            "int64 nanoseconds")


class NeedsDecimalText(Exception):
    """A float time too large for float64 to hold its ns digits: decode again with
    ``quote_times=True`` so the decimal text is kept."""


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
        return _strip_bom(path, raw)
    limit = max_json_bytes()
    out = bytearray()
    data = raw
    consumed = 0
    step = 1 << 20
    try:
        while data:
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while data:
                # feed at most 1 MiB of input per call so the ratio is checked often
                piece, rest = data[:step], data[step:]
                chunk = inflater.decompress(piece, 1 << 24)
                out += chunk
                tail = inflater.unconsumed_tail
                consumed += len(piece) - len(tail)
                _check_inflated(path, len(out), consumed, limit)
                data = tail + rest if tail else rest
                if inflater.eof:
                    break
            if not inflater.eof:
                raise TraceError(path, "truncated gzip stream (file cut short)")
            data = inflater.unused_data + data  # concatenated gzip members
            if data and not data.startswith(GZIP_MAGIC):
                break  # trailing garbage after the last member; gzip(1) ignores it too
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(path, f"corrupt gzip data: {exc}") from None
    if not out:
        raise TraceError(path, "gzip holds an empty file")
    return _strip_bom(path, bytes(out))


def _strip_bom(path: Path, raw: bytes) -> bytes:
    """``raw`` without a leading UTF-8 byte-order mark (a BOM alone is an empty file)."""
    if not raw.startswith(UTF8_BOM):
        return raw
    if len(raw) == len(UTF8_BOM):
        raise TraceError(path, "empty file (only a UTF-8 byte-order mark)")
    return raw[len(UTF8_BOM):]


def _check_inflated(path: Path, inflated: int, consumed: int, limit: int) -> None:
    """Refuse output beyond ``limit`` bytes, or a bomb-like inflation ratio (see
    :data:`MAX_RATIO`), before more memory is spent."""
    if inflated > limit:
        raise TraceError(path, f"gzip inflates beyond {limit} bytes (limit; set "
                               "TRACEPARSE_MAX_JSON_BYTES to raise it): refusing a possible "
                               "gzip bomb")
    if (ratio := bomb_ratio(inflated, consumed)) is not None:
        raise TraceError(path, f"gzip inflates {ratio}x ({consumed} "
                               f"bytes -> {inflated} so far; real traces stay under "
                               f"{MAX_RATIO}x): refusing a possible gzip bomb")


def bomb_ratio(inflated: int, consumed: int) -> int | None:
    """The inflation ratio ``inflated // consumed`` when it marks a possible gzip bomb
    (more than :data:`RATIO_MIN_BYTES` out at over :data:`MAX_RATIO` times the compressed
    bytes read), else None. Shared by every gzip reader (Kineto JSON here, gzipped nsys
    exports in :mod:`traceparse.nsys.gz`)."""
    if inflated > RATIO_MIN_BYTES and inflated > MAX_RATIO * max(consumed, 1):
        return inflated // max(consumed, 1)
    return None


def needs_decimal_text(raw: bytes) -> bool:
    """True when the first :data:`DECIMAL_PROBE_BYTES` hold an absolute ``ts`` with decimals
    (13+ integer digits), i.e. the trace must be decoded with ``quote_times=True``.

    A cheap probe (one regex search over at most 1 MiB) so such traces are decoded once
    instead of decoded, rejected by :class:`NeedsDecimalText`, and decoded again. A false
    positive only costs the slower exact path; a miss still falls back as before.

    Example:
        >>> needs_decimal_text(b'{"traceEvents": [{"ts": 1694128201545123.456}]}')
        True
        >>> needs_decimal_text(b'{"traceEvents": [{"ts": 4203669603.771}]}')
        False
    """
    return _BIG_DECIMAL_TS.search(raw, 0, DECIMAL_PROBE_BYTES) is not None


def decode(raw: bytes, path: Path | str, *, quote_times: bool = False,
           quote_big: bool = False) -> tuple[dict[str, Any], list[Any]]:
    """Decode JSON text into ``(header, events)``.

    ``header`` holds every top-level key except ``traceEvents`` (empty for a bare list).
    With ``quote_times`` every ``ts``/``dur`` number comes back as its exact decimal text
    (a string). With ``quote_big`` only the numbers a float64 may not hold exactly (a
    ``ts``/``dur`` with 13+ integer digits and a fraction, more than 3 decimals, or an
    exponent) come back as text, the rest as numbers: the fast exact path (two regex
    passes with literal prefixes, half the matches of ``quote_times``, and ints/floats
    need no text conversion). Otherwise every number comes back as orjson decodes it.

    Example:
        >>> decode(b'[{"ts": 1694128201545123.45, "dur": 2.5}]', "t", quote_big=True)[1]
        [{'ts': '1694128201545123.45', 'dur': 2.5}]
    """
    raw = quote(raw, quote_times=quote_times, quote_big=quote_big)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(path, f"invalid JSON: {exc}") from None
    if isinstance(doc, list):
        return {}, doc
    if not isinstance(doc, dict):
        raise NotATrace(path, f"not a trace: top-level JSON is a {type(doc).__name__}, "
                               "expected an object with traceEvents or a list of events")
    if "traceEvents" not in doc:
        raise NotATrace(path, "not a Kineto/Chrome trace: no traceEvents key")
    events = doc.pop("traceEvents")
    if not isinstance(events, list):
        raise TraceError(path, f"traceEvents is a {type(events).__name__}, expected a list")
    return doc, events


def quote(raw: bytes, *, quote_times: bool = False, quote_big: bool = False) -> bytes:
    """``raw`` with the ``ts``/``dur`` numbers :func:`decode` keeps as text put in quotes
    (all of them with ``quote_times``, those a float64 may not hold with ``quote_big``).

    Example:
        >>> quote(b'{"ts": 1694128201545123.45, "dur": 2.5}', quote_big=True)
        b'{"ts":"1694128201545123.45", "dur": 2.5}'
    """
    if quote_big:
        raw = _BIG_TS.sub(lambda m: b'"ts":"' + m[1] + b'"', raw)
        if _ODD_DUR.search(raw):
            raw = _ODD_DUR.sub(lambda m: b'"dur":"' + m[1] + b'"', raw)
    elif quote_times:
        # one pass, callable replacement: ~30% faster than two template substitutions
        raw = _TIME_NUMBER.sub(lambda m: b'"' + m[1] + b'":"' + m[2] + b'"', raw)
    return raw


def us_to_ns(values: list[Any], name: str, path: Path | str, *,
             ns_units: bool = False) -> pl.Series:
    """Microsecond values (ints, decimal strings or None) -> exact int64 ns (Int64 Series).

    Ints are multiplied by 1000; decimal text goes through :func:`us_text_to_ns`. With
    ``ns_units`` the values are already nanoseconds (rounded half to even). A mix of ints,
    floats and text (:func:`decode` with ``quote_big``) is converted per type. Anything
    else (a bool, a list, text that is not a number) raises :class:`TraceError`.
    """
    types = set(map(type, values))
    if len(types) > 1 and types <= {int, float, str}:
        return _mixed_to_ns(values, name, path, ns_units)
    if all(type(v) is int for v in values):
        top = MAX_US if not ns_units else 2**63 - 1
        low = -top - 1 if ns_units else -top  # int64 ns reach -2**63
        big = next((v for v in values if not low <= v <= top), None)
        if big is not None:
            raise _out_of_range(path, name, big)
        return pl.Series(name, values, dtype=pl.Int64) * (1 if ns_units else 1000)
    if not ns_units and all(type(v) is float or type(v) is int for v in values):
        import numpy as np  # only float times need it (not the typed path's text)

        us = np.asarray(values, dtype=np.float64)
        if us.size and np.abs(us).max() >= FLOAT_EXACT_US:
            raise NeedsDecimalText(name)
        # floor + fraction split: exact for values with <= 3 decimals below 2**43 us.
        whole = np.floor(us)
        ns = whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000).astype(np.int64)
        return pl.Series(name, ns, dtype=pl.Int64)
    if ns_units:
        from decimal import Decimal

        try:
            exact = [None if v is None else round(Decimal(str(v))) for v in values]
        except (ArithmeticError, ValueError):
            raise TraceError(path, f"'{name}' holds a value that is not a number") from None
        huge = next((v for v in exact if v is not None and not -(2**63) <= v < 2**63), None)
        if huge is not None:
            raise _out_of_range(path, name, huge)
        return pl.Series(name, exact, dtype=pl.Int64)
    text = []
    for v in values:
        t = type(v)
        if t is str or v is None:
            text.append(v)
        elif t is int:
            text.append(str(v))
        elif t is float:  # a float time the quoting pattern did not catch
            if abs(v) >= FLOAT_EXACT_US:
                raise NeedsDecimalText(name)
            text.append(repr(v))
        else:
            raise TraceError(path, f"'{name}' holds a {t.__name__} ({str(v)[:40]}), "
                                   "expected a number")
    return us_text_to_ns(pl.Series(name, text, dtype=pl.String), path)


def _mixed_to_ns(values: list[Any], name: str, path: Path | str,
                 ns_units: bool) -> pl.Series:
    """:func:`us_to_ns` for a mix of ints, floats and text: each type is converted by its
    own vectorised path and the results put back in place."""
    import numpy as np

    where: dict[type, list[int]] = {int: [], float: [], str: []}
    for i, v in enumerate(values):
        where[type(v)].append(i)
    out = np.empty(len(values), dtype=np.int64)
    for pos in where.values():
        if pos:
            part = us_to_ns([values[i] for i in pos], name, path, ns_units=ns_units)
            out[pos] = part.to_numpy()
    return pl.Series(name, out, dtype=pl.Int64)


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
                out.append(None if v is None else round(Decimal(v) * 1000))
            except (InvalidOperation, ValueError, OverflowError):
                raise TraceError(path, f"'{name}' is not a number: {v[:40]!r}") from None
        huge = next((v for v in out if v is not None and not -(2**63) <= v < 2**63), None)
        if huge is not None:
            raise _out_of_range(path, name, huge // 1000)
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
    parts = parts.with_columns(whole=pl.col("field_0").str.strip_chars_start("0"),
                               frac_ns=ms3 + up.cast(pl.Int64))
    # Fits int64 ns: whole < MAX_US, or whole == MAX_US with the rounded fraction at most
    # .807 (positive) / .808 (negative: int64 reaches -2**63). Compared as text (same
    # length), so no integer is formed before the range is known.
    digits, top = len(str(MAX_US)), str(MAX_US)
    last = pl.when(pl.col("neg")).then(808).otherwise(807)  # int64: -2**63 .. 2**63 - 1
    length = pl.col("whole").str.len_chars()
    too_big = parts.filter((length > digits)
                           | ((length == digits) & (pl.col("whole") > top))
                           | ((pl.col("whole") == top) & (pl.col("frac_ns") > last)))
    if too_big.height:
        row = too_big.row(0, named=True)
        shown = ("-" if row["neg"] else "") + row["field_0"] + (
            "." + row["field_1"] if row["field_1"] is not None else "")
        raise _out_of_range(path, name, shown)
    # negative values are built downwards (-whole*1000 - frac) so -2**63 never overflows
    base = pl.col("field_0").cast(pl.Int64) * 1000
    result = parts.select(pl.when(pl.col("neg")).then(-base - pl.col("frac_ns"))
                          .otherwise(base + pl.col("frac_ns")).alias(name))
    return result.to_series()
