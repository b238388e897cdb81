#!/usr/bin/env python3
"""The fusion fix on a real training step: the sweep's GPT-2 step eager vs fused.

usage: fusion_train_twin.py OUTDIR [--model gpt2s] [--batch 32] [--rounds 3]

The eager step is the sweep's (``traces/gpu/sweep/capture_sweep.py``: transformers GPT-2,
random init, seq 512, bf16 autocast, AdamW with its default multi-tensor kernels). The twin
is the same step with its elementwise work fused the two ways a user would: the model under
``torch.compile`` (Inductor fuses the elementwise and normalisation chains around the
GEMMs) and ``AdamW(fused=True)`` (one kernel per parameter group instead of a chain of
``_foreach_*`` kernels). Written as soon as each is known:

* ``OUTDIR/train_<model>_b<B>_eager.json.gz``: the eager step profiled as in the sweep (3
  steps after 1 profiler warm-up step, ``record_shapes``), after 3 unprofiled warm-up steps
  (the first runs of a fresh model hold cuBLAS/allocator warm-up);
* ``OUTDIR/fusion_train_twin.json``: unprofiled ms per step of both, ``rounds`` interleaved
  rounds of 10 steps (device drained after each step), and the compile time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_models import BF, DEV, MODELS, profile_training, timed


def step_fn(model: str, batch: int, fused: bool) -> Callable[[], None]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=32000, n_positions=512, bos_token_id=0, eos_token_id=0,
                     **MODELS[model])
    m = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), 1e-4, fused=fused)
    run = torch.compile(m) if fused else m
    ids = torch.randint(0, 32000, (batch, 512), device=DEV)

    def step() -> None:
        with torch.autocast("cuda", BF):
            loss = run(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--model", default="gpt2s")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"train_{a.model}_b{a.batch}"
    res: dict[str, Any] = {"tool": "sample_traces/capture/fusion_train_twin.py",
                           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                           "model": a.model, "config": MODELS[a.model], "batch": a.batch,
                           "seq": 512, "eager_trace": f"{name}_eager.json.gz"}
    path = out / "fusion_train_twin.json"

    def save() -> None:
        path.write_text(json.dumps(res, indent=1))
    eager = step_fn(a.model, a.batch, fused=False)
    for _ in range(3):  # warm-up before the trace, as the sweep's timing did
        eager()
    torch.cuda.synchronize()
    profile_training(eager, out / f"{name}_eager.json.gz")
    fused = step_fn(a.model, a.batch, fused=True)
    t = time.perf_counter()
    fused()
    torch.cuda.synchronize()
    res["compile_s"] = time.perf_counter() - t
    save()
    rounds: dict[str, list[float]] = {"eager": [], "fused": []}
    for _ in range(a.rounds):
        for k, fn in (("eager", eager), ("fused", fused)):
            rounds[k] += timed(fn, 10)
            res[f"{k}_step_ms_all"] = [round(x, 4) for x in rounds[k]]
            res[f"{k}_step_ms_median"] = statistics.median(rounds[k])
            save()
    res["note"] = ("unprofiled ms per step (device drained after each), interleaved rounds; "
                   "fused = torch.compile(model) + AdamW(fused=True)")
    save()
    print({k: v for k, v in res.items() if "median" in k or k == "compile_s"}, flush=True)


if __name__ == "__main__":
    main()
