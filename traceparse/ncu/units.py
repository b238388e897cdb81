"""Nsight Compute number and unit normalisation.

ncu prints every value as a quoted string. With ``--print-units auto`` (the default of
``ncu --import --csv``) it rescales each value to a readable SI prefix and changes the unit
string to match (``usecond``, ``Mbyte/second``, ``cycle/nsecond``, ``Ghz``, ``Gbyte/s``);
``--print-units base`` prints the unprefixed unit (``nsecond``, ``byte/second``,
``cycle/second``). This module turns any printed (value, unit) pair into the value in ncu's
*base* unit, so values from an auto-scaled page equal the values of the base-unit page of the
same report.

Base units (what ``--print-units base`` prints):
    * a duration alone: ``nsecond``; a time in a denominator: ``second``;
    * a size: ``byte``; a frequency: ``cycle/second`` (``hz`` spellings are mapped to it);
    * everything else (``%``, ``inst``, ``cycle``, ``sector``, ``warp`` ...) is left as is.

Example:
    >>> normalise_unit("Mbyte/second")
    (1000000.0, 'byte/second')
    >>> normalise_unit("usecond")
    (1000.0, 'nsecond')
    >>> parse_number("1,300,800,070.85")
    1300800070.85
"""

from __future__ import annotations

import math
from functools import lru_cache

#: SI prefixes ncu uses for sizes, rates and frequencies (powers of 1000).
PREFIX = {"K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}

#: Time tokens -> how many fit in one second (exact integers, so scaling is exact).
PER_S = {"second": 1.0, "s": 1.0, "msecond": 1e3, "ms": 1e3, "usecond": 1e6, "us": 1e6,
         "nsecond": 1e9, "ns": 1e9}

#: Units that take an SI prefix (``Kbyte``, ``Ghz``); anything else is never prefixed.
PREFIXABLE = {"byte", "bytes", "hz", "Hz", "inst", "cycle", "sector", "request", "warp",
              "thread", "block"}


def _token(tok: str) -> tuple[float, str]:
    """Scale and base spelling of one unit token (no ``/``)."""
    if tok in PER_S:
        return 1e9 / PER_S[tok], "nsecond"
    if tok.lower() == "hz":
        return 1.0, "cycle/second"
    if len(tok) > 1 and tok[0] in PREFIX and tok[1:] in PREFIXABLE:
        base = tok[1:]
        return PREFIX[tok[0]], "cycle/second" if base.lower() == "hz" else base
    return 1.0, tok


@lru_cache(maxsize=4096)
def normalise_unit(unit: str) -> tuple[float, str]:
    """Return ``(factor, base_unit)``: multiply a printed value by ``factor`` to get it in
    ``base_unit`` (ncu's ``--print-units base`` spelling).

    A lone time is expressed in nanoseconds (ncu's base duration unit); a time in a
    denominator in seconds (``cycle/usecond`` -> ``cycle/second`` x 1e6).

    Example:
        >>> normalise_unit("cycle/nsecond")
        (1000000000.0, 'cycle/second')
        >>> normalise_unit("Ghz")
        (1000000000.0, 'cycle/second')
        >>> normalise_unit("%")
        (1.0, '%')
    """
    unit = (unit or "").strip()
    if not unit:
        return 1.0, ""
    if "/" not in unit:
        return _token(unit)
    num, _, den = unit.partition("/")
    nf, nb = _token(num) if num else (1.0, "")
    if den in PER_S:  # a rate: per second
        return nf * PER_S[den], f"{nb}/second"
    # ncu treats a prefix as a label on the printed number wherever it sits: "%/Kbyte"
    # prints 2.614 for 2614 %/byte (observed raw vs raw_base), so it multiplies here too.
    df, db = _token(den) if den else (1.0, "")
    return nf * df, f"{nb}/{db}"


def parse_number(text: str) -> float | None:
    """Parse one printed ncu value; None when it is not a number (``n/a``, names, tuples).

    Handles thousands separators (``"4,194,688"``), ``nan``/``-nan``/``inf`` and surrounding
    blanks. ``nan`` is returned as ``float('nan')`` so that an *empty result* (a launch whose
    replay failed) is distinguishable from a metric that was not collected (None).
    """
    t = text.strip()
    if not t:
        return None
    low = t.lower()
    if low in ("nan", "-nan", "+nan"):
        return math.nan
    if low in ("inf", "+inf", "-inf"):
        return math.inf if not low.startswith("-") else -math.inf
    c = t[0]
    if not (c.isdigit() or c in "+-."):
        return None
    if "," in t:
        t = t.replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def decimals(text: str) -> int:
    """Number of digits printed after the decimal point (0 for integers)."""
    t = text.strip()
    return len(t) - t.index(".") - 1 if "." in t else 0


def printed_tolerance(text: str, factor: float = 1.0) -> float:
    """Half a unit in the last printed place, in base units: the largest error rounding to
    the printed digits can hide (``"1.50"`` in ``cycle/nsecond`` -> 0.005e9 Hz)."""
    return 0.5 * 10.0 ** (-decimals(text)) * factor
