#!/usr/bin/env python3
"""Profile a small GPT-style transformer (train + decode) and write a Kineto trace.

The model is plain PyTorch with random weights (nothing is downloaded): token + position
embeddings, ``--layers`` pre-LayerNorm blocks of causal multi-head attention
(``F.scaled_dot_product_attention``) and a GELU MLP, a final LayerNorm and an LM head tied to
the token embedding. The run, all under ``torch.profiler``:

1. ``--wait + --warmup`` training steps the profiler skips / warms up on;
2. ``--train-steps`` training steps (AdamW; bf16 autocast on CUDA, fp32 on CPU), each in
   ``record_function("train_step")``;
3. one ``prefill`` step (the prompt, ``--seq // 2`` tokens, builds the KV cache);
4. ``--decode-steps`` ``decode_step`` steps, one new token per sequence each, reusing the
   KV cache (greedy argmax).

Every step of 2-4 is one profiler step, so the trace holds exactly
``train_steps + 1 + decode_steps`` ``ProfilerStep#N`` ranges (``active_steps`` in the
sidecar). The trace is written gzipped to ``--out`` (``.json.gz``); beside it
``<stem>.meta.json`` records the GPU, driver, software versions, the model configuration and
the exact command, from which ``make_readme.py`` writes the sample directory's README.

Example (CPU smoke run, a few seconds)::

    python3 sample_traces/capture/gpt_profile.py --device cpu --layers 2 --d-model 64 \
        --heads 4 --seq 32 --batch 2 --train-steps 2 --decode-steps 3 --out /tmp/gpt.json.gz
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_env import gpu_info, portable_command, software_info


@dataclass(frozen=True)
class GPTConfig:
    """Model shape. ``d_model`` must be divisible by ``heads``."""

    vocab: int = 8192
    layers: int = 4
    d_model: int = 512
    heads: int = 8
    seq: int = 256
    mlp_ratio: int = 4


class CausalSelfAttention(nn.Module):
    """Multi-head attention with an optional KV cache (``(k, v)``, each ``[B, H, S, D]``)."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if cache is not None:  # decode: attend to every cached position, no mask needed
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.proj(y), (k, v)


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        a, new_cache = self.attn(self.ln1(x), cache)
        x = x + a
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x, new_cache


class GPT(nn.Module):
    """Embeddings, blocks, final LayerNorm, LM head tied to the token embedding."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, idx: torch.Tensor, caches: list[Any] | None = None, pos0: int = 0
                ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        t = idx.shape[1]
        pos = torch.arange(pos0, pos0 + t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        new = []
        for i, blk in enumerate(self.blocks):
            x, c = blk(x, None if caches is None else caches[i])
            new.append(c)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied LM head
        return logits, new


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256, help="training sequence length "
                   "(= position-embedding size; the decode prompt is seq // 2 tokens)")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--train-steps", type=int, default=3)
    p.add_argument("--decode-steps", type=int, default=8)
    p.add_argument("--wait", type=int, default=1, help="profiler schedule: skipped steps")
    p.add_argument("--warmup", type=int, default=1, help="profiler schedule: warm-up steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-add-flops", action="store_true", help="write the trace exactly as "
                   "export_chrome_trace does (no args.flops added; see write_trace)")
    p.add_argument("--out", required=True, help="trace file to write (.json.gz)")
    a = p.parse_args(argv)
    if a.d_model % a.heads:
        p.error("--d-model must be divisible by --heads")
    if a.seq // 2 + a.decode_steps > a.seq:
        p.error("--decode-steps must be at most --seq - --seq // 2 (position embeddings)")
    if min(a.layers, a.heads, a.batch, a.train_steps, a.seq) < 1 or a.decode_steps < 0:
        p.error("sizes and --train-steps must be >= 1, --decode-steps >= 0")
    if not a.out.endswith(".json.gz"):
        p.error("--out must end in .json.gz")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    return a


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train, prefill and decode under the profiler; write the trace; return the sidecar."""
    torch.manual_seed(args.seed)
    dev = torch.device(args.device)
    cfg = GPTConfig(vocab=args.vocab, layers=args.layers, d_model=args.d_model,
                    heads=args.heads, seq=args.seq)
    model = GPT(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    cuda = dev.type == "cuda"

    def autocast() -> contextlib.AbstractContextManager[Any]:
        return (torch.autocast("cuda", dtype=torch.bfloat16) if cuda
                else contextlib.nullcontext())

    data = torch.randint(0, cfg.vocab, (args.batch, cfg.seq + 1), device=dev)
    x, y = data[:, :-1], data[:, 1:]

    def train_step() -> None:
        with record_function("train_step"):
            with autocast():
                logits, _ = model(x)
                loss = F.cross_entropy(logits.float().view(-1, cfg.vocab), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    active = args.train_steps + 1 + args.decode_steps
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sched = schedule(wait=args.wait, warmup=args.warmup, active=active, repeat=1)
    prompt_len = cfg.seq // 2
    t0 = time.perf_counter()
    # with_stack + with_modules: python_function frames incl. "nn.Module: Block_N" (the op
    # and module tree, layer grouping); profile_memory: [memory] events.
    with profile(activities=activities, schedule=sched, record_shapes=True,
                 with_flops=True, with_stack=True, with_modules=True,
                 profile_memory=True) as prof:
        for _ in range(args.wait + args.warmup + args.train_steps):
            model.train()
            train_step()
            prof.step()
        model.eval()
        with torch.inference_mode():
            with record_function("prefill"), autocast():
                logits, caches = model(x[:, :prompt_len])
                nxt = logits[:, -1].argmax(-1, keepdim=True)
            prof.step()
            for i in range(args.decode_steps):
                with record_function("decode_step"), autocast():
                    logits, caches = model(nxt, caches, pos0=prompt_len + i)
                    nxt = logits[:, -1].argmax(-1, keepdim=True)
                prof.step()
        if cuda:
            torch.cuda.synchronize()
    seconds = time.perf_counter() - t0

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = write_trace(prof, out, add_flops=not args.no_add_flops)
    return {
        "tool": "sample_traces/capture/gpt_profile.py",
        "command": portable_command(sys.argv),
        "captured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": args.device, "gpu": gpu_info(), "software": software_info(),
        "model": asdict(cfg),
        "params": sum(p.numel() for p in model.parameters()),
        "run": {"batch": args.batch, "train_steps": args.train_steps, "prefill_steps": 1,
                "prompt_tokens": prompt_len, "decode_steps": args.decode_steps,
                "wait": args.wait, "warmup": args.warmup, "active_steps": active,
                "precision": "bf16 autocast" if cuda else "fp32",
                "optimizer": "AdamW(lr=1e-4)", "seed": args.seed,
                "profiler": {"activities": [a.name for a in activities],
                             "record_shapes": True, "with_flops": True,
                             "with_stack": True, "with_modules": True,
                             "profile_memory": True}},
        "trace": {"file": out.name, "bytes": out.stat().st_size, **written},
        "seconds": round(seconds, 3),
    }


def profiler_flops(prof: profile) -> dict[tuple[int, str], float]:
    """``(External id, op name) -> FLOPs`` from the profiler's own events (``with_flops``).

    torch computes these (its per-op formulas, e.g. ``2*M*N*K`` for ``aten::mm``) into
    ``FunctionEvent.flops`` but, at least in torch 2.13, ``export_chrome_trace`` does not
    serialise them. ``FunctionEvent.id`` is the Kineto correlation id that the trace prints
    as ``args["External id"]``. Keys seen twice are dropped (ambiguous).
    """
    out: dict[tuple[int, str], float] = {}
    seen: set[tuple[int, str]] = set()
    for e in prof.events():
        if not e.flops:
            continue
        key = (int(e.id), str(e.name))
        if key in seen:
            out.pop(key, None)
            continue
        seen.add(key)
        out[key] = float(e.flops)
    return out


def write_trace(prof: profile, out: Path, *, add_flops: bool = True) -> dict[str, Any]:
    """Export the Chrome trace, scrub machine identity, add ``flops``, gzip it to ``out``.

    * ``export_chrome_trace`` writes the output path into ``traceName`` and the machine's
      name into ``host_name``: the committed sample must carry neither, so ``traceName``
      becomes the file name and ``host_name`` the word ``capture-host``.
    * With ``add_flops``, each ``cpu_op`` that the profiler counted FLOPs for and whose
      trace event has no ``flops`` arg gets ``args["flops"]`` (see :func:`profiler_flops`).
      Nothing else in the trace is changed.

    Returns:
        ``{"events": n, "flops_in_export": k, "flops_added": m, "flops_source": text}``.
    """
    flops = profiler_flops(prof) if add_flops else {}
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        raw = Path(tmp) / out.name.removesuffix(".gz")
        prof.export_chrome_trace(str(raw))
        doc = json.loads(raw.read_text())
    if "traceName" in doc:
        doc["traceName"] = out.name
    if "host_name" in doc:
        doc["host_name"] = "capture-host"
    events = doc.get("traceEvents", [])
    native = added = 0
    for ev in events:
        args = ev.get("args")
        if ev.get("cat") != "cpu_op" or not isinstance(args, dict):
            continue
        if "flops" in args:
            native += 1
            continue
        fl = flops.get((args.get("External id", -1), ev.get("name", "")))
        if fl is not None:
            args["flops"] = fl
            added += 1
    body = json.dumps(doc, separators=(",", ":")).encode()
    part = out.with_name(out.name + ".part")
    with open(part, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        gz.write(body)
    part.replace(out)
    source = ("written by torch's export_chrome_trace" if native and not added else
              "added by gpt_profile.py from torch.profiler FunctionEvent.flops (torch's own "
              "formulas; export_chrome_trace does not write them)" if added else "none")
    return {"events": len(events), "flops_in_export": native, "flops_added": added,
            "flops_source": source}


def sidecar_path(out: str | Path) -> Path:
    """``x/name.json.gz`` -> ``x/name.meta.json``."""
    p = Path(out)
    return p.with_name(p.name.removesuffix(".json.gz") + ".meta.json")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    meta = run(args)
    side = sidecar_path(args.out)
    side.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out} ({meta['trace']['bytes']} bytes, {meta['trace']['events']} "
          f"events, {meta['run']['active_steps']} profiler steps) and {side}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
