"""The int64 ns boundary of Kineto exact times, worked out by hand.

int64 ns run from -2**63 = -9223372036854775808 to 2**63 - 1 = 9223372036854775807, i.e.
-9223372036854775.808 us .. 9223372036854775.807 us. Every value past either end (after
rounding half to even to whole ns) is a one-line :class:`TraceError` naming the file, in
the per-value path (:func:`us_to_ns`, exponents), the column-wise text path
(:func:`us_text_to_ns`) and the ``Decimal(38, 3)`` fast path (:func:`kineto_times.to_ns`);
``9223372036854775.808`` used to wrap to -2**63.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pytest

from traceparse.errors import TraceError
from traceparse.kineto import times
from traceparse.kineto.io import us_text_to_ns, us_to_ns

PATHS: dict[str, Callable[[str], list[int | None]]] = {
    "text": lambda v: us_text_to_ns(pl.Series("ts", [v]), "t.json").to_list(),
    "fast": lambda v: times.to_ns(pl.Series("ts", [v]), "ts", "t.json").to_list(),
    "values": lambda v: us_to_ns([v], "ts", "t.json").to_list(),
    "exponent": lambda v: us_text_to_ns(pl.Series("ts", [v + "e0"]), "t.json").to_list(),
}

FITS = [
    ("9223372036854775.807", 2**63 - 1),  # the largest value
    ("9223372036854775.8074", 2**63 - 1),  # .8074 rounds down to .807
    ("9223372036854774.9995", 9223372036854775000),  # rounds up into the last whole us
    ("9223372036854775", 9223372036854775000),  # MAX_US without a fraction
    ("-9223372036854775.808", -(2**63)),  # the smallest value
    ("-9223372036854775.8085", -(2**63)),  # tie, 808 is even: stays -2**63
]
REFUSED = [
    "9223372036854775.808",  # 2**63: the smallest positive value that does not fit
    "9223372036854775.8075",  # tie, 807 is odd: rounds up to 2**63
    "09223372036854775.808",  # leading zero does not hide it
    "9223372036854776",
    "-9223372036854775.809",  # -2**63 - 1
    "-9223372036854775.8086",  # rounds to -2**63 - 1
    "99999999999999999.5",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("text", "ns"), FITS)
def test_largest_and_smallest_values_that_fit(path: str, text: str, ns: int) -> None:
    assert PATHS[path](text) == [ns]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("text", REFUSED)
def test_values_past_int64_are_one_line_errors(path: str, text: str) -> None:
    with pytest.raises(TraceError, match="out of range") as err:
        PATHS[path](text)
    message = str(err.value)
    assert message.startswith("t.json: 'ts' out of range") and "\n" not in message


def test_out_of_range_among_plain_values() -> None:
    """One bad value in a column of good ones is still refused (not wrapped)."""
    col = pl.Series("ts", ["1.5", "9223372036854775.808", "2"])
    with pytest.raises(TraceError, match=r"9223372036854775\.808 us does not fit"):
        times.to_ns(col, "ts", "t.json")
    assert times.to_ns(col[[0, 2]], "ts", "t.json").to_list() == [1500, 2000]


def test_ns_units_reach_int64_minimum() -> None:
    assert us_to_ns([-(2**63), 2**63 - 1], "ts", "t", ns_units=True).to_list() == [
        -(2**63), 2**63 - 1]
    with pytest.raises(TraceError, match="out of range"):
        us_to_ns([2**63], "ts", "t.json", ns_units=True)
