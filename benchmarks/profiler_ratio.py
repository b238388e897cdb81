"""Where the profiler's per-event cost comes from: the trace's visible bookkeeping against
the cost solved from unprofiled truth, on every host-bound run with a truth file.

Usage: PYTHONPATH=. python3 benchmarks/profiler_ratio.py [--no-write]

For each eager configuration with a ``*.truth.json`` (the shared sweep, the H200 re-checks
``bracketed``, ``decode`` and ``graph``, the H100 sweep):

1. the per-event cost (ns) that makes the replayed profiler-free step equal the truth
   (``predict_sweep.solve_cost``; None when the host is not the bottleneck);
2. the visible bookkeeping per event the trace shows (``profiler_cost.estimate``: median
   enter + exit gap of composite ops, per step; its mean over the steps' events);
3. the ratio ``VISIBLE_RATIO`` that makes the prediction with the trace's own per-step
   estimate equal the truth (bisection);
4. leave-one-out: each run predicted onto itself with the median ratio of all the other
   runs, beside the old model (one constant: the median of the other runs' solved ns).

The shipped :data:`~traceparse.analyses.profiler_cost.VISIBLE_RATIO` is the median of (3)
over all runs. The table goes into benchmarks/RESULTS.md between the ``profiler_ratio``
markers.
"""

from __future__ import annotations

import datetime
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import predict_sweep as ps

from traceparse import __version__
from traceparse.analyses import profiler_cost as pcm

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SETS: list[tuple[str, Path, list[str] | None]] = [
    ("shared sweep (H200)", ps.SWEEP, ps.EAGER),
    ("re-check bracketed (H200)", SAMPLES / "h200_recheck" / "bracketed", None),
    ("re-check decode (H200)", SAMPLES / "h200_recheck" / "decode", None),
    ("re-check graph, eager (H200)", SAMPLES / "h200_recheck" / "graph",
     ["train_gpt2s_b2_eager", "train_gpt2s_b8_eager"]),
    ("held-out sweep (H100)", SAMPLES / "h100_captures" / "sweep", None),
]
START, END = "<!-- profiler_ratio:start -->", "<!-- profiler_ratio:end -->"


def _names(d: Path, names: list[str] | None) -> list[str]:
    if names is not None:
        return names
    return sorted(p.name.removesuffix(".truth.json") for p in d.glob("*.truth.json")
                  if "_graph" not in p.name)


def _predict(cfg: ps.Config, ratio: float) -> dict[str, Any]:
    old = pcm.VISIBLE_RATIO
    pcm.VISIBLE_RATIO = ratio
    try:
        return cfg.predict(1.0)
    finally:
        pcm.VISIBLE_RATIO = old


def solve_ratio(cfg: ps.Config) -> float | None:
    """Ratio that makes the self-prediction with the per-step trace estimate equal the
    truth (None when no ratio in [0.01, 6] reaches it)."""
    lo, hi = 0.01, 6.0
    if not (_predict(cfg, hi)["predicted_step_ns"] <= cfg.truth_ns
            <= _predict(cfg, lo)["predicted_step_ns"]):
        return None
    for _ in range(14):
        mid = (lo + hi) / 2
        if _predict(cfg, mid)["predicted_step_ns"] > cfg.truth_ns:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def main() -> None:
    rows: list[dict[str, Any]] = []
    cfgs: dict[str, ps.Config] = {}
    shared = ps.SWEEP
    for label, d, names in SETS:
        ps.SWEEP = d
        for n in _names(d, names):
            key = f"{label}: {n}"
            cfg = cfgs[key] = ps.Config(n)
            c, _share = ps.solve_cost(cfg)
            r = _predict(cfg, 1.0)
            rows.append({"key": key, "set": label, "name": n, "solved_ns": c,
                         "visible_ns": r["profiler"]["per_event_ns"],
                         "profiled_ms": r["profiled_step_ns"] / 1e6,
                         "truth_ms": cfg.truth_ns / 1e6,
                         "events": r["profiler"]["events"] / max(len(r["steps"]), 1),
                         "ratio": solve_ratio(cfg) if c is not None else None})
            print(rows[-1], flush=True)
    ps.SWEEP = shared
    hb = [r for r in rows if r["ratio"] is not None]
    ratios = np.array([r["ratio"] for r in hb])
    solved = np.array([r["solved_ns"] for r in hb])
    for i, r in enumerate(hb):
        cfg = cfgs[r["key"]]
        k = float(np.median(np.delete(ratios, i)))
        c = float(np.median(np.delete(solved, i)))
        r["loo_ratio"] = k
        r["err_trace"] = (_predict(cfg, k)["predicted_step_ns"] - cfg.truth_ns) * 100 / cfg.truth_ns
        r["err_const"] = (cfg.predict(1.0, c)["predicted_step_ns"] - cfg.truth_ns) * 100 \
            / cfg.truth_ns
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = ["## Profiler cost per event from the trace (`PYTHONPATH=. python3 "
           "benchmarks/profiler_ratio.py`, issue 27)\n",
           f"{now}; traceparse {__version__}; every eager run with an unprofiled truth "
           "(torch 2.11, record_shapes on, no stack). Solved cost: the per-event cost that "
           "makes the self-prediction equal the truth (`predict_sweep.solve_cost`); visible: "
           "the trace's own bookkeeping per event (median enter + exit gap of composite ops, "
           "per step; mean over the steps' events); solved ratio: the `VISIBLE_RATIO` that "
           "makes the per-step trace estimate hit the truth; leave-one-out: the run predicted "
           "onto itself with the median of the other runs' ratios (trace) or of their solved "
           "costs (one constant, the previous model).\n",
           "| run | profiled step | truth | ops / step | solved cost | visible | solved "
           "ratio | LOO ratio | LOO error, trace | LOO error, one constant |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        hbr = r["ratio"] is not None
        out.append(
            f"| {r['key']} | {r['profiled_ms']:.2f} ms | {r['truth_ms']:.2f} ms | "
            f"{r['events']:,.0f} | "
            + (f"{r['solved_ns']:,.0f} ns" if r["solved_ns"] is not None else "- (GPU-bound)")
            + f" | {r['visible_ns']:,.0f} ns | "
            + (f"{r['ratio']:.3f} | {r['loo_ratio']:.3f} | {r['err_trace']:+.1f} % | "
               f"{r['err_const']:+.1f} % |" if hbr else "- | - | - | - |"))
    vis = np.array([r["visible_ns"] for r in hb])
    et = np.array([r["err_trace"] for r in hb])
    ec = np.array([r["err_const"] for r in hb])
    corr = float(np.corrcoef(vis, solved)[0, 1])
    out += ["",
            f"{len(hb)} host-bound runs. Solved cost {solved.min():,.0f}-{solved.max():,.0f} ns "
            f"(median {np.median(solved):,.0f}); visible bookkeeping "
            f"{vis.min():,.0f}-{vis.max():,.0f} ns; correlation of the two r = {corr:.2f}. "
            f"Solved ratio: median **{np.median(ratios):.3f}** (range {ratios.min():.2f}-"
            f"{ratios.max():.2f}, half-range / median "
            f"{(ratios.max() - ratios.min()) / 2 / np.median(ratios):.2f}); shipped "
            f"`VISIBLE_RATIO = {pcm.VISIBLE_RATIO}`, reported range `VISIBLE_RATIO_RANGE = "
            f"{pcm.VISIBLE_RATIO_RANGE}`.",
            "",
            "Leave-one-out onto itself, |error| median / within 10 % / worst: trace estimate "
            f"{statistics.median(np.abs(et)):.1f} % / {int((np.abs(et) <= 10).sum())} of "
            f"{len(hb)} / {et[np.argmax(np.abs(et))]:+.1f} %; one constant "
            f"{statistics.median(np.abs(ec)):.1f} % / {int((np.abs(ec) <= 10).sum())} of "
            f"{len(hb)} / {ec[np.argmax(np.abs(ec))]:+.1f} %."]
    text = "\n".join(out) + "\n"
    print(text)
    if "--no-write" not in sys.argv:
        import predict_holdout

        predict_holdout._write(text, START, END)


if __name__ == "__main__":
    main()
