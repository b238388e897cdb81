"""Phases and layer groups on a real ``gpt_profile.py`` capture (with_stack, with_modules,
profile_memory), run on the CPU here; the same checks with GPU time run on the H100/H200
captures in ``sample_traces/h100|h200`` once a GPU session has committed them.

Hand-worked expectations for the tiny run below (3 layers, batch 2, seq 32 -> prompt 16):
6 profiled steps = 2 ``train_step`` + 1 ``prefill`` + 3 ``decode_step`` (the script's own
record_function names); the prefill's first linear input is ``[2, 16, 64]`` -> 32 tokens,
a decode's ``[2, 1, 64]`` -> 2 tokens; every forward pass runs ``nn.Module: Block_0..2`` once.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import HAVE_TORCH
from traceparse.analyses import layers, phases

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "sample_traces" / "capture"
GPU_CAPTURES = sorted(p for d in ("h100", "h200")
                      for p in (REPO / "sample_traces" / d).glob("gpt*.json.gz"))


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not HAVE_TORCH:
        pytest.skip("PyTorch is not installed (not a traceparse dependency)")
    out = tmp_path_factory.mktemp("gpt") / "gpt.json.gz"
    subprocess.run([sys.executable, str(CAPTURE / "gpt_profile.py"), "--device", "cpu",
                    "--layers", "3", "--d-model", "64", "--heads", "4", "--seq", "32",
                    "--batch", "2", "--train-steps", "2", "--decode-steps", "3",
                    "--out", str(out)], check=True, capture_output=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    raw = json.loads(gzip.decompress(out.read_bytes()))
    side = json.loads(out.with_name("gpt.meta.json").read_text())
    return {"path": out, "raw": raw, "side": side}


def test_capture_records_stack_modules_memory(cpu_run: dict[str, Any]) -> None:
    prof = cpu_run["side"]["run"]["profiler"]
    assert (prof["with_stack"], prof["with_modules"], prof["profile_memory"]) == (True,) * 3
    ev = cpu_run["raw"]["traceEvents"]
    blocks = [e["name"] for e in ev if e.get("cat") == "python_function"
              and str(e.get("name", "")).startswith("nn.Module: Block_")]
    assert sorted(set(blocks)) == [f"nn.Module: Block_{i}" for i in range(3)]
    assert len(blocks) == 3 * 6                    # 3 layers x 6 forward passes
    assert any(e.get("name") == "[memory]" for e in ev)


def test_capture_phases(cpu_run: dict[str, Any]) -> None:
    st = phases.phase_steps(traceparse.load(cpu_run["path"]), attribution=False)
    assert st["phase"].to_list() == ["train"] * 2 + ["prefill"] + ["decode"] * 3
    assert st["phase_source"].unique().to_list() == ["name"]
    assert st["tokens"].to_list() == [None, None, 32, 2, 2, 2]
    assert st["tokens_source"].to_list()[2:] == ["shapes"] * 4


def test_capture_layer_groups_cpu(cpu_run: dict[str, Any]) -> None:
    # no GPU in this run: the layers own no kernel time, so keep_empty groups them by name
    g = layers.layer_groups(traceparse.load(cpu_run["path"]), keep_empty=True)
    blocks = g.filter(pl.col("layer") == "nn.Module: Block_{N}")
    # one group per parent path: under train_step, prefill and decode_step
    assert blocks.height == 3
    assert blocks["layers"].to_list() == [3, 3, 3]
    assert sorted(blocks["calls"].to_list()) == [1, 2, 3]  # prefill, train, decode steps
    assert blocks["same_structure"].to_list() == [True] * 3


@pytest.mark.skipif(not GPU_CAPTURES, reason="no GPU gpt_profile capture committed yet "
                    "(sample_traces/h100|h200, see tests/test_capture_gpu.py)")
@pytest.mark.parametrize("path", GPU_CAPTURES, ids=[p.name for p in GPU_CAPTURES])
def test_gpu_capture_layer_groups(path: Path) -> None:
    side = json.loads(path.with_name(path.name.replace(".json.gz", ".meta.json")).read_text())
    g = layers.layer_groups(traceparse.load(path))
    blocks = g.filter(pl.col("layer") == "nn.Module: Block_{N}")
    assert blocks.height >= 1
    assert set(blocks["layers"].to_list()) == {side["model"]["layers"]}
    # the same work per layer: equal kernel counts and the same op sequence
    assert (blocks["kernels_per_layer_min"] == blocks["kernels_per_layer_max"]).all()
    assert blocks["same_structure"].all()
