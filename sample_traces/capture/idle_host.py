#!/usr/bin/env python3
"""Does the host issue a step more slowly after it waited idle for the GPU?

usage: idle_host.py OUT.json [--steps N]

A GPU-bound training step (the sweep's ``train_gpt2s_b32``) leaves the host waiting in
``synchronize`` for most of the step; a host-bound one (``train_gpt2s_b8``) never idles.
Traces show every host op of the GPU-bound step slower (aten::view 1.2x, layer_norm 1.8x
on the H100 bracketed pair), which a prediction of the small batch from the large one
inherits. This times, without the profiler, how long the host takes to *issue* the forward
pass (``perf_counter`` around the forward call; no device work waited for: the forward's
~1,000 launches fit the launch queue) of the sweep's gpt2s at batch 8 and 32, and of batch
8 under three conditions before each step: none (steps back to back), the host sleeping
60 ms after the step's drain (idle, as in a GPU-bound step), and the host spinning 60 ms in
Python (busy, not idle). Each condition runs in interleaved rounds with a CPU-only host probe
(median of 2,000 ``aten::view`` calls) taken right after the wait.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_models import BF, DEV, MODELS, host_probe_us

WAIT_S = 0.060


def model_step(batch: int) -> tuple[Callable[[], torch.Tensor], Callable[[torch.Tensor], None]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=32000, n_positions=512, bos_token_id=0, eos_token_id=0,
                     **MODELS["gpt2s"])
    m = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), 1e-4)
    ids = torch.randint(0, 32000, (batch, 512), device=DEV)

    def forward() -> torch.Tensor:
        with torch.autocast("cuda", BF):
            return m(input_ids=ids, labels=ids).loss

    def rest(loss: torch.Tensor) -> None:
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return forward, rest


def wait(kind: str) -> None:
    if kind == "sleep":
        time.sleep(WAIT_S)
    elif kind == "spin":
        end = time.perf_counter() + WAIT_S
        while time.perf_counter() < end:
            pass


def one(fwd: Callable[[], torch.Tensor], rest: Callable[[torch.Tensor], None],
        kind: str) -> tuple[float, float, float]:
    """(forward issue ms, whole step ms, probe µs) of one step after the wait ``kind``."""
    torch.cuda.synchronize()
    wait(kind)
    t0 = time.perf_counter()
    loss = fwd()
    t1 = time.perf_counter()
    rest(loss)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3, host_probe_us(300)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    runs = {8: model_step(8), 32: model_step(32)}
    conds = [(8, "none"), (8, "sleep"), (8, "spin"), (32, "none")]
    for f, r in runs.values():
        for _ in range(3):
            one(f, r, "none")
    res: dict[str, list[list[float]]] = {f"b{b}_{k}": [] for b, k in conds}
    for _ in range(a.rounds):
        for b, k in conds:
            f, r = runs[b]
            res[f"b{b}_{k}"] += [list(one(f, r, k)) for _ in range(a.steps)]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "wait_s": WAIT_S, "columns": ["forward_issue_ms", "step_ms", "probe_us"],
           "runs": res,
           "medians": {k: [statistics.median(x[i] for x in v) for i in range(3)]
                       for k, v in res.items()}}
    Path(a.out).write_text(json.dumps(out, indent=1))
    for k, v in out["medians"].items():
        print(k, [round(x, 3) for x in v], flush=True)


if __name__ == "__main__":
    main()
