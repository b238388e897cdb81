"""The profiler's recording span (schema ``sources.recorded_*_ns``; docs/analyses.md,
steps): a ``ProfilerStep`` open when torch.profiler stopped ends when it closes, seconds
later maybe, yet nothing after the stop was recorded. Before this rule
``hta__triton_example`` read "over its 1 step (13.3 s of wall time ...) idle 100.0%": the
profiler's ``Trace`` event ends 1.67 ms into that step.

* generated trace: the span is read from the ``Trace`` event (ingest: parsed into
  ``sources``), and the step is cut to it, by hand;
* the real file: the step's recorded part equals the ``Trace`` event's end less the
  step's start, from the file's own JSON.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import TRACES

from traceparse.analyses.steps import step_table
from traceparse.analyses.summary import summarize
from traceparse.kineto.reader import read

BASE = 1_735_632_360_000_000_000


def _doc(trace_end_us: float | None) -> dict:
    # host thread 7: ProfilerStep#1 [100, 20_100) us (closed 20 ms after the stop), a launch
    # [110, 115) of a kernel [120, 130); the profiler recorded [0, trace_end_us)
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 7,
         "ts": 100.0, "dur": 20_000.0, "args": {}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
         "ts": 110.0, "dur": 5.0, "args": {"correlation": 5}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 120.0,
         "dur": 10.0, "args": {"device": 0, "stream": 7, "correlation": 5}},
    ]
    if trace_end_us is not None:
        ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)",
                   "pid": "PyTorch Profiler", "tid": "PyTorch Profiler", "ts": 0.0,
                   "dur": trace_end_us, "args": {}})
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE, "traceEvents": ev}


def _load(tmp_path: Path, trace_end_us: float | None) -> object:
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_doc(trace_end_us)))
    return read(p)


def test_the_step_is_cut_at_the_profilers_stop(tmp_path: Path) -> None:
    tl = _load(tmp_path, 1_000.0)
    src = tl.sources.row(0, named=True)  # type: ignore[attr-defined]
    assert (src["recorded_start_ns"], src["recorded_end_ns"]) == (BASE, BASE + 1_000_000)
    ing = tl.ingest.filter(pl.col("source") == "Trace")  # type: ignore[attr-defined]
    assert ing.select("table", "outcome", "count").rows() == [("sources", "parsed", 1)]
    st = step_table(tl).row(0, named=True)  # type: ignore[arg-type]
    # [100, 20_100) us cut to [100, 1_000) us: wall 900 us; busy 10 us (the kernel)
    assert (st["start_ns"], st["end_ns"]) == (BASE + 100_000, BASE + 1_000_000)
    assert (st["wall_ns"], st["gpu_busy_ns"]) == (900_000, 10_000)
    assert "1 step (900 µs of wall time" in summarize(tl)["verdict"]  # type: ignore[arg-type]


def test_without_a_trace_event_the_step_stays_whole(tmp_path: Path) -> None:
    tl = _load(tmp_path, None)
    assert tl.sources["recorded_end_ns"].to_list() == [None]  # type: ignore[attr-defined]
    assert step_table(tl)["wall_ns"].to_list() == [20_000_000]  # type: ignore[arg-type]


@pytest.mark.shared
def test_triton_example_step_is_its_recorded_part() -> None:
    from traceparse import load

    path = TRACES / "torch/hta__triton_example.json.gz"
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    # the file's own events, us: the step opens 1.67 ms before the Trace event ends and
    # closes 13.3 s after it; no event but the step ends after the Trace event
    trace = next(e for e in ev if e.get("cat") == "Trace")
    step = next(e for e in ev if str(e.get("name")).startswith("ProfilerStep"))
    stop = trace["ts"] + trace["dur"]
    assert step["ts"] + step["dur"] - stop > 13e6
    assert all(e["ts"] + e["dur"] <= stop for e in ev
               if e.get("ph") == "X" and e is not step and e is not trace)
    st = step_table(load(path)).row(0, named=True)
    assert st["wall_ns"] == round((stop - step["ts"]) * 1_000)  # 1,673,183 ns
    assert st["idle_ns"] < 0.25 * st["wall_ns"]  # was 13.3 s of 13.3 s
