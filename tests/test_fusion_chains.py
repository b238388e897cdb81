"""Issue 24: which kernels the fusion fix chains, and what the fused kernel costs.

Generated timelines with op shapes (as a torch.profiler trace with ``record_shapes`` writes
them) and hand-computed answers; one process, one stream, microseconds. Every op has one
float input of ``n`` elements, so its kernel moves ``4n`` read + ``4n`` written = ``8n``
bytes. No GPU name: the memory-bound rate is half the trace's highest, here half of 2 TB/s
(2,000 B/ns).
"""

from __future__ import annotations

import json

import polars as pl

from traceparse import schema
from traceparse.analyses.mechanisms import fusion_chains, replay_args
from traceparse.timeline import Timeline

US = 1000
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add>"
RED = "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def _tl(kernels: list[tuple[str, int, float, float, float]]) -> Timeline:
    """kernels: (name, elements of the op's input, kernel start, kernel end, launch call
    length), in launch order; call i starts at 10*i us, its kernel runs where given."""
    gpu, api, ops = [], [], []
    for i, (name, n, start, end, call) in enumerate(kernels):
        gpu.append({"rank": 0, "kind": "kernel", "category": "compute",
                    "start_ns": int(start * US), "end_ns": int(end * US),
                    "dur_ns": int((end - start) * US), "device_id": 0, "stream_id": 7,
                    "process_id": 1, "correlation_id": i + 1, "external_id": i + 1,
                    "name": name})
        api.append({"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel",
                    "start_ns": 10 * i * US, "end_ns": int((10 * i + call) * US),
                    "dur_ns": int(call * US), "process_id": 1, "thread_id": 1,
                    "correlation_id": i + 1})
        ops.append({"rank": 0, "kind": "cpu_op", "name": "aten::op",
                    "start_ns": 10 * i * US - 500, "end_ns": int((10 * i + call) * US) + 500,
                    "dur_ns": int(call * US) + 1000, "process_id": 1, "thread_id": 1,
                    "external_id": i + 1, "input_dims": json.dumps([[n]]),
                    "input_types": json.dumps(["float"])})
    return Timeline(gpu=schema.conform("gpu", pl.DataFrame(gpu)),
                    api=schema.conform("api", pl.DataFrame(api)),
                    ranges=schema.conform("ranges", pl.DataFrame(ops))).validate()


M = 1_000_000  # 8 MB per kernel: at 4 us that is 2,000 B/ns, the trace's highest rate


def _trace(third: tuple[str, int, float]) -> Timeline:
    """K0, K1 elementwise on M elements at 2,000 B/ns (memory-bound); K2 = ``third`` (name,
    elements, duration in us) after a 5 us launch call; K3 elementwise on M/4 elements
    (2 MB at 2,000 B/ns); a GEMM; then L0-L2, three 2 us kernels on 16 elements (128 B: 0.064
    B/ns) each behind a 5 us launch call."""
    name, n, dur = third
    return _tl([(EW, M, 100, 104, 5), (EW, M, 104, 108, 5), (name, n, 108, 108 + dur, 5),
                (EW, M // 4, 130, 131, 5), (GEMM, M, 131, 200, 5),
                (EW, 16, 200, 202, 5), (EW, 16, 202, 204, 5), (EW, 16, 204, 206, 5)])


def test_a_reduction_below_the_rate_chains_and_bounds_the_fused_kernel() -> None:
    """K2 is a reduction of the same M elements lasting 10 us (800 B/ns, below the rate).
    K0-K3 chain (K0, K1 and K3 are memory-bound); L0-L2 do not (no memory-bound kernel:
    no traffic for fusion to save, their launches are CUDA graphs' ground). Distinct
    bytes: the run on M elements (K0-K2) moves K0's 8 MB, the run on M/4 (K3) 2 MB: 10 MB
    at the memory-bound kernels' median 2,000 B/ns = 5 us, but the reduction lasts 10 us,
    so the fused kernel takes 10 us, placed on the chain's last kernel."""
    tl = _trace((RED, M, 10))
    assert fusion_chains(tl)["_i"].to_list() == [0, 1, 2, 3]
    args, notes = replay_args(tl, "fusion")
    assert args is not None
    assert (args["durations"] // US).to_list() == [0, 0, 0, 10, 69, 2, 2, 2]
    assert "no shorter than their slowest kernel below that rate" in notes[0]
    # where to find it (names cut at 70 characters): K0's start is the first GPU activity;
    # 4+4+10+1 us of kernels before
    assert notes[1] == (
        "the largest saving: 4 kernels from at::native::vectorized_elementwise_kernel<4, "
        "at::native::CUDAFunctor_… to at::native::vectorized_elementwise_kernel<4, "
        "at::native::CUDAFunctor_… (rank 0, stream 7, 0.000 ms after the rank's first GPU "
        "activity): 19.0 µs of kernel time fused into 10.0 µs")


def test_a_launch_bound_member_fuses_with_its_memory_bound_neighbours() -> None:
    """K2 is a 3 us kernel on 16 elements behind a 5 us launch call: launch-bound, but its
    neighbours are memory-bound, so the chain takes it. Runs: M (8 MB), 16 (128 B), M/4
    (2 MB): 10,000,128 B at 2,000 B/ns = 5,000 ns (rounded), longer than K2's 3 us."""
    args, _ = replay_args(_trace((EW, 16, 3)), "fusion")
    assert args is not None
    assert args["durations"].to_list()[:4] == [0, 0, 0, 5_000]


def test_launch_bound_kernels_only_make_no_chain() -> None:
    """K0 alone (a chain needs two kernels), a GEMM, then L0-L2, each 2 us behind a 5 us
    launch call at 0.064 B/ns: no chain, no fusion fix."""
    tl = _tl([(EW, M, 100, 104, 5), (GEMM, M, 104, 200, 5), (EW, 16, 200, 202, 5),
              (EW, 16, 202, 204, 5), (EW, 16, 204, 206, 5)])
    assert fusion_chains(tl).height == 0
    assert replay_args(tl, "fusion") == (None, [])


def test_kernels_below_the_rate_only_make_no_chain() -> None:
    """K0 (memory-bound, alone before a GEMM), then two reductions of M elements lasting
    10 us each (800 B/ns) behind 5 us launch calls: they outlast their launches but move no
    bytes at memory speed, so nothing chains."""
    tl = _tl([(EW, M, 100, 104, 5), (GEMM, M, 104, 200, 5), (RED, M, 200, 210, 5),
              (RED, M, 210, 220, 5)])
    assert fusion_chains(tl).height == 0


def _noshape(kernels: list[tuple[str, float, float, float]]) -> Timeline:
    """As :func:`_tl` without the ops (no shapes: an nsys capture): (name, start, end, call)."""
    tl = _tl([(name, 1, start, end, call) for name, start, end, call in kernels])
    return Timeline(gpu=tl.gpu, api=tl.api).validate()


def test_without_shapes_kernels_longer_than_a_fixed_cost_chain() -> None:
    """Three 3.5 µs elementwise kernels behind 6 µs launch calls (the unfused scenario under
    nsys on H100): each outlasts a kernel's fixed cost (2 µs), so they chain although the
    profiled launch calls outlast them; the fused kernel is as long as the longest (3.5 µs)."""
    tl = _noshape([(EW, 100, 103.5, 6), (EW, 103.5, 107, 6), (EW, 107, 110.5, 6)])
    assert fusion_chains(tl)["_i"].to_list() == [0, 1, 2]
    args, _ = replay_args(tl, "fusion")
    assert args is not None and args["durations"].to_list() == [0, 0, 3_500]


def test_without_shapes_fixed_cost_kernels_behind_longer_calls_do_not_chain() -> None:
    """1.5 µs kernels behind 5 µs launch calls are launch-bound (CUDA graphs' ground); the
    same kernels behind 1 µs calls outlast their launches and chain."""
    short = [(EW, 100, 101.5), (EW, 101.5, 103), (EW, 103, 104.5)]
    assert fusion_chains(_noshape([(*k, 5) for k in short])).height == 0
    assert fusion_chains(_noshape([(*k, 1) for k in short]))["_i"].to_list() == [0, 1, 2]
