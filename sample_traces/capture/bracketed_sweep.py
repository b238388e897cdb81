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
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_profile import write_trace  # scrubs machine identity, gzips

DEV = torch.device("cuda")
BF = torch.bfloat16
ACTS = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
MODELS = {"gpt2s": {"n_layer": 12, "n_embd": 768, "n_head": 12},
          "gpt2m": {"n_layer": 24, "n_embd": 1024, "n_head": 16}}


def timed(fn: Callable[[], None], n: int, warm: int = 3) -> list[float]:
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return ts


def train_step(model: str, batch: int) -> Callable[[], None]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=32000, n_positions=512, bos_token_id=0, eos_token_id=0,
                     **MODELS[model])
    m = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), 1e-4)
    ids = torch.randint(0, 32000, (batch, 512), device=DEV)

    def step() -> None:
        with torch.autocast("cuda", BF):
            loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def decode_step(b: int) -> Callable[[], None]:
    n_layer, d, h, t, v = 12, 1024, 16, 1024, 32000
    g = torch.Generator(device=DEV).manual_seed(0)
    w = [[torch.randn(x, y, device=DEV, dtype=BF, generator=g) * 0.02 for x, y in
          ((d, 3 * d), (d, d), (d, 4 * d), (4 * d, d))] for _ in range(n_layer)]
    k = [torch.randn(b, h, t, d // h, device=DEV, dtype=BF) for _ in range(n_layer)]
    vc = [torch.randn(b, h, t, d // h, device=DEV, dtype=BF) for _ in range(n_layer)]
    emb = torch.randn(v, d, device=DEV, dtype=BF) * 0.02
    tok = torch.zeros(b, dtype=torch.long, device=DEV)

    def step() -> None:
        x = emb[tok]
        for layer in range(n_layer):
            qkv, o, up, down = w[layer]
            q = (F.layer_norm(x, (d,)) @ qkv)[:, :d].reshape(b, h, 1, d // h)
            x = x + F.scaled_dot_product_attention(q, k[layer], vc[layer]).reshape(b, d) @ o
            x = x + F.gelu(F.layer_norm(x, (d,)) @ up) @ down
        tok.copy_((F.layer_norm(x, (d,)) @ emb.t()).argmax(-1))
        tok[0].item()
    return step


def run(name: str, out: Path) -> dict[str, Any]:
    if name.startswith("train"):
        _, model, b = name.split("_")
        batch, step, n = int(b[1:]), train_step(model, int(b[1:])), 10
        info: dict[str, Any] = {"case": "train", "model": model, "config": MODELS[model],
                                "seq": 512}
    else:
        batch = int(name.split("_")[1][1:])
        step, n = decode_step(batch), 30
        info = {"case": "decode", "layers": 12, "d_model": 1024, "kv_len": 1024,
                "variant": "eager"}
    before = timed(step, n)
    trace = out / f"{name}.json.gz"
    if info["case"] == "train":
        # a scheduled profiler hands its events over in on_trace_ready (cleared after)
        with profile(activities=ACTS, record_shapes=True,
                     schedule=schedule(wait=0, warmup=1, active=3),
                     on_trace_ready=lambda pr: write_trace(pr, trace, add_flops=False)) as prof:
            for _ in range(4):
                step()
                prof.step()
            torch.cuda.synchronize()
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
