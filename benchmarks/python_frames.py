"""The profiler's cost of Python frames (``with_stack``): the four host-bound runs of the
H200 fusion re-check with unprofiled truth, measured cost per step beside the estimate
with every event at the op price and with Python frames at their own bookkeeping
(docs/calibration.md, "Python frames").

Usage: PYTHONPATH=. python3 benchmarks/python_frames.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from traceparse.analyses import profiler_cost as pc
from traceparse.analyses.steps import step_windows
from traceparse.kineto.reader import read

FUSION = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_recheck" / "fusion"


def row(name: str, truth: dict[str, float]) -> str:
    tl = read(FUSION / f"{name}.json.gz")
    w = step_windows(tl)
    n = w.height
    steps = (w["end_ns"] - w["start_ns"]).to_numpy()
    measured = float(np.median(steps)) - truth["step_ms_median"] * 1e6
    r = pc.profiler_cost(tl, windows=w)
    est = pc.estimate(tl, w)
    op = np.array([est["per_event_ns"] if v is None else v for v in est["by_window"]])
    old = float(op[pc._in_windows(pc.host_events(tl), w)["_w"].to_numpy()].sum()) / n
    frames = r["by_source"].get("python_function", 0) / n
    return (f"| {name} | {frames:.0f} of {r['events'] / n:.0f} | {np.median(steps) / 1e3:.0f} | "
            f"{truth['step_ms_median'] * 1e3:.0f} | {measured / 1e3:.0f} | {old / 1e3:.0f} | "
            f"{r['overhead_ns'] / n / 1e3:.0f} ({r['overhead_low_ns'] / n / 1e3:.0f}-"
            f"{r['overhead_high_ns'] / n / 1e3:.0f}) | {est['python_ns']:.0f} |")


def main() -> None:
    runs = json.loads((FUSION / "fusion_twins.json").read_text())["runs"]
    print("| run | Python frames of events per step | profiled step (µs) | unprofiled (µs) "
          "| measured cost (µs) | every event at the op price (µs) | frames at their own "
          "bookkeeping (band) (µs) | frame bookkeeping (ns) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        if r["name"].endswith("n2097152"):
            print(row(r["name"], r["unprofiled"]))


if __name__ == "__main__":
    main()
