"""CUDA-graph decode runs predicted onto themselves without the profiler, before and after
the graph-launch rule (``analyses/profiler_cost.graph_launch_costs``; docs/calibration.md
"Graph launches under the profiler").

Usage: PYTHONPATH=. python3 benchmarks/graph_launch_cost.py [--no-write]

For every ``decode_b*_graph`` trace with a ``*.truth.json`` in the shared H200 sweep (where
the rule was found) and the H100 captures (held out): the profiled median step, the
profiler-free self-prediction (``predict --scale batch=1``) with the rule, the same with
no graph-launch excess removed (the previous model), and the step measured without the
profiler (``graph_step_ms_median``). Writes its table into benchmarks/RESULTS.md between
the ``graph_launch_cost`` markers.
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
from pathlib import Path

import polars as pl

from traceparse import __version__
from traceparse.analyses import profiler_cost, scale
from traceparse.analyses.calibrate import calibrate
from traceparse.kineto.reader import read

ROOT = Path(__file__).resolve().parents[1]
SETS = [("H200 (shared sweep)", ROOT.parent / "shared" / "traces" / "gpu" / "sweep"),
        ("H100 (held out)", ROOT / "sample_traces" / "h100_captures" / "sweep")]
START, END = "<!-- graph_launch_cost:start -->", "<!-- graph_launch_cost:end -->"
STEPS = r"^decode_step_\d+$"


def rows() -> list[str]:
    out = []
    for label, d in SETS:
        for tr in sorted(d.glob("decode_b*_graph.truth.json"),
                         key=lambda p: int(p.name.split("_b")[1].split("_")[0])):
            name = tr.name.removesuffix(".truth.json")
            tl = read(d / f"{name}.json.gz")
            cal = calibrate(tl)
            truth = json.loads(tr.read_text())["graph_step_ms_median"] * 1e6
            g = profiler_cost.graph_launch_costs(tl)
            with_rule = scale.predict_scaled(tl, cal, 1.0, step_regex=STEPS)
            orig = profiler_cost.graph_launch_costs
            profiler_cost.graph_launch_costs = (  # type: ignore[assignment]
                lambda t, f=orig: f(t).clear())
            try:
                without = scale.predict_scaled(tl, cal, 1.0, step_regex=STEPS)
            finally:
                profiler_cost.graph_launch_costs = orig  # type: ignore[assignment]
            launch = g.filter(pl.col("start_ns") > g["start_ns"].min())
            x = (launch["end_ns"] - launch["start_ns"]).median()
            out.append(
                f"| {label} | {name} | {g['nodes'].max()} | {x / 1e3:.0f} µs | "  # type: ignore[operator]
                f"{with_rule['profiled_step_ns'] / 1e3:.1f} µs | "
                f"{without['predicted_step_ns'] / 1e3:.1f} µs "
                f"({(without['predicted_step_ns'] / truth - 1) * 100:+.1f}%) | "
                f"{with_rule['predicted_step_ns'] / 1e3:.1f} µs "
                f"({(with_rule['predicted_step_ns'] / truth - 1) * 100:+.1f}%) | "
                f"{truth / 1e3:.1f} µs |")
            print(out[-1], flush=True)
    return out


def main() -> int:
    body = rows()
    text = "\n".join([
        START,
        "## CUDA-graph launches under the profiler (`PYTHONPATH=. python3 "
        "benchmarks/graph_launch_cost.py`, issue 27)",
        "",
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; traceparse "
        f"{__version__}; Python {platform.python_version()}; self-prediction at the traced "
        "batch (`predict_scaled(..., 1.0)`), decode steps `decode_step_N`. Before: no "
        "graph-launch excess removed (the per-op estimate only); after: the rule of "
        "docs/calibration.md. The H100 runs were not looked at while the rule was written.",
        "",
        "| GPU | run | kernel nodes | median graph launch (after the first) | profiled step "
        "| predicted before (error) | predicted after (error) | truth (unprofiled) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *body, END])
    if "--no-write" not in sys.argv:
        p = ROOT / "benchmarks" / "RESULTS.md"
        s = p.read_text()
        if START in s:
            s = s[:s.index(START)] + text + s[s.index(END) + len(END):]
        else:
            s = s.rstrip("\n") + "\n\n" + text + "\n"
        p.write_text(s)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
