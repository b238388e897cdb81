#!/usr/bin/env python3
"""A measured twin for the CUDA-graph fix on small-batch training: the sweep's GPT-2 training
step eager and captured whole in one CUDA graph, each profiled and timed without the profiler.

usage: train_graph_twin.py OUTDIR [--batch B ...]

The step is the sweep's (``traces/gpu/sweep/capture_sweep.py``: gpt2s, seq 512, bf16
autocast, AdamW), with what whole-step capture needs and nothing else: AdamW with
``capturable=True`` in both variants (so the eager run is the same optimizer), autocast
without its weight cache, gradients zeroed with ``set_to_none=False``. For each batch:
``train_gpt2s_b<B>_eager`` and ``..._graph`` (Kineto traces, 3 steps after 1 profiler warm-up
step, ``record_shapes`` as in the sweep) and ``*.truth.json`` (unprofiled step times, median
of 10 after 3 warm-up steps, device drained after each). A capture that fails is recorded in
``graph_twin.json`` with its error.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_models import capture_graph, gpt2_train_step, profile_training, timed


def build(batch: int) -> tuple[Callable[[], None], Callable[[], Callable[[], None]]]:
    """(eager step, a function that captures the step and returns its replay)."""
    step = gpt2_train_step("gpt2s", batch, capturable=True)

    def capture() -> Callable[[], None]:
        return capture_graph(step)[0].replay
    return step, capture


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--batch", type=int, action="append")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for b in a.batch or [2, 8]:
        step, capture = build(b)
        for variant in ("eager", "graph"):
            name = f"train_gpt2s_b{b}_{variant}"
            try:
                fn = step if variant == "eager" else capture()
                ts = timed(fn, 10)
                profile_training(fn, out / f"{name}.json.gz")
                truth = {"case": "train", "model": "gpt2s", "batch": b, "seq": 512,
                         "variant": variant, "step_ms_median": statistics.median(ts),
                         "step_ms_all": [round(x, 4) for x in ts],
                         "note": "unprofiled step times (AdamW capturable=True both ways)",
                         "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                         "trace": f"{name}.json.gz"}
                (out / f"{name}.truth.json").write_text(json.dumps(truth, indent=1))
                runs.append({"name": name, "step_ms_median": truth["step_ms_median"]})
            except Exception as e:
                traceback.print_exc()
                runs.append({"name": name, "error": f"{type(e).__name__}: {e}"[:500]})
            print(json.dumps(runs[-1]), flush=True)
        torch.cuda.empty_cache()
    (out / "graph_twin.json").write_text(json.dumps(
        {"tool": "sample_traces/capture/train_graph_twin.py",
         "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": runs},
        indent=1))


if __name__ == "__main__":
    main()
