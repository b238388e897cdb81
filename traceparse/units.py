"""Numbers for people: the units every table and text view of the CLI prints.

Machine formats (``--format csv|json``) keep the raw columns (``*_ns`` integers, bytes,
FLOP/s); only the human views go through these functions. The rules (docs/cli.md):

* durations are scaled to ns, µs, ms or s and shown with 3 significant digits
  (``duration(511_212_700) == '511 ms'``);
* timestamps are shown relative to the trace start (``+1.25 ms``), never as raw epoch
  nanoseconds;
* clocks in GHz (MHz below 1 GHz), compute rates in TFLOP/s (GFLOP/s, MFLOP/s below),
  bandwidths in GB/s (MB/s, kB/s below), sizes in
  B/kB/MB/GB (powers of 1000, as nsys and datasheets count);
* counts with thousands separators and the noun in the right number (``plural(1, "kernel")
  == '1 kernel'``).
"""

from __future__ import annotations

import math

#: (unit, nanoseconds per unit), largest first.
DURATION_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
#: (unit, bytes per unit), largest first (SI, as nsys stats and datasheets).
SIZE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))


def significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, trailing zeros kept, no exponent.

    Example:
        >>> significant(5.3), significant(12.0), significant(810.0), significant(1234.6)
        ('5.30', '12.0', '810', '1235')
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:.0f}" if value == 0 else str(value)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    # rounding can carry into one more digit (9.995 -> 10.00): drop the extra decimal
    if decimals and len(text.lstrip("-").replace(".", "").lstrip("0")) > digits:
        text = f"{value:.{decimals - 1}f}"
    return text


def duration(ns: float | None) -> str:
    """A duration in nanoseconds, scaled to ns/µs/ms/s.

    Example:
        >>> duration(800), duration(12_000), duration(5_300_000), duration(511_212_700)
        ('800 ns', '12.0 µs', '5.30 ms', '511 ms')
        >>> duration(2.5e9), duration(None)
        ('2.50 s', '')
    """
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return ""
    v = float(ns)
    if v == 0:
        return "0 ns"
    for unit, scale in DURATION_UNITS:
        if abs(v) >= scale or unit == "ns":
            if unit == "ns":
                return f"{v:.0f} ns"
            return f"{significant(v / scale)} {unit}"
    raise AssertionError("unreachable")


def timestamp(ns: float | None, start_ns: float | None) -> str:
    """A time on the trace clock, shown relative to the trace start ``start_ns``.

    Example:
        >>> timestamp(1_003_500_000, 1_000_000_000)
        '+3.50 ms'
        >>> timestamp(1_000_000_000, 1_000_000_000)
        '+0 ns'
    """
    if ns is None:
        return ""
    return "+" + duration(float(ns) - float(start_ns or 0))


def clock(hz: float | None) -> str:
    """A clock rate: ``clock(1.98e9) == '1.98 GHz'``, ``clock(705e6) == '705 MHz'``."""
    if hz is None:
        return ""
    if hz >= 1e9:
        return f"{hz / 1e9:.2f} GHz"
    return f"{hz / 1e6:.0f} MHz"


#: (prefix, scale), largest first: a rate is printed in the largest unit it reaches.
RATE_PREFIXES = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def _rate(value: float, unit: str, floor: float) -> str:
    for pre, scale in RATE_PREFIXES:
        if scale <= floor and (abs(value) >= scale or pre == ""):
            return f"{significant(value / scale)} {pre}{unit}"
    raise AssertionError("unreachable")


def tflops(flop_per_s: float | None) -> str:
    """A compute rate with 3 significant digits in the largest unit it reaches (TFLOP/s,
    GFLOP/s, MFLOP/s, ...), never in scientific notation.

    Example:
        >>> tflops(989.4e12), tflops(1.25e12), tflops(5.57e6), tflops(0.0)
        ('989 TFLOP/s', '1.25 TFLOP/s', '5.57 MFLOP/s', '0 FLOP/s')
    """
    if flop_per_s is None or not math.isfinite(flop_per_s):
        return ""
    return _rate(float(flop_per_s), "FLOP/s", 1e12)


def gbps(bytes_per_s: float | None) -> str:
    """A bandwidth with 3 significant digits: GB/s (10^9 bytes) from 1 GB/s up, MB/s and
    kB/s below.

    Example:
        >>> gbps(3.35e12), gbps(12.5e9), gbps(22.8e6)
        ('3350 GB/s', '12.5 GB/s', '22.8 MB/s')
    """
    if bytes_per_s is None or not math.isfinite(bytes_per_s):
        return ""
    return _rate(float(bytes_per_s), "B/s", 1e9)


def size(nbytes: float | None) -> str:
    """A size in B/kB/MB/GB (powers of 1000): ``size(1_500_000) == '1.50 MB'``,
    ``size(512) == '512 B'``."""
    if nbytes is None:
        return ""
    v = float(nbytes)
    for unit, scale in SIZE_UNITS:
        if abs(v) >= scale or unit == "B":
            return f"{v:.0f} B" if unit == "B" else f"{significant(v / scale)} {unit}"
    raise AssertionError("unreachable")


def count(n: int) -> str:
    """An integer count with thousands separators: ``count(1234567) == '1,234,567'``."""
    return f"{n:,}"


def plural(n: int, noun: str, plural_form: str | None = None) -> str:
    """``n`` and ``noun`` in the right number.

    Example:
        >>> plural(1, "kernel"), plural(2, "kernel"), plural(0, "memory op")
        ('1 kernel', '2 kernels', '0 memory ops')
        >>> plural(3, "process"), plural(1234, "call"), plural(2, "graph launch")
        ('3 processes', '1,234 calls', '2 graph launches')
    """
    regular = noun + ("es" if noun.endswith(("s", "sh", "ch", "x", "z")) else "s")
    word = noun if n == 1 else (plural_form or regular)
    return f"{count(n)} {word}"


#: Characters after which a long name may be cut (between words or name parts).
_BREAKS = " _,;:/<>()[]{}-."


def shorten(text: str, width: int) -> str:
    """``text`` cut to at most ``width`` characters, ending in ``…``; the cut falls after a
    separator (space, ``_``, ``,``, ``(``, ``<``, ...) so no word is broken mid-word, unless
    the only separator is in the first half (then the cut is at ``width``).

    Example:
        >>> shorten("void at::native::vectorized_elementwise_kernel<4>", 30)
        'void at::native::vectorized_…'
        >>> shorten("short", 30)
        'short'
    """
    if len(text) <= width:
        return text
    head = text[: width - 1]
    if text[len(head)] in _BREAKS:  # the cut already falls between two words
        return head.rstrip() + "…"
    cut = max(head.rfind(c) for c in _BREAKS)
    if cut >= width // 2:
        head = head[: cut + 1]
    return head + "…"
