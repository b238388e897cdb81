#!/usr/bin/env python3
"""Batch-1 decode GEMVs: cuBLAS's launch (fewer blocks than SMs) against the same product
spread over more blocks, to check the ``occupancy`` fix's time at stake.

usage: gemv_fill.py OUTDIR

For each weight shape of the sweep's decoder (``x[1, K] @ W[K, N]``, bf16): the per-call GPU
time of the same product as ``F.linear`` and ``torch.mv`` on the weight stored ``[N, K]``
(cuBLAS picks other kernels and grids), of ``torch.matmul`` (cuBLAS/cuBLASLt: on an H200
``nvjet_*`` with 48-64 blocks) and of a Triton split-N GEMV (one program per ``BLOCK_N``
output columns, so ``N / BLOCK_N`` blocks: 96-512 on these shapes), each as 100 calls
captured in one CUDA graph and replayed 5 times (GPU time only, no launch gaps), median per
call. A profiled run of one ``torch.matmul`` per
shape records cuBLAS's kernel name, grid and block. Writes ``OUTDIR/gemv_fill.json`` and
``OUTDIR/gemv_fill.json.gz`` (the Kineto trace).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_profile import write_trace  # scrubs machine identity, gzips

SHAPES = [(1024, 3072), (1024, 1024), (1024, 4096), (4096, 1024), (1024, 32000)]


@triton.jit
def _gemv(x_ptr, w_ptr, y_ptr, k, n, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # type: ignore[no-untyped-def]
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        rows = k0 + tl.arange(0, BLOCK_K)
        xv = tl.load(x_ptr + rows, mask=rows < k, other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + rows[:, None] * n + cols[None, :],
                     mask=(rows[:, None] < k) & (cols[None, :] < n), other=0.0).to(tl.float32)
        acc += tl.sum(xv[:, None] * wv, axis=0)
    tl.store(y_ptr + cols, acc.to(tl.bfloat16), mask=cols < n)


def triton_gemv(block_n: int, block_k: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        k, n = w.shape
        y = torch.empty(1, n, device=x.device, dtype=x.dtype)
        _gemv[(triton.cdiv(n, block_n),)](x, w, y, k, n, BLOCK_N=block_n, BLOCK_K=block_k)
        return y
    return run


def per_call_us(fn: Callable[[], Any], calls: int = 100, reps: int = 5) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) * 1e3 / calls)
    return statistics.median(out)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    rows = []
    for k, n in SHAPES:
        x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(k, n, device=dev, dtype=torch.bfloat16) * 0.02
        ref = x @ w
        wt = w.t().contiguous()  # the same weight stored [N, K] (nn.Linear's layout)
        row: dict[str, Any] = {"k": k, "n": n, "weight_bytes": k * n * 2,
                               "cublas_us": per_call_us(lambda x=x, w=w: x @ w),
                               "cublas_linear_us": per_call_us(
                                   lambda x=x, wt=wt: torch.nn.functional.linear(x, wt)),
                               "cublas_mv_us": per_call_us(lambda x=x, wt=wt: torch.mv(wt, x[0]))}
        for bn, bk in ((8, 256), (16, 128), (16, 256), (32, 128)):
            f = triton_gemv(bn, bk)
            err = float((f(x, w).float() - ref.float()).abs().max())
            row[f"triton_n{bn}_k{bk}_us"] = per_call_us(lambda f=f, x=x, w=w: f(x, w))
            row[f"triton_n{bn}_k{bk}_blocks"] = triton.cdiv(n, bn)
            row[f"triton_n{bn}_k{bk}_maxerr"] = err
        rows.append(row)
        print(json.dumps(row), flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for k, n in SHAPES:
            x = torch.randn(1, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            wt = w.t().contiguous()
            x @ w
            torch.nn.functional.linear(x, wt)
            torch.mv(wt, x[0])
        torch.cuda.synchronize()
    write_trace(prof, out / "gemv_fill.json.gz", add_flops=False)
    (out / "gemv_fill.json").write_text(json.dumps(
        {"tool": "sample_traces/capture/gemv_fill.py", "gpu": torch.cuda.get_device_name(0),
         "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
         "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
