"""Rendering of frames for people (table) and machines (CSV/JSON)."""

from __future__ import annotations

import polars as pl

from traceparse.cli.common import render_csv, render_table


def _frame() -> pl.DataFrame:
    return pl.DataFrame({"name": ["a", "b"], "mean_ns": [77490833.33333333, 0.123456],
                         "flops": [5.52518e12, 1234.5]})


def test_csv_floats_round_trip_exactly() -> None:
    lines = render_csv(_frame()).splitlines()
    assert lines[1] == "a,77490833.33333333,5525180000000.0"
    assert lines[2] == "b,0.123456,1234.5"
    back = pl.read_csv(render_csv(_frame()).encode())
    assert back["mean_ns"].to_list() == _frame()["mean_ns"].to_list()


def test_table_floats_are_readable() -> None:
    text = render_table(_frame())
    # >= 1e9: scientific; 1000..1e9: thousands separators, no decimals; < 1000: 3 digits
    assert "5.525e+12" in text and "77,490,833" in text and "0.123" in text
    assert "1,234" in text or "1,235" in text


def test_decimals_override() -> None:
    assert render_csv(_frame(), decimals={"mean_ns": 1}).splitlines()[2].startswith("b,0.1,")
