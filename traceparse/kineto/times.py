"""Exact ``ts``/``dur`` columns of Kineto events, from the JSON text the decoder kept.

The typed decoder (:mod:`traceparse.kineto.decode`) keeps each event's ``ts`` and ``dur``
as their **raw JSON text** (``msgspec.Raw``), so no float ever stands between the file
and the nanoseconds, and no regex pass has to quote the times before decoding. A bucket
of events becomes one text column (:func:`time_column`): the texts are joined with one
``bytes.join``, split into a polars ``String`` series, and converted once per table by
:func:`to_ns` with the integer rules of :func:`traceparse.kineto.io.us_text_to_ns`
(``round(Decimal(x) * 1000)``, ties to even).

The result is what :func:`traceparse.kineto.io.decode` gives with ``quote_times=True``
(every time as its decimal text), the path the other decode modes are exact against:

* a number -> its text; absent or ``null`` -> missing (the event is skipped, "missing ts
  or dur");
* anything else (a quoted time ``"12.5"``, an exponent, a bool, a list) is rare: that
  bucket falls back to Python values (:func:`_values`), a string becomes its text, the
  rest reaches :func:`~traceparse.kineto.io.us_to_ns`, which refuses it with the same
  one-line error; a number beyond float64 (``1e400``) is "invalid JSON", as orjson says.

A duration is negative when its value is below zero (``-0.0`` is not), as the numeric
comparison of the float path decides.

Events decoded as dicts (the orjson reference path) carry Python values instead of text;
:func:`time_column` keeps those as a list, and :func:`to_ns` converts them with
:func:`~traceparse.kineto.io.us_to_ns` as before.

Example:
    >>> import msgspec
    >>> col = time_column([msgspec.Raw(b"1694128201545123.456"), msgspec.Raw(b"2")])
    >>> to_ns(col, "ts", "t").to_list()
    [1694128201545123456, 2000]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from traceparse.errors import TraceError
from traceparse.kineto.io import us_text_to_ns, us_to_ns

#: A time column: decimal text (``String`` series, null = missing) or Python values.
TimeColumn = pl.Series | list[Any]

#: The bytes of plain decimal numbers (``-12.5``) and the ``\n`` separator: a bucket with
#: any other byte (``null``, exponents, quoted times, bools ...) takes the per-value path
#: (found by deleting these with ``bytes.translate``: ~8x faster than a regex search).
_PLAIN = b"0123456789.-\n"
#: Text of a zero (``-0``, ``-0.000``): not a negative duration.
_ZERO = r"^-?0*\.?0*$"


def time_column(values: Sequence[Any], path: Path | str = "") -> TimeColumn:
    """The ``ts`` (or ``dur``) of a bucket of events as one column.

    ``values`` are ``msgspec.Raw`` texts (typed path) or Python values (orjson path; kept
    as they are). Raw plain decimals become a ``String`` series, empty text (absent) null;
    any other raw text makes the whole bucket a list of :func:`_values`.

    Raises:
        TraceError: a number beyond float64 (``1e400``), refused as invalid JSON as the
            full decode refuses it.
    """
    if not values or type(values[0]) is not msgspec.Raw:
        return list(values)
    joined = b"\n".join(values)
    if joined.translate(None, _PLAIN):
        return _values(values, path)
    # split in polars: no Python str per value (~2x faster for a 33k-event bucket)
    col = pl.Series([joined.decode()], dtype=pl.String).str.split("\n").explode()
    if b"\n\n" in joined or joined[:1] == b"\n" or joined[-1:] == b"\n" or not joined:
        col = pl.select(pl.when(col != "").then(col)).to_series()
    return col


def _values(raws: Sequence[Any], path: Path | str) -> list[Any]:
    """Raw JSON texts -> the values of ``quote_times`` decoding: a number -> its text,
    absent or ``null`` -> None, anything else -> its decoded JSON value."""
    out: list[Any] = []
    for r in raws:
        b = bytes(r)
        if not b:
            out.append(None)
        elif b[:1] in b"-0123456789":
            if (b"e" in b or b"E" in b) and math.isinf(float(b)):
                raise TraceError(path, "invalid JSON: number is infinity when parsed as "
                                       f"double: {b[:40].decode()}")
            out.append(b.decode())
        else:
            out.append(msgspec.json.decode(b))
    return out


def present(col: TimeColumn) -> list[bool]:
    """Whether each value is there (not missing / null)."""
    if isinstance(col, pl.Series):
        return col.is_not_null().to_list()
    return [v is not None for v in col]


def complete(col: TimeColumn) -> bool:
    """True when no value is missing (a text column without nulls; lists are not
    checked here: :func:`present` does)."""
    return isinstance(col, pl.Series) and col.null_count() == 0


def nonnegative(col: TimeColumn) -> bool:
    """True when no value of a text column is negative (no ``-`` at all, the usual case:
    one scan instead of :func:`negative`'s list)."""
    return isinstance(col, pl.Series) and not col.str.contains("-", literal=True).any()


def negative(col: TimeColumn) -> list[bool]:
    """Whether each duration is below zero (missing -> False)."""
    if isinstance(col, pl.Series):
        neg = col.str.starts_with("-") & ~col.str.contains(_ZERO)
        return neg.fill_null(False).to_list()
    return [_negative(v) for v in col]


def _negative(v: Any) -> bool:
    t = type(v)
    if t is int or t is float:
        return bool(v < 0)
    if t is str and v.lstrip().startswith("-"):
        try:
            return float(v) < 0
        except ValueError:
            return True  # not a number: the conversion refuses it later
    return False


def take(col: TimeColumn, keep: list[bool]) -> TimeColumn:
    """The values of ``col`` where ``keep`` is true."""
    if all(keep):
        return col
    if isinstance(col, pl.Series):
        return col.filter(pl.Series(keep, dtype=pl.Boolean))
    return list(compress(col, keep))


def concat(cols: list[TimeColumn]) -> TimeColumn:
    """One column from the columns of several buckets (text stays text)."""
    if all(isinstance(c, pl.Series) for c in cols):
        series = [c for c in cols if isinstance(c, pl.Series)]
        return pl.concat(series) if series else pl.Series([], dtype=pl.String)
    out: list[Any] = []
    for c in cols:
        out += c.to_list() if isinstance(c, pl.Series) else c
    return out


def head(col: TimeColumn, n: int) -> list[Any]:
    """The first ``n`` values as Python objects (text or numbers)."""
    return col[:n].to_list() if isinstance(col, pl.Series) else list(col[:n])


def _decimal3_to_ns(text: pl.Series) -> pl.Series | None:
    """Plain decimal text with at most 3 decimals (Kineto writes 0 to 3) -> ns through
    polars' ``Decimal(38, 3)``, whose scaled integer *is* the ns value (~20x faster than
    the string arithmetic of :func:`~traceparse.kineto.io.us_text_to_ns`, same result).
    None when some value has more decimals (rounding is left to that function) or
    leaves int64 ns (its error message names the value)."""
    if text.str.contains(r"\.\d{4}").any():
        return None
    try:
        ns = (text.cast(pl.Decimal(38, 3)) * 1000).cast(pl.Int128)
    except pl.exceptions.PolarsError:
        return None
    low, high = ns.min(), ns.max()
    if low is not None and (low < -(2**63) or high > 2**63 - 1):  # type: ignore[operator]
        return None  # the cast to Int64 would wrap silently; us_text_to_ns names the value
    return ns.cast(pl.Int64)


def to_ns(col: TimeColumn, name: str, path: Path | str, *,
          ns_units: bool = False) -> pl.Series:
    """A time column -> exact int64 ns (``Int64`` series named ``name``).

    Raises:
        TraceError: a value that is not a number, or out of the int64 ns range.
        NeedsDecimalText: (Python floats only) a float too large to hold its ns digits.
    """
    if isinstance(col, pl.Series) and not ns_units:
        fast = _decimal3_to_ns(col)
        if fast is not None:
            return fast.alias(name)
        return us_text_to_ns(col.alias(name), path).alias(name)
    values = col.to_list() if isinstance(col, pl.Series) else col
    return us_to_ns(values, name, path, ns_units=ns_units).alias(name)
