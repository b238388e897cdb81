#!/usr/bin/env python3
"""Decode at batch 1 and 64 in ONE process, interleaved: is a step-time difference between
batch sizes the batch, or the host running at another speed in another run?

usage: decode_host_speed.py OUTDIR [--rounds R]

The decoder is the sweep's (``traces/gpu/sweep/capture_sweep.py``: 12 layers, d 1024, bf16,
static KV cache 1024, one token per step ending in ``.item()``). Both batch sizes are built
once; then R rounds each time, per batch size, 30 eager steps and 30 CUDA-graph replays
without the profiler (median, device drained after each step), and a host probe: the median
time of 2,000 CPU-only ``aten::view`` calls, which no batch size changes, so it tracks the
host's own speed round by round. Finally each batch size's eager step is profiled (20 steps,
``record_shapes``) as in the sweep.

Writes ``OUTDIR/decode_b<B>_eager.json.gz`` + ``.truth.json`` (sweep format, medians over all
rounds) and ``OUTDIR/decode_host_speed.json`` (every round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_profile import write_trace  # scrubs machine identity, gzips
from sweep_models import D, L, T, decoder, host_probe_us, timed


def median_ms(fn: Callable[[], None], n: int = 30) -> tuple[float, list[float]]:
    ts = timed(fn, n)
    return statistics.median(ts), ts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = {b: decoder(b) for b in (1, 64)}
    rounds: list[dict[str, Any]] = []
    for r in range(a.rounds):
        for b, (eager, replay) in steps.items():
            e_med, e_all = median_ms(eager)
            g_med, g_all = median_ms(replay)
            rounds.append({"round": r, "batch": b, "host_probe_us": host_probe_us(),
                           "eager_step_ms_median": e_med, "graph_step_ms_median": g_med,
                           "eager_step_ms_all": [round(x, 4) for x in e_all],
                           "graph_step_ms_all": [round(x, 4) for x in g_all]})
            print(json.dumps({k: v for k, v in rounds[-1].items() if "all" not in k}), flush=True)
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    for b, (eager, _) in steps.items():
        mine = [x for x in rounds if x["batch"] == b]
        truth = {"case": "decode", "layers": L, "d_model": D, "batch": b, "kv_len": T,
                 "eager_step_ms_median": statistics.median(
                     v for x in mine for v in x["eager_step_ms_all"]),
                 "graph_step_ms_median": statistics.median(
                     v for x in mine for v in x["graph_step_ms_all"]),
                 "note": f"step times measured without the profiler, {a.rounds} rounds "
                         "interleaved with the other batch size in one process",
                 "variant": "eager", "gpu": torch.cuda.get_device_name(0),
                 "torch": torch.__version__, "trace": f"decode_b{b}_eager.json.gz"}
        with profile(activities=acts, record_shapes=True) as prof:
            for i in range(20):
                with record_function(f"decode_step_{i}"):
                    eager()
        write_trace(prof, out / f"decode_b{b}_eager.json.gz", add_flops=False)
        (out / f"decode_b{b}_eager.truth.json").write_text(json.dumps(truth, indent=1))
    (out / "decode_host_speed.json").write_text(json.dumps(
        {"tool": "sample_traces/capture/decode_host_speed.py",
         "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
         "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
