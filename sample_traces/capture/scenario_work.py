"""The workloads of the known-cause scenarios (issue 19): one function per scenario.

Each ``make_<scenario>(ctx, variant)`` sets its tensors up (not profiled) and returns a
:class:`Work`: the step function the runner calls once per profiled step, how many steps to
run before profiling starts, and what it planted (sizes, measured times). Which cause each
plants, and what traceparse must conclude, is written once in ``planted.py``.

On the CPU every scenario still runs (tiny sizes, a genuine torch.profiler trace), but the
CUDA-only parts cannot: they are recorded with :meth:`Ctx.skip` (what, and why) and the run
is marked not diagnosable in its sidecar. Nothing here prints or writes files.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from planted import BOTTLENECK, SWEEP, TWIN
from torch import nn


@dataclass(frozen=True)
class Size:
    """Problem sizes of one preset (``tiny`` for CPU tests, ``full`` for an H100/H200).

    Attributes:
        steps: profiled steps per run.
        unit_n: side of the fp32 GEMM that is one "GPU work unit" (host delays are set in
            multiples of its measured time).
        copy_n: side of the fp32 matrix copied to the host per step (pageable_copy).
        sync_iters: iterations per step (host_sync).
        host_factor: host bookkeeping time / GPU unit time (host_sync).
        tiny_kernels: elementwise kernels per step (launch_bound), on tiny_numel elements.
        chain_ops: elementwise ops in the chain (unfused_elementwise), on chain_numel
            (full: 2 M floats, 16 MB moved per op: about 5 µs on an H100's 3.35 TB/s, under
            the fusion rule's 10 µs "tiny kernel" limit with room to spare).
        gemm_sizes: square GEMM sides of the sweep (gemm_roofline).
        batch_rows, batch_cols: host batch shape (input_starved).
        batch_factor: batch preparation time / GPU unit time (input_starved).
        workers: prefetching threads of the twin (input_starved).
        conv_batch, conv_channels, conv_hw: the warm-up model's input (warmup).
    """

    steps: int
    unit_n: int
    copy_n: int
    sync_iters: int
    host_factor: float
    tiny_kernels: int
    tiny_numel: int
    chain_ops: int
    chain_numel: int
    gemm_sizes: tuple[int, ...]
    batch_rows: int
    batch_cols: int
    batch_factor: float
    workers: int
    conv_batch: int
    conv_channels: int
    conv_hw: int


SIZES = {
    "tiny": Size(steps=3, unit_n=64, copy_n=64, sync_iters=2, host_factor=1.5,
                 tiny_kernels=40, tiny_numel=256, chain_ops=16, chain_numel=4096,
                 gemm_sizes=(32, 64), batch_rows=8, batch_cols=16, batch_factor=3.0,
                 workers=4, conv_batch=2, conv_channels=4, conv_hw=8),
    "full": Size(steps=6, unit_n=4096, copy_n=4096, sync_iters=4, host_factor=1.5,
                 tiny_kernels=400, tiny_numel=1024, chain_ops=24, chain_numel=1 << 21,
                 gemm_sizes=(1024, 4096, 8192), batch_rows=64, batch_cols=1024,
                 batch_factor=3.0, workers=4, conv_batch=32, conv_channels=64, conv_hw=56),
}


@dataclass
class Ctx:
    """What a workload needs: the device, sizes, a labelling context and the skip log.

    ``label(name)`` opens a named host range: ``torch.profiler.record_function`` under the
    PyTorch profiler, an NVTX range under nsys/ncu.
    """

    dev: torch.device
    size: Size
    label: Callable[[str], contextlib.AbstractContextManager[Any]]
    skipped: list[dict[str, str]] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.dev.type == "cuda"

    def skip(self, what: str, reason: str) -> None:
        """Record a part of the scenario that did not run, and why."""
        self.skipped.append({"what": what, "reason": reason})

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


@dataclass
class Work:
    """A scenario ready to run: ``step(i)`` per profiled step after ``warm_steps`` unprofiled
    ones; ``info`` goes into the sidecar (sizes, measured times, ranges)."""

    step: Callable[[int], None]
    warm_steps: int = 2
    info: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    #: Why ``with_stack`` must be off for this run (None: on). The Python tracer records
    #: every Python call: around a torch.compile it wrote 1.6 M python_function events
    #: (466 MB of JSON, 66 s instead of 2 s) for a 3-op function on the CPU.
    no_stack_reason: str | None = None


def _randn(ctx: Ctx, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device=ctx.dev, dtype=dtype)


def timed_ms(ctx: Ctx, fn: Callable[[], Any], reps: int = 5) -> float:
    """Median wall time of ``fn`` in ms, the device drained before and after each call."""
    fn()
    ctx.sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def host_work_ms(ms: float) -> None:
    """Host-side work of ``ms`` milliseconds (logging, metrics, bookkeeping). One sleep, not a
    Python busy loop: ``with_stack`` traces every Python call, and a spin loop would fill
    the trace with millions of ``perf_counter`` events."""
    time.sleep(ms / 1e3)


def make_pageable_copy(ctx: Ctx, variant: str) -> Work:
    n = ctx.size.copy_n
    a, b = _randn(ctx, n, n), _randn(ctx, n, n)
    info: dict[str, Any] = {"gemm": [n, n, n], "copy_bytes": n * n * 4}
    if variant == BOTTLENECK:
        if not ctx.cuda:
            ctx.skip("device-to-host copy", "on the CPU y.cpu() returns y itself: no copy")

        def step(i: int) -> None:
            with ctx.label("gemm"):
                y = a @ b
            with ctx.label("copy_to_host"):
                y.cpu()  # pageable destination, synchronous
        return Work(step, info=info)
    if not ctx.cuda:
        ctx.skip("pinned non_blocking copy on a side stream",
                 "pinned memory and CUDA streams need CUDA; the CPU twin copies into a "
                 "preallocated host buffer instead")
        buf = torch.empty(n, n)

        def cpu_step(i: int) -> None:
            with ctx.label("gemm"):
                y = a @ b
            with ctx.label("copy_to_host"):
                buf.copy_(y)
        return Work(cpu_step, info=info)
    bufs = [torch.empty(n, n, pin_memory=True) for _ in range(2)]
    done = [torch.cuda.Event() for _ in range(2)]
    side = torch.cuda.Stream()

    def twin_step(i: int) -> None:
        with ctx.label("gemm"):
            y = a @ b
        with ctx.label("copy_to_host"):
            done[i % 2].synchronize()  # the buffer's copy of two steps ago (long finished)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                bufs[i % 2].copy_(y, non_blocking=True)
                done[i % 2].record(side)
            y.record_stream(side)
    return Work(twin_step, info=info)


def make_host_sync(ctx: Ctx, variant: str) -> Work:
    n, iters = ctx.size.unit_n, ctx.size.sync_iters
    a, b = _randn(ctx, n, n), _randn(ctx, n, n)
    unit_ms = timed_ms(ctx, lambda: a @ b)
    host_ms = ctx.size.host_factor * unit_ms
    acc = torch.zeros((), device=ctx.dev)
    if variant == BOTTLENECK and not ctx.cuda:
        ctx.skip(".item() / torch.cuda.synchronize() waiting for the GPU",
                 "no GPU: on the CPU .item() reads host memory and there is nothing to drain")

    def step(i: int) -> None:
        nonlocal acc
        for _ in range(iters):
            with ctx.label("compute"):
                s = (a @ b).sum()
            if variant == BOTTLENECK:
                with ctx.label("item_sync"):
                    s.item()
                    ctx.sync()
            else:
                acc = acc + s
            with ctx.label("host_bookkeeping"):
                host_work_ms(host_ms)
    return Work(step, info={"gemm": [n, n, n], "iterations": iters,
                            "unit_ms": round(unit_ms, 4), "host_ms": round(host_ms, 4)})


def make_launch_bound(ctx: Ctx, variant: str) -> Work:
    k, numel = ctx.size.tiny_kernels, ctx.size.tiny_numel
    x = torch.zeros(numel, device=ctx.dev)
    info = {"kernels_per_step": k, "numel": numel}

    def chain() -> None:
        for _ in range(k):
            x.add_(1.0)
    if variant == BOTTLENECK:
        return Work(lambda i: chain(), info=info)
    if not ctx.cuda:
        ctx.skip("CUDA graph capture and replay", "torch.cuda.graph needs CUDA; the CPU twin "
                 "runs the same eager loop")
        return Work(lambda i: chain(), info=info)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as the docs require
        chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()

    def replay(i: int) -> None:
        with ctx.label("graph_replay"):
            graph.replay()
    return Work(replay, info=info)


def _elementwise_chain(ops: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``ops`` elementwise ops cycling multiply, add, sin, relu: one kernel each in eager."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        for j in range(ops):
            r = j % 4
            x = x * 1.0001 if r == 0 else x + 0.5 if r == 1 else torch.sin(x) if r == 2 \
                else torch.relu(x)
        return x
    return fn


def make_unfused_elementwise(ctx: Ctx, variant: str) -> Work:
    x = _randn(ctx, ctx.size.chain_numel)
    fn = _elementwise_chain(ctx.size.chain_ops)
    info: dict[str, Any] = {"ops": ctx.size.chain_ops, "numel": ctx.size.chain_numel}
    if variant == TWIN:
        if ctx.cuda:
            fn = torch.compile(fn)  # type: ignore[assignment]
            t0 = time.perf_counter()
            fn(x)
            ctx.sync()
            info["compile_s"] = round(time.perf_counter() - t0, 3)
        else:
            ctx.skip("torch.compile fusion", "compiled here only on CUDA (Inductor's CPU "
                     "backend needs a C++ toolchain and minutes on a shared CPU); the CPU "
                     "twin runs the eager chain")

    def step(i: int) -> None:
        with ctx.label("elementwise_chain"):
            fn(x)
    return Work(step, info=info)


def _gemm_dtypes(ctx: Ctx) -> list[str]:
    out = ["fp32", "bf16"]
    if ctx.cuda:
        out.insert(1, "tf32")
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) >= (8, 9):
            out.append("fp8")
        else:
            ctx.skip("fp8 GEMMs", f"compute capability {major}.{minor} has no fp8 tensor cores")
    else:
        ctx.skip("tf32 GEMMs", "TF32 is a CUDA tensor-core mode")
        ctx.skip("fp8 GEMMs", "torch._scaled_mm needs an sm_89+ GPU")
    return out


def make_gemm_roofline(ctx: Ctx, variant: str) -> Work:
    cases: list[tuple[str, Callable[[], Any]]] = []
    gemms: list[dict[str, Any]] = []
    kineto = {"fp32": "float", "tf32": "float", "bf16": "c10::BFloat16",
              "fp8": "c10::Float8_e4m3fn"}
    for dt in _gemm_dtypes(ctx):
        for n in ctx.size.gemm_sizes:
            name = f"gemm_{dt}_{n}"
            op = "aten::mm"
            if dt == "fp8":
                a8 = _randn(ctx, n, n).to(torch.float8_e4m3fn)
                b8 = _randn(ctx, n, n).to(torch.float8_e4m3fn).t()  # column-major, as required
                one = torch.ones((), device=ctx.dev)
                op = "aten::_scaled_mm"

                def mm8(a8: torch.Tensor = a8, b8: torch.Tensor = b8,
                        one: torch.Tensor = one) -> Any:
                    return torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)
                cases.append((name, mm8))
            else:
                a = _randn(ctx, n, n, dtype=torch.bfloat16 if dt == "bf16" else torch.float32)
                b = torch.randn_like(a)
                tf32 = dt == "tf32"

                def mm(a: torch.Tensor = a, b: torch.Tensor = b, tf32: bool = tf32) -> Any:
                    torch.backends.cuda.matmul.allow_tf32 = tf32
                    return torch.mm(a, b)
                cases.append((name, mm))
            gemms.append({"range": name, "dtype": dt, "op": op, "input_dims": [[n, n], [n, n]],
                          "input_types": [kineto[dt]] * 2, "flops": 2.0 * n * n * n})

    def step(i: int) -> None:
        for name, fn in cases:
            with ctx.label(name):
                fn()
        torch.backends.cuda.matmul.allow_tf32 = False

    return Work(step, info={"gemms": gemms})


def _batches(ctx: Ctx, ms: float) -> Callable[[int], torch.Tensor]:
    rows, cols = ctx.size.batch_rows, ctx.size.batch_cols

    def make_batch(i: int) -> torch.Tensor:
        with ctx.label("make_batch"):
            time.sleep(ms / 1e3)  # decoding/augmentation in native code: releases the GIL
            return torch.randn(rows, cols)
    return make_batch


def make_input_starved(ctx: Ctx, variant: str) -> Work:
    n = ctx.size.unit_n
    a, b = _randn(ctx, n, n), _randn(ctx, n, n)
    unit_ms = timed_ms(ctx, lambda: a @ b)
    prep_ms = ctx.size.batch_factor * unit_ms
    make_batch = _batches(ctx, prep_ms)
    info = {"gemm": [n, n, n], "unit_ms": round(unit_ms, 4), "batch_prep_ms": round(prep_ms, 4),
            "batch": [ctx.size.batch_rows, ctx.size.batch_cols]}

    def compute(batch: torch.Tensor) -> None:
        with ctx.label("train_step"):
            x = batch.to(ctx.dev)
            (a @ b).add_(x.sum())

    if variant == BOTTLENECK:
        return Work(lambda i: compute(make_batch(i)), info=info)
    pool = ThreadPoolExecutor(max_workers=ctx.size.workers)
    ahead: list[Future[torch.Tensor]] = [pool.submit(make_batch, j)
                                         for j in range(ctx.size.workers)]
    nxt = ctx.size.workers

    def prefetched(i: int) -> None:
        nonlocal nxt
        batch = ahead.pop(0).result()
        ahead.append(pool.submit(make_batch, nxt))
        nxt += 1
        compute(batch)
    info["workers"] = ctx.size.workers
    return Work(prefetched, info=info, close=lambda: pool.shutdown(cancel_futures=True))


class ConvNet(nn.Module):
    """Two 3x3 convolutions and a linear head: cuDNN autotunes the convolutions."""

    def __init__(self, c: int, hw: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)
        self.head = nn.Linear(c * hw * hw, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.c2(F.relu(self.c1(x))))
        return self.head(x.flatten(1))


def make_warmup(ctx: Ctx, variant: str) -> Work:
    s = ctx.size
    model = ConvNet(s.conv_channels, s.conv_hw).to(ctx.dev).eval()
    x = _randn(ctx, s.conv_batch, s.conv_channels, s.conv_hw, s.conv_hw)
    fn: Callable[[torch.Tensor], torch.Tensor] = model
    if ctx.cuda:
        torch.backends.cudnn.benchmark = True
        # A cold compile every time: no FX-graph/autotune cache from an earlier run of
        # this scenario (on disk) or of the bottleneck (in memory) may shorten it.
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
        fn = torch.compile(model)  # type: ignore[assignment]
    else:
        ctx.skip("torch.compile and cuDNN autotuning", "CUDA-only here (see "
                 "unfused_elementwise); on the CPU the first step only pays eager lazy "
                 "initialisation")

    src = x.clone()

    def step(i: int) -> None:
        # The step starts with GPU work (the input refresh), so the attribution window
        # opens before the compile and the compile's idle time is inside it.
        with ctx.label("load_input"):
            x.copy_(src)
        with ctx.label("forward"), torch.inference_mode():
            fn(x)
    warm = 0 if variant == BOTTLENECK else 2
    compiles_in_profile = ctx.cuda and variant == BOTTLENECK
    return Work(step, warm_steps=warm, info={"input": list(x.shape),
                                             "compiled": ctx.cuda, "warm_steps": warm},
                no_stack_reason="torch.compile runs inside the profiled steps: the Python "
                "tracer would record every call of the compiler (millions of events)"
                if compiles_in_profile else None)


MAKERS: dict[str, Callable[[Ctx, str], Work]] = {
    "pageable_copy": make_pageable_copy,
    "host_sync": make_host_sync,
    "launch_bound": make_launch_bound,
    "unfused_elementwise": make_unfused_elementwise,
    "gemm_roofline": make_gemm_roofline,
    "input_starved": make_input_starved,
    "warmup": make_warmup,
}


@contextlib.contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX push/pop range (what nsys and ncu see in place of record_function)."""
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()


__all__ = ["MAKERS", "SIZES", "SWEEP", "Ctx", "Size", "Work", "nvtx_range"]
