"""Benchmark: breakdown() and idle_gaps() on a synthetic timeline of N activities.

    python3 benchmarks/bench_attribution.py [N ...]      # default 100000 1000000

Prints the median of 3 runs per size (seconds). Activities: 4 streams, random durations and
gaps, one launch call per activity; deterministic (seed 0).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traceparse import schema
from traceparse.analyses.attribution import breakdown, check_attribution
from traceparse.analyses.gaps import idle_gaps
from traceparse.categorize import category_expr
from traceparse.timeline import Timeline


def synthetic(n: int) -> Timeline:
    rng = np.random.default_rng(0)
    dur = rng.integers(1_000, 50_000, n)
    start = np.cumsum(rng.integers(0, 30_000, n))
    names = np.where(rng.random(n) < 0.1, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "gemm")
    corr = np.arange(1, n + 1)
    gpu = pl.DataFrame({"rank": 0, "kind": "kernel", "start_ns": start, "end_ns": start + dur,
                        "dur_ns": dur, "device_id": 0, "stream_id": rng.integers(0, 4, n),
                        "process_id": 1, "correlation_id": corr, "name": names,
                        "category": "compute"})
    lead = rng.integers(2_000, 40_000, n)
    api = pl.DataFrame({"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel",
                        "start_ns": start - lead, "end_ns": start - lead + 5_000,
                        "dur_ns": 5_000, "process_id": 1, "thread_id": 1,
                        "correlation_id": corr})
    g = schema.conform("gpu", gpu).with_columns(category_expr())
    return Timeline(gpu=g, api=schema.conform("api", api))


def main() -> None:
    sizes = [int(x) for x in sys.argv[1:]] or [100_000, 1_000_000]
    for n in sizes:
        tl = synthetic(n)
        for label in ("breakdown", "idle_gaps"):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                if label == "breakdown":
                    check_attribution(breakdown(tl))
                else:
                    idle_gaps(tl, min_ns=10_000)
                times.append(time.perf_counter() - t)
            print(f"{label:10s} n={n:>9,d}  median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
