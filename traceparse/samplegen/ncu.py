"""The Nsight Compute CSV of a sample scenario: ``ncu --metrics ... --csv --page raw``.

One row per kernel launch of the scenario, in issue order (as ncu serialises and profiles
them), in the ncu 2024.1 raw-page layout (FORMATS B.2): identity columns, metric columns
sorted by name, a units row (ncu's default ``--print-units auto``: ``usecond``, ``Mbyte``,
``cycle/nsecond``), every value double-quoted, rows ending with a trailing comma. Metric
values are fixed per kernel role (:data:`COUNTERS`) so every roofline point can be worked out
by hand; the sample pretends ncu ran on the samples' H100 SXM (``NVIDIA H100 80GB HBM3``)
with its default ``--clock-control base``: SM clock locked at :data:`SM_CLOCK_HZ`.

Hand-computed points (``traceparse roofline mini_train.sqlite --ncu mini_train.ncu.csv``):

====================  ========  ===============  ==============  =========================
kernel (launches)     ncu us    FLOPs / launch   DRAM bytes      FLOP/s, DRAM B/s per launch
====================  ========  ===============  ==============  =========================
GEMM fwd (4/step)     112.5     2*4096*4096*2048 67,108,864      610.8 T, 596.5 G
GEMM dgrad (4/step)   125.0     (bf16 tensor)    (A + B + C)     549.8 T, 536.9 G
GEMM wgrad (4/step)   118.75                                     578.7 T, 565.1 G
GELU fwd (4/step)     12        148,500,000 fp32 27,000,000      12.375 T, 2.25 T
GELU bwd (4/step)     10                                         14.85 T, 2.7 T
FusedAdam (1/step)    45        121,500,000 fp32 99,000,000      2.7 T, 2.2 T
NCCL all-reduce (2)   260       13,000,000 fp32  52,000,000      not placed (communication)
====================  ========  ===============  ==============  =========================

GEMM durations are the timeline's x 1.25 (compute-bound kernels run slower at the locked
1.59 GHz base clock than at the ~1.98 GHz the timeline ran at); memory-bound kernels keep
the timeline's durations.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from traceparse.samplegen.scenarios import ELEMENTWISE, GEMM, NCCL, OPTIMIZER, Activity, scenario

#: ncu's default clock control locks the SM clock at base; the sample uses 1.59 GHz (the
#: H800 pages in the corpus measured 1.49-1.56 GHz that way, against a 1.98 GHz maximum).
SM_CLOCK_HZ = 1.59e9
#: GEMM shape (bf16 in, fp32 accumulate): every forward/dgrad/wgrad GEMM of the sample does
#: 2*M*N*K FLOPs and moves A, B and C once through DRAM.
M, N, K = 4096, 4096, 2048
GEMM_SLOWDOWN = 1.25
DEVICE = "NVIDIA H100 80GB HBM3"
#: ncu's FFMA peak (``.sum.peak_sustained``, per cycle): 128 lanes on each of 132 SMs, as
#: real H100/H800 pages print it. The tensor ops peak is not written (a ``--metrics`` run
#: asks only for the counts): the bf16 tensor roof is the datasheet's, rescaled to the clock.
FFMA_PEAK_PER_CYCLE = 132 * 128

TENSOR = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
FP = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"

#: kernel name -> metric -> value (base units); FLOPs = fadd + fmul + 2 * ffma (+ tensor ops)
COUNTERS: dict[str, dict[str, float]] = {
    GEMM: {TENSOR: 2 * M * N * K, FP.format("ffma"): M * N, FP.format("fadd"): 0,
           FP.format("fmul"): 0, "dram__bytes.sum": 2 * (M * K + K * N + M * N)},
    ELEMENTWISE: {TENSOR: 0, FP.format("ffma"): 54_000_000, FP.format("fadd"): 13_500_000,
                  FP.format("fmul"): 27_000_000, "dram__bytes.sum": 27_000_000},
    OPTIMIZER: {TENSOR: 0, FP.format("ffma"): 40_500_000, FP.format("fadd"): 20_250_000,
                FP.format("fmul"): 20_250_000, "dram__bytes.sum": 99_000_000},
    NCCL: {TENSOR: 0, FP.format("ffma"): 0, FP.format("fadd"): 13_000_000,
           FP.format("fmul"): 0, "dram__bytes.sum": 52_000_000},
}

#: metric -> (printed unit, divisor from the base unit), ncu ``--print-units auto`` style.
UNITS: dict[str, tuple[str, float]] = {
    "device__attribute_display_name": ("", 1.0),
    "dram__bytes.sum": ("Mbyte", 1e6),
    "gpu__time_duration.sum": ("usecond", 1e3),
    "sm__cycles_elapsed.avg": ("cycle", 1.0),
    "sm__cycles_elapsed.avg.per_second": ("cycle/nsecond", 1e9),
    TENSOR: ("", 1.0),
    FP.format("dadd"): ("inst", 1.0),
    FP.format("dfma"): ("inst", 1.0),
    FP.format("dmul"): ("inst", 1.0),
    FP.format("fadd"): ("inst", 1.0),
    FP.format("ffma"): ("inst", 1.0),
    FP.format("ffma") + ".peak_sustained": ("inst/cycle", 1.0),
    FP.format("fmul"): ("inst", 1.0),
}
IDENTITY = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
            "Stream", "Block Size", "Grid Size", "Device", "CC"]


def ncu_duration_ns(act: Activity) -> float:
    """The duration ncu measures for one launch (GEMMs slower at the base clock)."""
    return act.dur_ns * GEMM_SLOWDOWN if act.name == GEMM else float(act.dur_ns)


def launch_metrics(act: Activity) -> dict[str, float | str]:
    """Every metric of one launch, in base units (ns, bytes, cycle/second, inst)."""
    dur = ncu_duration_ns(act)
    vals: dict[str, float | str] = {
        "device__attribute_display_name": DEVICE, "gpu__time_duration.sum": dur,
        "sm__cycles_elapsed.avg": dur * 1e-9 * SM_CLOCK_HZ,
        "sm__cycles_elapsed.avg.per_second": SM_CLOCK_HZ,
        FP.format("dadd"): 0, FP.format("dfma"): 0, FP.format("dmul"): 0,
        FP.format("ffma") + ".peak_sustained": FFMA_PEAK_PER_CYCLE}
    vals.update(COUNTERS[act.name])
    return vals


def _cell(metric: str, value: float | str) -> str:
    if isinstance(value, str):
        return value
    return f"{value / UNITS[metric][1]:.6f}"


def write(name: str, path: str | os.PathLike[str]) -> Path:
    """Write the ncu raw-page CSV of scenario ``name``'s kernel launches; return the path."""
    launches = [c.activity for c in scenario(name).calls
                if c.activity is not None and c.activity.kind == "kernel"]
    metrics = sorted(UNITS)
    out = Path(path)
    with open(out, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator=",\n")
        w.writerow(IDENTITY + metrics)
        w.writerow([""] * len(IDENTITY) + [UNITS[m][0] for m in metrics])
        for i, act in enumerate(launches):
            vals = launch_metrics(act)
            ident = [str(i), "4242", "python3", "localhost", act.name, "1", str(act.stream),
                     "({}, {}, {})".format(*act.block), "({}, {}, {})".format(*act.grid),
                     "0", "9.0"]
            w.writerow(ident + [_cell(m, vals[m]) for m in metrics])
    return out
