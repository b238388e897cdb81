#!/usr/bin/env python3
"""The sweep's decoder for Nsight Systems: eager against one CUDA-graph replay per step.

usage: nsys_decode.py --batch B --variant eager|graph [--steps 20] [--out SIDECAR.json]

The decoder is the sweep's (``sweep_models.decoder``: 12 layers, d 1024, bf16, static KV
cache 1024, each step ending in ``tok[0].item()``). After 5 warm-up steps it times 30 steps
(one drain each, as the sweep's truth files do) before the capture range, then runs
``--steps`` steps between ``cudaProfilerStart``/``Stop``, each inside an NVTX range
``step N`` (what an nsys user marks; traceparse finds such ranges without ``--steps``).
Run it under ``nsys profile --capture-range=cudaProfilerApi --capture-range-end=stop``
(``nsys_decode.sh``). The sidecar holds the batch, variant, GPU and the step times.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_models import decoder, timed


def main(argv: list[str] | None = None,
         build: Callable[[int], tuple[Callable[[], None], Callable[[], None]]] = decoder,
         tool: str = "sample_traces/capture/nsys_decode.py", steps: int = 20,
         timed_steps: int = 30) -> int:
    """Build (eager, graph) steps with ``build(batch)``, time ``timed_steps`` of the chosen
    one, then run ``--steps`` in NVTX ``step N`` ranges inside the capture range."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--variant", choices=("eager", "graph"), required=True)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    eager, graph = build(a.batch)
    step = eager if a.variant == "eager" else graph
    before = timed(step, timed_steps, warm=5)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for i in range(a.steps):
        torch.cuda.nvtx.range_push(f"step {i}")
        step()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    side = {"tool": tool, "batch": a.batch,
            "variant": a.variant, "profiled_steps": a.steps,
            "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "step_ms_before_capture": before,
            "step_ms_before_capture_median": statistics.median(before)}
    if a.out:
        a.out.write_text(json.dumps(side, indent=2) + "\n")
    print(json.dumps({k: v for k, v in side.items() if k != "step_ms_before_capture"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
