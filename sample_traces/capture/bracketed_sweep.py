#!/usr/bin/env python3
"""The sweep's configurations with each trace bracketed by unprofiled timings.

usage: bracketed_sweep.py OUTDIR [--only NAME ...]

The shared sweep (``traces/gpu/sweep/capture_sweep.py``) times each configuration without the
profiler and then profiles it; when the host's speed moves between the two (it moved by up to
2x on the capture machine, ``sample_traces/h200_recheck/decode``), a prediction from the trace
is compared with a truth taken at another host speed. Here each configuration is timed,
profiled, and timed again, back to back in one process: ``*.truth.json`` holds both timings
(``before_ms_all``, ``after_ms_all``) and their common median (``step_ms_median``), so a
comparison can keep only the configurations whose host held still across the trace.

Configurations (the sweep's models and settings): GPT-2-style training (transformers, random
init, bf16 autocast, AdamW, seq 512) ``train_gpt2s_b{2,8,32}``, ``train_gpt2m_b4``; the
12-layer d1024 bf16 decoder ``decode_b{1,64}_eager`` (static KV cache 1024, one token per
step ending in ``.item()``). Training traces hold 3 steps after 1 profiler warm-up step;
decode traces 20 steps in ``decode_step_N`` ranges.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_profile import write_trace  # scrubs machine identity, gzips
from sweep_models import MODELS, decoder, gpt2_train_step, profile_training, timed

ACTS = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def run(name: str, out: Path) -> dict[str, Any]:
    if name.startswith("train"):
        _, model, b = name.split("_")
        batch, step, n = int(b[1:]), gpt2_train_step(model, int(b[1:])), 10
        info: dict[str, Any] = {"case": "train", "model": model, "config": MODELS[model],
                                "seq": 512}
    else:
        batch = int(name.split("_")[1][1:])
        step, n = decoder(batch)[0], 30
        info = {"case": "decode", "layers": 12, "d_model": 1024, "kv_len": 1024,
                "variant": "eager"}
    before = timed(step, n)
    trace = out / f"{name}.json.gz"
    if info["case"] == "train":
        profile_training(step, trace)
    else:
        with profile(activities=ACTS, record_shapes=True) as prof:
            for i in range(20):
                with record_function(f"decode_step_{i}"):
                    step()
        write_trace(prof, trace, add_flops=False)
    after = timed(step, n, warm=1)
    truth = {**info, "batch": batch, "step_ms_median": statistics.median(before + after),
             "before_ms_median": statistics.median(before),
             "after_ms_median": statistics.median(after),
             "before_ms_all": [round(x, 4) for x in before],
             "after_ms_all": [round(x, 4) for x in after],
             "note": "unprofiled step times right before and right after the profiled run, "
                     "same process", "gpu": torch.cuda.get_device_name(0),
             "torch": torch.__version__, "trace": f"{name}.json.gz"}
    (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
    return truth


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--only", action="append")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = a.only or ["decode_b1_eager", "decode_b64_eager", "train_gpt2s_b2",
                       "train_gpt2s_b8", "train_gpt2s_b32", "train_gpt2m_b4"]
    for name in names:
        try:
            t = run(name, out)
            print(name, {k: round(v, 3) for k, v in t.items() if k.endswith("median")},
                  flush=True)
        except Exception:
            traceback.print_exc()
            print("FAILED", name, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
