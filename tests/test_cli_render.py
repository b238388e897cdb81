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
    # >= 1000: thousands separators, no decimals, never an exponent; < 1000: 3 digits
    assert "5,525,180,000,000" in text and "77,490,833" in text and "0.123" in text
    assert "e+" not in text and "e-" not in text
    tiny = render_table(pl.DataFrame({"x": [5.57e-6]}))
    assert "0.00000557" in tiny and "e-" not in tiny
    assert "1,234" in text or "1,235" in text


def test_decimals_override() -> None:
    assert render_csv(_frame(), decimals={"mean_ns": 1}).splitlines()[2].startswith("b,0.1,")


def test_table_units_from_column_names() -> None:
    from traceparse.cli.common import render

    f = pl.DataFrame({"name": ["k"], "start_ns": [1_500_000], "dur_ns": [2_500],
                      "Avg (ns)": [800.0], "clock_hz": [1.98e9], "bytes": [3_000_000],
                      "peak_flop_per_s": [989e12], "dram_bytes_per_s": [3.35e12]})
    lines = render(f, "table", start_ns=1_000_000).splitlines()
    assert lines[0].split() == ["name", "start", "dur", "Avg", "clock", "bytes", "peak_flop/s",
                                "dram_bytes/s"]
    cells = [c.strip() for c in lines[2].split("  ") if c.strip()]
    assert cells == ["k", "+500 µs", "2.50 µs", "800 ns", "1.98 GHz", "3.00 MB",
                     "989 TFLOP/s", "3350 GB/s"]
    # machines get the raw columns
    assert render(f, "csv").splitlines()[0].startswith("name,start_ns,dur_ns,Avg (ns)")
    # a short name already taken keeps the unit suffix instead of overwriting the column
    g = pl.DataFrame({"start": ["x"], "start_ns": [5]})
    assert render(g, "table", start_ns=0).splitlines()[0].split() == ["start", "start_ns"]


def test_long_names_are_cut_between_words() -> None:
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
    text = render_table(pl.DataFrame({"name": [name]}), max_width=40)
    cell = text.splitlines()[2]
    assert cell == "void at::native::vectorized_elementwise…"
    kept = cell[:-1]
    assert name.startswith(kept) and (kept[-1] in "_ :<,(" or name[len(kept)] in "_ :<,(")
    text = render_table(pl.DataFrame({"name": [name]}), max_width=35)
    assert text.splitlines()[2] == "void at::native::vectorized_…"
