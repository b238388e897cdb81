"""Benchmark the launch/range/comm analyses on a saved or loadable trace.

Usage: python3 benchmarks/bench_perf.py TRACE [REPEATS]
Prints the median wall time of each analysis over REPEATS runs (default 3).
"""

from __future__ import annotations

import statistics
import sys
import time

from traceparse.analyses import comm, launches, ranges
from traceparse.links import enclosing_ranges
from traceparse.loader import load


def main() -> None:
    tl = load(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    print(f"gpu {tl.gpu.height} api {tl.api.height} ranges {tl.ranges.height}")
    for name, fn in (("enclosing_ranges", enclosing_ranges), ("kern_exec_sum",
                     launches.kern_exec_sum), ("nvtx_sum", ranges.nvtx_sum),
                     ("gpu_projection", ranges.gpu_projection),
                     ("collective_skew", comm.collective_skew)):
        times = []
        for _ in range(n):
            t = time.perf_counter()
            fn(tl)
            times.append(time.perf_counter() - t)
        print(f"{name}: median {statistics.median(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
