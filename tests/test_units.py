"""Human units (traceparse/units.py): hand-checked values and the module's own examples."""

from __future__ import annotations

import doctest

import pytest

from traceparse import units


def test_examples_in_docstrings_hold() -> None:
    result = doctest.testmod(units)
    assert result.attempted >= 7
    assert result.failed == 0


@pytest.mark.parametrize(("ns", "text"), [
    (0, "0 ns"), (1, "1 ns"), (999, "999 ns"), (1_000, "1.00 µs"), (12_340, "12.3 µs"),
    (999_499, "999 µs"), (1_000_000, "1.00 ms"), (511_212_700, "511 ms"),
    (9_996_000, "10.0 ms"), (59_000_000_000, "59.0 s"), (-2_500, "-2.50 µs")])
def test_duration_scales_to_three_significant_digits(ns: int, text: str) -> None:
    assert units.duration(ns) == text


def test_rates_clocks_sizes() -> None:
    assert units.clock(1_980_000_000) == "1.98 GHz"
    assert units.clock(705_000_000) == "705 MHz"
    assert units.clock(2_100_000_000) == "2.10 GHz"
    assert units.tflops(989.5e12) == "990 TFLOP/s"
    assert units.gbps(4.8e12) == "4800 GB/s"
    # the unit that gives 3 significant digits, never an exponent (issue 26)
    assert units.tflops(5.57e6) == "5.57 MFLOP/s"
    assert units.tflops(116e9) == "116 GFLOP/s"
    assert units.tflops(999.6e9) == "1000 GFLOP/s"
    assert units.tflops(0.0) == "0 FLOP/s"
    assert units.gbps(22.8e6) == "22.8 MB/s"
    assert units.gbps(950.0) == "950 B/s"
    assert units.size(80e9) == "80.0 GB"
    assert units.timestamp(5_000, 1_000) == "+4.00 µs"
    assert units.plural(1, "device") == "1 device"
    assert units.plural(2, "device") == "2 devices"
