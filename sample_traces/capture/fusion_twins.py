#!/usr/bin/env python3
"""Fusion twins: the ``unfused_elementwise`` chain, the same chain hand-fused into one kernel,
and the same chain under ``torch.compile``, each profiled like ``scenarios.py`` and timed
without the profiler.

usage: fusion_twins.py OUTDIR [--numel N ...] [--steps K]

Why: the scenario's own twin is ``torch.compile``, whose per-call host cost (dynamo guards,
the compiled region's wrapper) replaces the eager chain's dispatch and is not visible in the
eager trace. A hand-fused kernel (one ``torch.cuda.jiterator`` kernel: NVRTC-compiled once
before profiling, one launch per call) is the fusion mechanism alone; both twins are measured
so a predicted fusion saving can be checked against each. Every ``--numel`` size is run
(default: the scenario's 2**21 floats, host-bound, and 2**25, GPU-bound).

Writes ``OUTDIR/fusion_<variant>_n<numel>.json.gz`` (Kineto traces, the scenario runner's
profiler settings and trace scrubbing) and ``OUTDIR/fusion_twins.json``: per run, the
profiled step times (host clock around each step), the unprofiled step times (median of 30
after 5 warm-up steps, device drained after each) and the largest difference between the
variant's output and the eager chain's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scenarios  # noqa: E402  (this directory's runner: same profiler settings)
from capture_env import gpu_info, software_info  # noqa: E402
from scenario_work import SIZES, Ctx, Work, _elementwise_chain  # noqa: E402

#: One jiterator kernel doing the chain's ops in the same order (multiply, add, sin, relu).
CHAIN_CODE = r"""
template <typename T> T fused_chain(T x) {
  for (int j = 0; j < OPS; ++j) {
    int r = j % 4;
    if (r == 0) x = x * T(1.0001);
    else if (r == 1) x = x + T(0.5);
    else if (r == 2) x = sin(x);
    else x = x > T(0) ? x : T(0);
  }
  return x;
}
"""


def _hand_fused(ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    code = CHAIN_CODE.replace("OPS", str(ops))
    return torch.cuda.jiterator._create_jit_fn(code)  # type: ignore[no-any-return]


def _triton_fused(ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The same chain as one Triton kernel (a second hand-fused form, launched from Python)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kern(x_ptr, y_ptr, n, OPS: tl.constexpr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        for j in tl.static_range(OPS):
            if j % 4 == 0:
                x = x * 1.0001
            elif j % 4 == 1:
                x = x + 0.5
            elif j % 4 == 2:
                x = tl.sin(x)
            else:
                x = tl.maximum(x, 0.0)
        tl.store(y_ptr + offs, x, mask=m)

    def run(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kern[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), OPS=ops, BLOCK=1024)
        return y
    return run


def _variant_fn(variant: str, ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    eager = _elementwise_chain(ops)
    if variant == "eager":
        return eager
    if variant == "hand":
        return _hand_fused(ops)
    if variant == "triton":
        return _triton_fused(ops)
    if variant == "compile":
        return torch.compile(eager)  # type: ignore[return-value]
    raise ValueError(variant)


def _maker(variant: str) -> Callable[[Ctx, str], Work]:
    def make(ctx: Ctx, _variant: str) -> Work:
        x = torch.randn(ctx.size.chain_numel, device=ctx.dev)
        fn = _variant_fn(variant, ctx.size.chain_ops)
        t0 = time.perf_counter()
        fn(x)
        ctx.sync()
        first_s = round(time.perf_counter() - t0, 3)
        info: dict[str, Any] = {"ops": ctx.size.chain_ops, "numel": ctx.size.chain_numel,
                                "fusion": variant, "first_call_s": first_s}

        def step(i: int) -> None:
            with ctx.label("elementwise_chain"):
                fn(x)
        return Work(step, info=info)
    return make


def _unprofiled(variant: str, numel: int, ops: int, reps: int = 30) -> dict[str, Any]:
    x = torch.randn(numel, device="cuda")
    fn = _variant_fn(variant, ops)
    ref = _elementwise_chain(ops)(x)
    diff = float((fn(x) - ref).abs().max())
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(x)
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t) * 1e3)
    return {"step_ms_median": statistics.median(ts), "step_ms_all": [round(v, 4) for v in ts],
            "max_abs_diff_vs_eager": diff}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--numel", type=int, action="append")
    p.add_argument("--steps", type=int, default=6)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    runs = []
    for numel in a.numel or [1 << 21, 1 << 25]:
        size = f"fusion{numel}"
        SIZES[size] = dataclasses.replace(SIZES["full"], chain_numel=numel)
        for variant in ("eager", "hand", "triton", "compile"):
            name = f"fusion_{variant}_n{numel}"
            scenarios.MAKERS[name] = _maker(variant)
            try:
                part = scenarios.run_workload(name, variant, dev, size, "torch",
                                              out / f"{name}.json.gz", a.steps)
                runs.append({"name": name, "variant": variant, "numel": numel,
                             "sizes": part["sizes"], "timings_ms": part["timings_ms"],
                             "unprofiled": _unprofiled(variant, numel, SIZES[size].chain_ops)})
            except Exception as e:  # one variant failing must not lose the others
                runs.append({"name": name, "variant": variant, "numel": numel,
                             "error": f"{type(e).__name__}: {e}"[:400]})
            print(json.dumps(runs[-1])[:300], flush=True)
    (out / "fusion_twins.json").write_text(json.dumps(
        {"tool": "sample_traces/capture/fusion_twins.py", "gpu": gpu_info(),
         "software": software_info(), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
