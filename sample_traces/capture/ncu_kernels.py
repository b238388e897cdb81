#!/usr/bin/env python3
"""Four representative kernels, each once, for Nsight Compute (run by ``capture_ncu.sh``).

1. ``tp_gemm_bf16``: ``torch.matmul`` of ``[M, K] x [K, N]`` bf16 (cuBLAS, tensor cores);
2. ``tp_sdpa_bf16``: ``F.scaled_dot_product_attention`` forward, ``q, k, v`` of
   ``[B, H, L, D]`` bf16, *not* causal, so the kernel does exactly the ``Q K^T`` and ``P V``
   products the shape formula counts (``2 B H L S (D + Dv)``);
3. ``tp_layernorm_bf16``: ``F.layer_norm`` over the last dim of ``[R, C]`` bf16;
4. ``tp_add_bf16``: ``x + y`` of two ``[R, C]`` bf16 tensors (pure memory traffic).

Every op first runs once outside the profiled window (cuBLAS/cuDNN set-up, lazy module
loading, allocator growth), then once inside ``cudaProfilerStart/Stop``
(``torch.cuda.profiler``) with an NVTX range named as above around it, so
``ncu --profile-from-start off --nvtx`` profiles exactly these launches and labels them.

``--json`` writes a sidecar with each range's op name, input shapes and dtypes in Kineto's
spelling (``aten::mm``, ``[[M, K], [K, N]]``, ``c10::BFloat16``): the tests feed these to
``traceparse.roofline.estimate.op_flops`` and compare with the FLOPs ncu counted.

``--device cpu`` runs the same ops without NVTX or the profiler window (a smoke test of the
script and sidecar on machines without a GPU; it measures nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_env import gpu_info, portable_command, software_info

BF16 = "c10::BFloat16"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--k", type=int, default=4096)
    p.add_argument("--attn-batch", type=int, default=4)
    p.add_argument("--attn-heads", type=int, default=16)
    p.add_argument("--attn-seq", type=int, default=2048)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    p.add_argument("--json", help="write the sidecar (ranges, shapes, versions) here")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    return a


@contextlib.contextmanager
def nvtx(name: str, on: bool) -> Iterator[None]:
    """An NVTX push/pop range when ``on`` (CUDA), nothing otherwise."""
    if on:
        torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        if on:
            torch.cuda.nvtx.range_pop()


def cases(a: argparse.Namespace, dev: torch.device
          ) -> list[tuple[str, str, list[Any], list[str], Callable[[], torch.Tensor]]]:
    """``(range, Kineto op name, input dims, input types, thunk)`` per kernel."""
    g = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=g)

    ma, mb = rnd(a.m, a.k), rnd(a.k, a.n)
    shp = (a.attn_batch, a.attn_heads, a.attn_seq, a.head_dim)
    q, k, v = rnd(*shp), rnd(*shp), rnd(*shp)
    x, y = rnd(a.rows, a.cols), rnd(a.rows, a.cols)
    w, b = rnd(a.cols), rnd(a.cols)
    sdpa_op = ("aten::_scaled_dot_product_flash_attention" if dev.type == "cuda"
               else "aten::_scaled_dot_product_flash_attention_for_cpu")
    return [
        ("tp_gemm_bf16", "aten::mm", [[a.m, a.k], [a.k, a.n]], [BF16, BF16],
         lambda: torch.matmul(ma, mb)),
        ("tp_sdpa_bf16", sdpa_op, [list(shp)] * 3, [BF16] * 3,
         lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False)),
        ("tp_layernorm_bf16", "aten::native_layer_norm", [[a.rows, a.cols], [a.cols],
                                                          [a.cols], [a.cols]],
         [BF16, "", BF16, BF16], lambda: F.layer_norm(x, (a.cols,), w, b)),
        ("tp_add_bf16", "aten::add", [[a.rows, a.cols], [a.rows, a.cols]], [BF16, BF16],
         lambda: x + y),
    ]


def run(a: argparse.Namespace) -> dict[str, Any]:
    """Warm every op, then run each once inside the profiled window; return the sidecar."""
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    todo = cases(a, dev)
    for *_, fn in todo:  # warm-up, not profiled
        fn()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
    ranges = []
    try:
        for name, op, dims, types, fn in todo:
            t0 = time.perf_counter()
            with nvtx(name, cuda):
                out = fn()
                if cuda:
                    torch.cuda.synchronize()
            ranges.append({"range": name, "op": op, "input_dims": dims, "input_types": types,
                           "output_dims": list(out.shape),
                           "host_seconds": round(time.perf_counter() - t0, 6)})
    finally:
        if cuda:
            torch.cuda.profiler.stop()
    return {"tool": "sample_traces/capture/ncu_kernels.py",
            "command": portable_command(sys.argv),
            "captured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": a.device, "gpu": gpu_info(), "software": software_info(),
            "ranges": ranges}


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    meta = run(a)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    print("ran " + ", ".join(r["range"] for r in meta["ranges"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
