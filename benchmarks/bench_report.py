"""Benchmark: HTML report and Chrome-trace export on a generated 1M-kernel timeline and on the
bundled sample.

Run: ``PYTHONPATH=. python3 benchmarks/bench_report.py [N_KERNELS]`` (default 1,000,000).
Prints the median of 3 runs of each step and the output sizes (the report must stay under
5 MB). Results go in benchmarks/RESULTS.md by hand.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.reports.chrome import attribution_intervals, to_chrome
from traceparse.reports.html import render_html
from traceparse.reports.payload import build_payload
from traceparse.samplegen.scenarios import scenario_timeline
from traceparse.timeline import Timeline


def big_timeline(n: int) -> Timeline:
    """``n`` kernels (5,000 names) round-robin on 8 streams of one device, 700 ns each every
    1 us, each launched by a 400 ns API call (so launch links exist)."""
    i = pl.int_range(0, n, eager=True)
    start = i * 1_000
    gpu = pl.DataFrame({
        "rank": pl.Series([0] * n, dtype=pl.Int32), "kind": ["kernel"] * n,
        "category": ["compute"] * n, "start_ns": start, "end_ns": start + 700,
        "dur_ns": pl.Series([700] * n), "device_id": pl.Series([0] * n, dtype=pl.Int32),
        "stream_id": i % 8, "process_id": pl.Series([1] * n), "correlation_id": i,
        "name": pl.Series([f"kernel_{k % 5000}" for k in range(n)])})
    api = pl.DataFrame({
        "rank": pl.Series([0] * n, dtype=pl.Int32), "kind": ["runtime"] * n,
        "name": ["cudaLaunchKernel"] * n, "start_ns": start - 600, "end_ns": start - 200,
        "dur_ns": pl.Series([400] * n), "process_id": pl.Series([1] * n),
        "thread_id": pl.Series([1] * n), "correlation_id": i})
    return Timeline(gpu=schema.conform("gpu", gpu), api=schema.conform("api", api)).validate()


def median_s(fn: Callable[[], Any], runs: int = 3) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    for label, tl in (("sample mini_train", scenario_timeline("mini_train")),
                      (f"generated {n:,} kernels", big_timeline(n))):
        t_pay, payload = median_s(lambda tl=tl: build_payload(tl))
        t_html, html = median_s(lambda payload=payload: render_html(payload))
        t_chr, data = median_s(lambda tl=tl: to_chrome(tl, attribution=attribution_intervals(tl)))
        print(f"{label}: payload {t_pay:.2f} s, render {t_html:.2f} s, "
              f"report {len(html.encode()):,} B; chrome export {t_chr:.2f} s, "
              f"{len(data):,} B")


if __name__ == "__main__":
    main()
