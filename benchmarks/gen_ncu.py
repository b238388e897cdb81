"""Generate an Nsight Compute raw-page CSV (``ncu --csv --page raw``) of any size.

Layout follows ncu 2024.1 (FORMATS.md B.2): identity columns ``ID, Process ID, Process
Name, Host Name, Kernel Name, Context, Stream, Block Size, Grid Size, Device, CC``, then
metric columns sorted by name, a units row, one row per profiled launch, every value
double-quoted, rows ending with a trailing comma. Metrics: the ones traceparse reads
(duration, clocks, SpeedOfLight %, DRAM/L2/L1 bytes, FLOP counters, device attributes),
consistent per launch (cycles = duration x clock, rates under H100 peaks: every launch is a
placeable roofline point), plus
``--filler`` extra counters so the width resembles a ``--set full`` page (about 300 columns).

Usage::

    python3 benchmarks/gen_ncu.py OUT.csv --launches 10000 [--filler 250]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

IDENTITY = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
            "Stream", "Block Size", "Grid Size", "Device", "CC"]
#: metric -> (unit, low, high) for uniformly drawn values
METRICS = {
    "gpu__time_duration.sum": ("nsecond", 2_000, 900_000),
    "sm__cycles_elapsed.avg": ("cycle", 4_000, 1_800_000),
    "sm__cycles_elapsed.avg.per_second": ("cycle/second", 1.7e9, 1.98e9),
    "smsp__cycles_elapsed.avg.per_second": ("cycle/second", 1.7e9, 1.98e9),
    "gpc__cycles_elapsed.avg.per_second": ("cycle/second", 1.7e9, 1.98e9),
    "dram__cycles_elapsed.avg.per_second": ("cycle/second", 2.6e9, 2.62e9),
    "lts__cycles_elapsed.avg.per_second": ("cycle/second", 1.7e9, 1.98e9),
    "l1tex__cycles_elapsed.avg.per_second": ("cycle/second", 1.7e9, 1.98e9),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1, 95),
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1, 95),
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": ("%", 1, 95),
    "dram__bytes.sum": ("byte", 1e4, 1e9),
    "dram__bytes_read.sum": ("byte", 1e4, 6e8),
    "dram__bytes_write.sum": ("byte", 1e4, 4e8),
    "dram__bytes.sum.per_second": ("byte/second", 1e10, 3e12),
    "dram__bytes.sum.peak_sustained": ("byte/cycle", 1280, 1280),
    "lts__t_bytes.sum": ("byte", 1e4, 2e9),
    "l1tex__t_bytes.sum": ("byte", 1e4, 4e9),
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": ("inst", 0, 1e10),
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": ("inst", 0, 1e9),
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum": ("inst", 0, 1e9),
    "launch__registers_per_thread": ("register/thread", 16, 255),
    "launch__grid_size": ("", 1, 100_000),
    "launch__block_size": ("", 32, 1024),
    "device__attribute_multiprocessor_count": ("", 132, 132),
    "device__attribute_compute_capability_major": ("", 9, 9),
    "device__attribute_compute_capability_minor": ("", 0, 0),
}


def _consistent(vals: dict[str, np.ndarray], rng: np.random.Generator
                ) -> dict[str, np.ndarray]:
    """Counters that depend on each other, derived from the drawn duration and SM clock so
    every launch is a point an H100 could produce: cycles = duration x clock, DRAM bytes at
    1-90 % of 3.35 TB/s (and their per-second rate), FFMA at 0-90 % of 132 SMs x 128 lanes
    per cycle, FADD/FMUL a tenth of that, L2/L1 bytes at least the DRAM bytes."""
    n = len(vals["gpu__time_duration.sum"])
    dur_s = vals["gpu__time_duration.sum"] * 1e-9
    clk = vals["sm__cycles_elapsed.avg.per_second"]
    cycles = dur_s * clk
    dram = rng.uniform(0.01, 0.9, n) * 3.35e12 * dur_s
    lanes = 132 * 128 * cycles
    out = {f"{u}__cycles_elapsed.avg.per_second": clk for u in ("smsp", "gpc", "lts", "l1tex")}
    out |= {"sm__cycles_elapsed.avg": cycles, "dram__bytes.sum": dram,
            "dram__bytes_read.sum": 0.6 * dram, "dram__bytes_write.sum": 0.4 * dram,
            "dram__bytes.sum.per_second": dram / dur_s,
            "lts__t_bytes.sum": dram * rng.uniform(1, 3, n),
            "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum":
                rng.uniform(0, 0.9, n) * lanes}
    out["l1tex__t_bytes.sum"] = out["lts__t_bytes.sum"] * rng.uniform(1, 2, n)
    for op in ("fadd", "fmul"):
        out[f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum"] = \
            rng.uniform(0, 0.09, n) * lanes
    return out


def generate(out: Path, launches: int, filler: int = 250, seed: int = 0) -> int:
    """Write the CSV; return the number of metric columns."""
    rng = np.random.default_rng(seed)
    n = launches
    extra = {f"zz_filler__counter_{i:03d}.sum": ("", 0, 1e6) for i in range(filler)}
    metrics = dict(sorted({**METRICS, **extra,
                           "device__attribute_display_name": ("", 0, 0)}.items()))
    header = IDENTITY + list(metrics)
    units = [""] * len(IDENTITY) + [u for u, _, _ in metrics.values()]
    cols: list[list[str]] = [
        [str(i) for i in range(n)], ["4242"] * n, ["python3"] * n, ["127.0.0.1"] * n,
        [f"kernel_{k}" for k in rng.integers(0, 200, n)], ["1"] * n,
        [str(s) for s in rng.integers(7, 11, n)], ["(256, 1, 1)"] * n,
        [f"({g}, 1, 1)" for g in rng.integers(1, 4096, n)], ["0"] * n, ["9.0"] * n]
    vals = {name: rng.uniform(lo, hi, n) for name, (_, lo, hi) in metrics.items()}
    vals.update(_consistent(vals, rng))
    for name in metrics:
        if name == "device__attribute_display_name":
            cols.append(["NVIDIA H100 80GB HBM3"] * n)
        else:
            cols.append([f"{v:.6g}" for v in vals[name]])

    def line(cells: list[str]) -> str:
        return ",".join(f'"{c}"' for c in cells) + ",\n"

    with open(out, "w", encoding="utf-8") as fh:
        fh.write(line(header))
        fh.write(line(units))
        for r in range(n):
            fh.write(line([c[r] for c in cols]))
    return len(metrics)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--launches", type=int, default=10_000)
    ap.add_argument("--filler", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    m = generate(a.out, a.launches, a.filler, a.seed)
    print(f"wrote {a.out}: {a.launches:,} launches x {m} metrics in "
          f"{time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main()
