"""Time calibrate, replay (measured and what-if) and diff on shared traces.

Usage: PYTHONPATH=. python3 benchmarks/bench_model.py [TRACE...]
(default: the largest shared nsys exports). Prints medians of 3 runs.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from traceparse.analyses.calibrate import calibrate
from traceparse.analyses.diff import diff
from traceparse.analyses.replay import replay
from traceparse.loader import load

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT = ["nsys/instant-ngp__report13.sqlite", "nsys/rodinia__report2.sqlite",
           "torch/hta__trace_diff_control.json.gz"]


def _median(fn, runs: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    paths = sys.argv[1:] or [str(SHARED / p) for p in DEFAULT]
    print("| trace | GPU activities | calibrate | replay | replay no-launch-overhead | diff self |")
    print("|---|---:|---:|---:|---:|---:|")
    for p in paths:
        tl = load(p)
        cols = [_median(lambda t=tl: calibrate(t)), _median(lambda t=tl: replay(t)),
                _median(lambda t=tl: replay(t, no_launch_overhead=True)),
                _median(lambda t=tl: diff(t, t))]
        print(f"| {Path(p).name} | {tl.gpu.height:,} | " + " | ".join(f"{c:.2f} s" for c in cols)
              + " |")


if __name__ == "__main__":
    main()
