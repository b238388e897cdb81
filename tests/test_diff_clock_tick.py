"""diff does not flag a median that moved by one tick of a coarse clock (analyses/diff.py
``clock_tick_ns``; docs/diff.md "Clock ticks")."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import gpu, ranges, timeline

from traceparse import load
from traceparse.analyses.diff import clock_tick_ns, compare, diff
from traceparse.timeline import Timeline


def _ops(durs: list[int], start: int = 1_000_000) -> Timeline:
    """One op per duration, 10 us apart from ``start``, and one 5 us kernel at ``start``."""
    rows = [{"kind": "cpu_op", "name": "aten::transpose", "start_ns": start + 10_000 * i,
             "end_ns": start + 10_000 * i + d} for i, d in enumerate(durs)]
    return timeline(gpu=gpu([{"start_ns": start, "end_ns": start + 5_000, "name": "k"}]),
                    ranges=ranges(rows))


def test_the_tick_is_the_largest_power_of_ten_dividing_every_time() -> None:
    assert clock_tick_ns(_ops([2_000] * 20)) == 1_000
    assert clock_tick_ns(_ops([2_100] * 20)) == 1  # hundreds of ns: no profiler writes them
    assert clock_tick_ns(_ops([2_000] * 19 + [2_001])) == 1
    # a start off the microsecond grid is enough
    assert clock_tick_ns(_ops([2_000] * 20, start=1_000_500)) == 1_000  # offsets from min
    # too few times to tell: 1 ns
    assert clock_tick_ns(_ops([2_000] * 5)) == 1


def test_one_tick_is_not_a_change_two_are() -> None:
    # whole microseconds: every op 2 us in A, 3 us in B (+50 %, p tiny): one tick, not
    # flagged; 2 -> 4 us (two ticks) is
    a, b, c = _ops([2_000] * 20), _ops([3_000] * 20), _ops([4_000] * 20)
    row = diff(a, b).filter(pl.col("level") == "op").row(0, named=True)
    assert (row["delta_pct"], row["flag"]) == (50.0, "")
    assert row["p_value"] < 1e-6
    assert diff(a, c).filter(pl.col("level") == "op")["flag"].to_list() == ["regression"]
    # the same +1,000 ns on a nanosecond clock is measured: flagged
    a1, b1 = _ops([2_001] * 20), _ops([3_001] * 20)
    assert diff(a1, b1).filter(pl.col("level") == "op")["flag"].to_list() == ["regression"]
    notes = compare(a, b, names=("A", "B")).notes
    assert any("A and B hold times in whole microseconds" in n for n in notes)
    assert not any("whole microseconds" in n for n in compare(a1, b1).notes)


@pytest.mark.shared
def test_dlrm_ranks_hold_whole_microseconds() -> None:
    """``param__dlrm_8rank`` (2023): every ``ts`` and ``dur`` of the JSON is an integer
    (microseconds). Rank 0 against rank 3 flagged ``aten::transpose`` and ``aten::flatten``
    2 -> 3 us (+50 %) and two kernels 3 -> 2 us (-33 %): one tick each, now unflagged."""
    t = TRACES / "torch"
    r0 = t / "param__dlrm_8rank__worker0_step_12.1694128201545.pt.trace.json"
    r3 = t / "param__dlrm_8rank__worker3_step_12.1694128201557.pt.trace.json"
    if not r0.exists():
        pytest.skip(f"real-trace corpus not present: {r0}")
    ev = [e for e in json.loads(r0.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in ev)
    a, b = load(r0), load(r3)
    assert clock_tick_ns(a) == clock_tick_ns(b) == 1_000
    d = diff(a, b)
    moved = d.filter(pl.col("name").is_in(["aten::transpose", "aten::flatten"]))
    assert sorted((moved["new_median_ns"] - moved["base_median_ns"]).to_list()) == [1000.0,
                                                                                   1000.0]
    assert moved["flag"].to_list() == ["", ""]
    flagged = d.filter(pl.col("flag").is_in(["regression", "improvement"]))
    assert ((flagged["new_median_ns"] - flagged["base_median_ns"]).abs() > 1000).all()


@pytest.mark.shared
def test_nanosecond_traces_keep_a_one_ns_tick() -> None:
    s = TRACES / "gpu" / "sweep" / "decode_b1_eager.json.gz"
    n = TRACES / "nsys" / "nsys-ai__mfu_2gpu_before.sqlite"
    if not s.exists() or not n.exists():
        pytest.skip(f"real-trace corpus not present: {s}")
    assert clock_tick_ns(load(s)) == clock_tick_ns(load(n)) == 1
