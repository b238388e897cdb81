#!/usr/bin/env python3
"""The sweep's decoder with and without its per-step host sync: the host-sync fix, measured.

usage: sync_twins.py OUTDIR [--batches 1 8 64] [--rounds R]

The decoder is the sweep's (``traces/gpu/sweep/capture_sweep.py``: 12 layers, d 1024, bf16,
static KV cache 1024). Its step ends in ``tok[0].item()``: the host reads the new token before
it issues the next step, so the GPU drains every step. The twin (``nosync``) keeps the token on
the device (the next step's embedding lookup reads it there) and never reads it back, which is
what "remove the sync" means for this program. Four variants per batch size, built once in one
process: ``eager`` and ``graph`` (one CUDA-graph replay per step), each ``sync`` and
``nosync``.

Step time without the profiler is measured the same way for every variant, so the variants
compare: ``n`` steps issued back to back, then one ``torch.cuda.synchronize()``, divided by
``n`` (a per-step drain would put the sync back into the twin). R rounds before and R rounds
after the profiled runs (20 steps each in ``decode_step_N`` ranges, ``record_shapes``, drained
at the end); each round times the four variants in turn, with a CPU-only host probe before
each, so a host that drifts moves the variants alike.

Writes ``OUTDIR/decode_b<B>_<eager|graph>_<sync|nosync>.json.gz`` and ``.truth.json``.
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

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_profile import write_trace  # scrubs machine identity, gzips
from sweep_models import D, L, T, capture_graph, decoder_forward, host_probe_us


def variants(b: int) -> dict[str, Callable[[], None]]:
    """The four steps of the sweep's decoder at batch ``b``."""
    fwd, tok = decoder_forward(b)
    graph, nxt = capture_graph(fwd)

    def eager_sync() -> None:
        tok.copy_(fwd())
        tok[0].item()

    def eager_nosync() -> None:
        tok.copy_(fwd())

    def graph_sync() -> None:
        graph.replay()
        tok.copy_(nxt)
        tok[0].item()

    def graph_nosync() -> None:
        graph.replay()
        tok.copy_(nxt)
    return {"eager_sync": eager_sync, "eager_nosync": eager_nosync,
            "graph_sync": graph_sync, "graph_nosync": graph_nosync}


def rounds(fn: Callable[[], None], r: int, n: int = 30) -> list[dict[str, float]]:
    """``r`` rounds of ``n`` steps back to back, drained once: ms per step, host probe."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(r):
        probe = host_probe_us()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append({"step_ms": (time.perf_counter() - t) * 1e3 / n, "host_probe_us": probe})
    return out


def interleaved(fns: dict[str, Callable[[], None]], r: int) -> dict[str, list[dict[str, float]]]:
    """``r`` rounds, each timing every variant once in turn (so a drifting host moves all
    variants alike): ``{variant: [round, ...]}``."""
    out: dict[str, list[dict[str, float]]] = {name: [] for name in fns}
    for _ in range(r):
        for name, fn in fns.items():
            out[name] += rounds(fn, 1)
    return out


def profiled(b: int, name: str, fn: Callable[[], None], out: Path) -> str:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True) as prof:
        for i in range(20):
            with record_function(f"decode_step_{i}"):
                fn()
        torch.cuda.synchronize()
    trace = f"decode_b{b}_{name}.json.gz"
    write_trace(prof, out / trace, add_flops=False)
    return trace


def run(b: int, out: Path, r: int) -> None:
    fns = variants(b)
    before = interleaved(fns, r)
    traces = {name: profiled(b, name, fn, out) for name, fn in fns.items()}
    after = interleaved(fns, r)
    for name in fns:
        steps = [x["step_ms"] for x in before[name] + after[name]]
        kind, sync = name.split("_")
        truth = {"case": "decode", "layers": L, "d_model": D, "batch": b, "kv_len": T,
                 "variant": kind, "sync": sync, "step_ms_median": statistics.median(steps),
                 "before_ms_median": statistics.median(x["step_ms"] for x in before[name]),
                 "after_ms_median": statistics.median(x["step_ms"] for x in after[name]),
                 "before": before[name], "after": after[name],
                 "note": "unprofiled ms per step: 30 steps issued back to back, one drain; "
                         f"{r} rounds right before and {r} right after the profiled runs, "
                         "each round timing the 4 variants in turn, same process; "
                         "host_probe_us: median of 2,000 CPU-only aten::view calls",
                 "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                 "trace": traces[name]}
        (out / f"decode_b{b}_{name}.truth.json").write_text(json.dumps(truth, indent=1))
        print(f"b{b} {name}", {k: round(v, 4) for k, v in truth.items()
                               if k.endswith("median")}, flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for b in a.batches:
        try:
            run(b, out, a.rounds)
        except Exception:
            traceback.print_exc()
            print("FAILED batch", b, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
