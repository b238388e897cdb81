"""The fusion fix's predicted saving against fused twins measured with and without the profiler.

Usage (repo root): ``PYTHONPATH=. python3 benchmarks/fusion_twins.py [--no-write]``. Reads
``sample_traces/h200_recheck/fusion`` (``sample_traces/capture/fusion_twins.py`` on an
H200: the ``unfused_elementwise`` chain eager, as one jiterator kernel, as one Triton kernel
and under ``torch.compile``, at 2**21 and 2**25 floats). For each fused variant: the saving
measured under the profiler (median ``ProfilerStep`` of twin vs eager, as
``fixes_vs_measured.py`` measures) and without it (median of 30 unprofiled steps), beside
the fusion fix's ``saving_ns / window_ns`` on the eager trace (what ``traceparse fixes``
prints). Writes its table into benchmarks/RESULTS.md between the ``fusion_twins`` markers.
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import statistics
import sys
from pathlib import Path

import traceparse
from traceparse.analyses.steps import step_windows
from traceparse.reports.payload import build_payload
from traceparse.reports.recommend import recommend

DIR = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_recheck" / "fusion"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
START, END = "<!-- fusion_twins:start -->", "<!-- fusion_twins:end -->"


def _median_step_ns(name: str) -> float:
    w = step_windows(traceparse.load(DIR / f"{name}.json.gz"))
    return float(statistics.median((w["end_ns"] - w["start_ns"]).to_list()))


def main() -> None:
    runs = {r["name"]: r for r in json.loads((DIR / "fusion_twins.json").read_text())["runs"]}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = ["## Fusion twins: predicted vs measured with and without the profiler "
           "(`PYTHONPATH=. python3 benchmarks/fusion_twins.py`, issue 24)\n",
           f"{now}; traceparse {traceparse.__version__}; Python {platform.python_version()}; "
           "traces `sample_traces/h200_recheck/fusion` (NVIDIA H200, torch 2.11). "
           "Step times in µs; savings are shares of the eager step.\n",
           "| floats | fused as | eager step prof / unprof | twin step prof / unprof | "
           "measured prof | measured unprof | predicted | error vs prof | error vs unprof | "
           "fix rank |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for numel in (1 << 21, 1 << 25):
        eager = f"fusion_eager_n{numel}"
        items = recommend(build_payload(traceparse.load(DIR / f"{eager}.json.gz")))["items"]
        ids = [r["id"] for r in items]
        hit = next(r for r in items if r["id"] == "fusion")
        pred = hit["saving_ns"] / hit["window_ns"]
        ep, eu = _median_step_ns(eager) / 1e3, runs[eager]["unprofiled"]["step_ms_median"] * 1e3
        for v in ("hand", "triton", "compile"):
            name = f"fusion_{v}_n{numel}"
            tp, tu = _median_step_ns(name) / 1e3, runs[name]["unprofiled"]["step_ms_median"] * 1e3
            mp, mu = 1 - tp / ep, 1 - tu / eu
            out.append(f"| 2^{numel.bit_length() - 1} | {v} | {ep:.0f} / {eu:.0f} | "
                       f"{tp:.0f} / {tu:.0f} | {mp:.1%} | {mu:.1%} | {pred:.1%} | "
                       f"{(pred - mp) / mp:+.1%} | {(pred - mu) / mu:+.1%} | "
                       f"{ids.index('fusion') + 1} ({ids[0]} first) |")
    out += ["", "Reading: without the profiler every fused form saves what the eager trace "
            "predicts (2^21: within 4.1%; 2^25: the prediction is an upper bound, +9.7% for "
            "Triton/Inductor, +30% for jiterator's slower kernel: six fp32 `sin` per element "
            "make the fused kernel compute-bound, 204-436 µs against ~67 µs of memory time, "
            "which memory-bound eager kernels cannot show). Under the profiler the "
            "`torch.compile` twin's step grows with the profiler's recording of its Python "
            "wrapper (`with_stack`): 220 µs against 55 µs unprofiled, where the hand-fused "
            "kernel's is 63 / 49 µs; that is the +57% miss on the shared scenario, and a cost "
            "the user does not pay. At 2^25 the profiled steps are the host's (the GPU runs "
            "behind), so only the unprofiled column measures the GPU-bound saving. At 2^21 "
            "CUDA graphs ranks first (80.8% predicted): it removes the same issuing and the "
            "fused kernel's one launch."]
    text = "\n".join(out) + "\n"
    print(text)
    if "--no-write" not in sys.argv:
        old = RESULTS.read_text()
        block = f"{START}\n{text}{END}"
        new = (re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: block, old,
                      flags=re.S) if START in old else old.rstrip("\n") + "\n\n" + block + "\n")
        RESULTS.write_text(new)


if __name__ == "__main__":
    main()
