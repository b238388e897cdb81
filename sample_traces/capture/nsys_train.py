#!/usr/bin/env python3
"""The sweep's GPT-2 training step for Nsight Systems: eager against the whole step in one
CUDA graph (``train_graph_twin.build``: gpt2s, seq 512, bf16 autocast, AdamW with
``capturable=True`` both ways).

usage: nsys_train.py --batch B --variant eager|graph [--steps 10] [--out SIDECAR.json]

As ``nsys_decode.py``: 10 timed steps before the capture range (one drain each), then the
profiled steps in NVTX ``step N`` ranges between ``cudaProfilerStart``/``Stop``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_decode import main
from train_graph_twin import build


def steps(batch: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """(eager step, its CUDA-graph replay)."""
    eager, capture = build(batch)
    return eager, capture()


if __name__ == "__main__":
    raise SystemExit(main(build=steps, tool="sample_traces/capture/nsys_train.py", steps=10,
                          timed_steps=10))
