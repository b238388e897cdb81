"""Predict each sweep configuration from another and compare with the step time measured
without the profiler (``traces/gpu/sweep/*.truth.json``); write the table into
benchmarks/RESULTS.md (between the ``predict_sweep`` markers).

Usage: PYTHONPATH=. python3 benchmarks/predict_sweep.py [--no-write]

1. The profiler's per-event host cost: for every eager configuration, the cost that makes
   the replayed profiler-free step equal the truth (bisection), kept where the host is the
   bottleneck (the step moves by at least half the per-step event count per ns of cost),
   beside the trace's own estimate (``analyses/profiler_cost.estimate``: visible
   bookkeeping per step x ``VISIBLE_RATIO``, which ``benchmarks/profiler_ratio.py``
   derives over every run with a truth, this sweep included).
2. Pairs: calibrate and trace at one configuration, predict another of the same model
   (``predict_scaled`` with F = batch ratio), and each configuration onto itself.
3. CUDA-graph decode runs, predicted the same way (their kernels have no launching op).

The last column of the pair table, the ratio of the two runs' host time for CPU-only ops
(:data:`CPU_ONLY`), is read from the target trace only to explain errors: the prediction
never sees it.
"""

from __future__ import annotations

import datetime
import json
import platform
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from traceparse import __version__
from traceparse.analyses import profiler_cost
from traceparse.analyses.calibrate import calibrate
from traceparse.analyses.scale import predict_scaled
from traceparse.kineto.reader import read

SWEEP = Path(__file__).resolve().parents[2] / "shared" / "traces" / "gpu" / "sweep"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
START, END = "<!-- predict_sweep:start -->", "<!-- predict_sweep:end -->"

EAGER = ["train_gpt2s_b2", "train_gpt2s_b4", "train_gpt2s_b8", "train_gpt2s_b32",
         "train_gpt2m_b4", "train_gpt2m_b16", "decode_b1_eager", "decode_b64_eager"]
PAIRS = [("train_gpt2s_b2", "train_gpt2s_b4"), ("train_gpt2s_b2", "train_gpt2s_b8"),
         ("train_gpt2s_b4", "train_gpt2s_b32"), ("train_gpt2s_b8", "train_gpt2s_b32"),
         ("train_gpt2s_b32", "train_gpt2s_b8"), ("train_gpt2m_b4", "train_gpt2m_b16"),
         ("train_gpt2m_b16", "train_gpt2m_b4"), ("decode_b1_eager", "decode_b64_eager"),
         ("decode_b64_eager", "decode_b1_eager")]
GRAPH = [("decode_b1_graph", "decode_b1_graph"), ("decode_b64_graph", "decode_b64_graph"),
         ("decode_b1_graph", "decode_b64_graph"), ("decode_b64_graph", "decode_b1_graph")]


def truth(name: str) -> tuple[float, int]:
    """(unprofiled median step in ns, batch) of a configuration."""
    t = json.loads((SWEEP / f"{name}.truth.json").read_text())
    v = t.get("variant")
    ms = t.get("step_ms_median") or t[f"{v}_step_ms_median"]
    return ms * 1e6, int(t["batch"])


def truth_range(name: str) -> tuple[float, float]:
    """(fastest, slowest) unprofiled step in ns of a configuration: how far the truth itself
    moved from step to step in the run it was timed in."""
    t = json.loads((SWEEP / f"{name}.truth.json").read_text())
    v = t.get("variant")
    steps = t.get("step_ms_all") or t[f"{v}_step_ms_all"]
    return min(steps) * 1e6, max(steps) * 1e6


def steps_regex(name: str) -> str | None:
    return r"^decode_step_\d+$" if name.startswith("decode") else None


class Config:
    def __init__(self, name: str) -> None:
        self.name = name
        self.tl = read(str(SWEEP / f"{name}.json.gz"))
        self.cal = calibrate(self.tl)
        self.truth_ns, self.batch = truth(name)

    def predict(self, factor: float, c: float | None = None) -> dict[str, Any]:
        return predict_scaled(self.tl, self.cal, factor, step_regex=steps_regex(self.name),
                              per_event_ns=c)


#: CPU-only ops (no GPU work, no shapes-dependent work) whose host time shows the host's
#: own speed in a run
CPU_ONLY = ("aten::empty", "aten::view", "aten::as_strided", "aten::t")


def host_speed(cfg: Config) -> float:
    """Geometric mean of the median host durations of :data:`CPU_ONLY` ops (ns)."""
    import math

    import polars as pl

    r = cfg.tl.ranges.filter(pl.col("kind").cast(pl.String) == "cpu_op")
    meds = [r.filter(pl.col("name").cast(pl.String) == n)["dur_ns"].median() for n in CPU_ONLY]
    vals = [float(m) for m in meds if m]  # type: ignore[arg-type]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def solve_cost(cfg: Config) -> tuple[float | None, float]:
    """Per-event cost that makes the self-prediction equal the truth (None when the
    prediction cannot reach it or the host is not the bottleneck) and the slope there."""
    lo, hi = 0.0, 10000.0
    p_lo = cfg.predict(1.0, lo)["predicted_step_ns"]
    p_hi = cfg.predict(1.0, hi)["predicted_step_ns"]
    if not p_hi <= cfg.truth_ns <= p_lo:
        return None, 0.0
    for _ in range(14):
        mid = (lo + hi) / 2
        if cfg.predict(1.0, mid)["predicted_step_ns"] > cfg.truth_ns:
            lo = mid
        else:
            hi = mid
    c = (lo + hi) / 2
    r = cfg.predict(1.0, c)
    per_step = r["profiler"]["events"] / max(len(r["steps"]), 1)
    slope = (cfg.predict(1.0, c - 200)["predicted_step_ns"]
             - cfg.predict(1.0, c + 200)["predicted_step_ns"]) / 400
    return (c if slope >= 0.5 * per_step else None), slope / per_step


def pct(p: float, t: float) -> str:
    return f"{(p - t) * 100 / t:+.1f} %"


def main() -> None:
    write = "--no-write" not in sys.argv
    cfgs = {n: Config(n) for n in EAGER}
    out: list[str] = []
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out.append("## Predicting other batch sizes (`PYTHONPATH=. python3 "
               "benchmarks/predict_sweep.py`, issue 27)\n")
    out.append(f"{now}; traceparse {__version__}; Python {platform.python_version()}; "
               f"traces `traces/gpu/sweep` (NVIDIA H200, torch 2.11, record_shapes on); "
               f"truth = `*.truth.json` step median measured without the profiler.\n")
    # 1. profiler cost
    out.append("### Profiler cost per recorded op (analyses/profiler_cost.py)\n")
    out.append("| configuration | profiled step | truth | ops / step | solved cost | "
               "trace estimate (per-step mean) | host-bound share of slope | used |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---|")
    solved: dict[str, float] = {}
    for n, cfg in cfgs.items():
        c, share = solve_cost(cfg)
        r = cfg.predict(1.0)
        ev = r["profiler"]["events"] / max(len(r["steps"]), 1)
        if c is not None:
            solved[n] = c
        out.append(f"| {n} | {r['profiled_step_ns'] / 1e6:.2f} ms | "
                   f"{cfg.truth_ns / 1e6:.2f} ms | {ev:,.0f} | "
                   + (f"{c:,.0f} ns" if c is not None else "-")
                   + f" | {r['profiler']['per_event_ns']:,.0f} ns "
                   f"({r['profiler']['per_event_source']}) | {share:.2f} | "
                   f"{'yes' if c is not None else 'no (GPU-bound)'} |")
        print(n, c, share, flush=True)
    vals = sorted(solved.values())
    out.append("")
    out.append(f"Solved costs {vals[0]:,.0f} to {vals[-1]:,.0f} ns over the host-bound runs; "
               f"the prediction uses the trace's estimate (`VISIBLE_RATIO = "
               f"{profiler_cost.VISIBLE_RATIO}` x the visible bookkeeping of each step; "
               "derivation and leave-one-out over all runs with a truth: "
               "`benchmarks/profiler_ratio.py`, section \"Profiler cost per event from the "
               "trace\").\n")
    # 2. pairs
    out.append("\n### Pairs (per-step trace estimate of the profiler cost)\n")
    out.append("| traced + calibrated | predicted | F | profiled step | predicted | truth | "
               "error | GPU busy | host-bound | from shapes / curve / measured / no shapes / "
               "unpriced | "
               "extrapolated | host op time, target / source run | truth's unprofiled "
               "steps, fastest - slowest | predicted inside them |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|")
    rows = [(a, a) for a in EAGER] + PAIRS
    errs: dict[str, list[float]] = {"self": [], "unseen": []}
    inside: dict[str, list[bool]] = {"self": [], "unseen": []}
    for a, b in rows:
        src = cfgs[a]
        tgt_ns, tgt_batch = truth(b)
        f = tgt_batch / src.batch
        r = src.predict(f)
        p = r["predicted_step_ns"]
        s = r["sources"]
        errs["self" if a == b else "unseen"].append((p - tgt_ns) * 100 / tgt_ns)
        lo, hi = truth_range(b)
        inside["self" if a == b else "unseen"].append(lo <= p <= hi)
        out.append(f"| {a} | {b} | {f:g} | {r['profiled_step_ns'] / 1e6:.2f} ms | "
                   f"{p / 1e6:.2f} ms | {tgt_ns / 1e6:.2f} ms | {pct(p, tgt_ns)} | "
                   f"{r['parts']['gpu_busy_ns'] / 1e6:.2f} ms | "
                   f"{r['parts']['host_bound_ns'] / 1e6:.2f} ms | "
                   f"{s['shapes_frac']:.2f} / {s['curve_frac']:.2f} / {s['measured_frac']:.2f}"
                   f" / {s['measured_no_shapes_frac']:.2f}"
                   f" / {s['measured_unpriced_frac']:.2f} | "
                   f"{r['extrapolated_ns'] / 1e6:.1f} ms | "
                   f"{host_speed(cfgs[b]) / host_speed(src):.2f} | "
                   f"{lo / 1e6:.2f} - {hi / 1e6:.2f} ms | {'yes' if lo <= p <= hi else 'no'} |")
        print(a, b, f, p / 1e6, tgt_ns / 1e6, flush=True)
    for k, v in errs.items():
        if v:
            out.append(f"\n{k}: worst {max(v, key=abs):+.1f} %, "
                       f"median |error| {statistics.median(abs(x) for x in v):.1f} %, "
                       f"within goal ({10 if k == 'self' else 15} %): "
                       f"{sum(abs(x) <= (10 if k == 'self' else 15) for x in v)}/{len(v)}; "
                       f"inside the truth's own fastest-to-slowest unprofiled steps: "
                       f"{sum(inside[k])}/{len(v)}")
    # 3. graphs
    out.append("\n### CUDA-graph decode runs (same model; not part of the goals)\n")
    out.append("Under the profiler each `cudaGraphLaunch` holds the recording of the graph's "
               "nodes and the graph's first kernel starts after it returns: its excess over "
               "an ordinary launch call is removed as measured profiler time (docs/"
               "calibration.md \"Graph launches under the profiler\"). At F != 1 every "
               "kernel stays at its traced size (a graph replay records no op shapes) and "
               "`predict` warns.\n")
    out.append("| traced + calibrated | predicted | F | profiled step | predicted | truth | "
               "error | no-shapes share | graph-launch excess removed per step |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    gc: dict[str, Config] = {}
    for a, b in GRAPH:
        src = gc.setdefault(a, Config(a))
        tgt_ns, tgt_batch = truth(b)
        f = tgt_batch / src.batch
        r = src.predict(f)
        p = r["predicted_step_ns"]
        out.append(f"| {a} | {b} | {f:g} | {r['profiled_step_ns'] / 1e6:.3f} ms | "
                   f"{p / 1e6:.3f} ms | {tgt_ns / 1e6:.3f} ms | {pct(p, tgt_ns)} | "
                   f"{r['sources']['measured_no_shapes_frac']:.2f} | "
                   f"{r['profiler']['graph_launch_ns'] / max(len(r['steps']), 1) / 1e3:.1f}"
                   " µs |")
    # 4. cost of a prediction (largest sweep trace)
    import resource
    import time

    big = cfgs["train_gpt2m_b16"]
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        big.predict(0.25)
        times.append(time.perf_counter() - t0)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.append(f"\nCost: `predict_scaled` on train_gpt2m_b16 ({big.tl.gpu.height:,} GPU "
               f"activities, {big.tl.ranges.height:,} ranges; trace already loaded and "
               f"calibrated): median of 3 {statistics.median(times):.2f} s; peak RSS of "
               f"this whole benchmark process {rss:,.0f} MiB ({platform.machine()}, "
               f"{platform.system()}, shared 2-core host).")
    text = "\n".join(out) + "\n"
    print(text)
    if write:
        old = RESULTS.read_text()
        block = f"{START}\n{text}{END}"
        if START in old:
            new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: block, old,
                         flags=re.S)
        else:
            new = old.rstrip("\n") + "\n\n" + block + "\n"
        RESULTS.write_text(new)


if __name__ == "__main__":
    main()
