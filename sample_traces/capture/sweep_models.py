"""The sweep's workloads, shared by the re-check scripts (``decode_host_speed.py``,
``bracketed_sweep.py``, ``train_graph_twin.py``): the same models and settings as
``traces/gpu/sweep/capture_sweep.py`` so their traces compare with the shared sweep.

* :func:`timed`: unprofiled step times (ms), device drained after each step.
* :func:`capture_graph`: a function captured in one CUDA graph after warm-up on a side
  stream (the recipe torch documents for whole-network capture).
* :func:`profile_training`: the sweep's profiled training run (3 steps after 1 profiler
  warm-up step, ``record_shapes``), written with :func:`gpt_profile.write_trace`.
* :func:`decoder`: the 12-layer d1024 bf16 decoder (static KV cache 1024, one token per step
  ending in ``.item()``) at a batch: its eager step and its CUDA-graph replay
  (:func:`decoder_forward`: its forward and token tensor, for other step variants).
* :func:`host_probe_us`: the median time of a CPU-only aten call, the host's own speed.
* :func:`gpt2_train_step`: the GPT-2-style training step (transformers, random init, seq
  512, bf16 autocast, AdamW); ``capturable=True`` gives the variant a whole-step CUDA graph
  can hold (capturable AdamW, autocast without its weight cache, gradients zeroed in place).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
import torch.nn.functional as F
from gpt_profile import write_trace  # this directory: scripts put it on sys.path first
from torch.profiler import ProfilerActivity, profile, schedule

R = TypeVar("R")

DEV = torch.device("cuda")
BF = torch.bfloat16
MODELS = {"gpt2s": {"n_layer": 12, "n_embd": 768, "n_head": 12},
          "gpt2m": {"n_layer": 24, "n_embd": 1024, "n_head": 16}}
L, D, H, T, V = 12, 1024, 16, 1024, 32000


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


def capture_graph(fn: Callable[[], R]) -> tuple[torch.cuda.CUDAGraph, R]:
    """``fn`` run 3 times on a side stream, then captured in a CUDA graph: the graph and
    what ``fn`` returned while captured (its static output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def profile_training(fn: Callable[[], None], trace: Path) -> None:
    """Profile 3 steps of ``fn`` after 1 profiler warm-up step into ``trace`` (a scheduled
    profiler hands its events over in ``on_trace_ready``; they are cleared after)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3),
                 on_trace_ready=lambda pr: write_trace(pr, trace, add_flops=False)) as prof:
        for _ in range(4):
            fn()
            prof.step()
        torch.cuda.synchronize()


def decoder_forward(b: int) -> tuple[Callable[[], torch.Tensor], torch.Tensor]:
    """The sweep's decoder at batch ``b``: its forward (the next token from the one in
    ``tok``) and ``tok``, the device tensor holding the current token."""
    g = torch.Generator(device=DEV).manual_seed(0)
    w = [[torch.randn(a, c, device=DEV, dtype=BF, generator=g) * 0.02 for a, c in
          ((D, 3 * D), (D, D), (D, 4 * D), (4 * D, D))] for _ in range(L)]
    k = [torch.randn(b, H, T, D // H, device=DEV, dtype=BF) for _ in range(L)]
    v = [torch.randn(b, H, T, D // H, device=DEV, dtype=BF) for _ in range(L)]
    emb = torch.randn(V, D, device=DEV, dtype=BF) * 0.02
    tok = torch.zeros(b, dtype=torch.long, device=DEV)

    def fwd() -> torch.Tensor:
        x = emb[tok]
        for layer in range(L):
            qkv, o, up, down = w[layer]
            q = (F.layer_norm(x, (D,)) @ qkv)[:, :D].reshape(b, H, 1, D // H)
            x = x + F.scaled_dot_product_attention(q, k[layer], v[layer]).reshape(b, D) @ o
            x = x + F.gelu(F.layer_norm(x, (D,)) @ up) @ down
        return (F.layer_norm(x, (D,)) @ emb.t()).argmax(-1)
    return fwd, tok


def decoder(b: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """The sweep's decoder at batch ``b``: (eager step, CUDA-graph step), each ending in
    ``tok[0].item()``."""
    fwd, tok = decoder_forward(b)

    def eager() -> None:
        tok.copy_(fwd())
        tok[0].item()
    graph, nxt = capture_graph(fwd)

    def replay() -> None:
        graph.replay()
        tok.copy_(nxt)
        tok[0].item()
    return eager, replay


def host_probe_us(n: int = 2000) -> float:
    """Median µs of a CPU-only aten call (no device work): the host's own speed."""
    x = torch.zeros(64)
    ts = []
    for _ in range(n):
        t = time.perf_counter_ns()
        x.view(8, 8)
        ts.append((time.perf_counter_ns() - t) / 1e3)
    return statistics.median(ts)


def gpt2_train_step(model: str, batch: int, *, capturable: bool = False
                    ) -> Callable[[], None]:
    """The sweep's training step of ``model`` at ``batch`` (see the module docstring)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=32000, n_positions=512, bos_token_id=0, eos_token_id=0,
                     **MODELS[model])
    m = GPT2LMHeadModel(cfg).to(DEV)
    opt = torch.optim.AdamW(m.parameters(), 1e-4, capturable=capturable)
    ids = torch.randint(0, 32000, (batch, 512), device=DEV)

    def step() -> None:
        if capturable:
            opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", BF, cache_enabled=not capturable):
            loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        if not capturable:
            opt.zero_grad(set_to_none=True)
    return step
