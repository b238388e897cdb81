"""The fusion fix's saving against fused twins measured on an H200 (sample_traces/h200_recheck).

The shared ``unfused_elementwise`` twin is ``torch.compile``; under the profiler with
``with_stack`` its per-call Python wrapper is recorded call by call and its profiled step
says 50% where the eager trace predicts ~80%. These captures time the same chain fused three
ways (one jiterator kernel, one Triton kernel, torch.compile) with and without the profiler,
at the scenario's size (host-bound) and 16x it (GPU-bound). The prediction is of the run
without the profiler, so it is checked against the unprofiled medians.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

import traceparse
from traceparse.analyses.steps import step_windows
from traceparse.reports.payload import build_payload
from traceparse.reports.recommend import recommend

HERE = Path(__file__).resolve().parent.parent / "sample_traces" / "h200_recheck" / "fusion"
RUNS = {r["name"]: r for r in json.loads((HERE / "fusion_twins.json").read_text())["runs"]}
SMALL, LARGE = 1 << 21, 1 << 25


def _fusion(numel: int) -> tuple[float, list[str]]:
    """(predicted saving share of the window, fix ids in rank order) on the eager trace."""
    items: list[dict[str, Any]] = recommend(build_payload(
        traceparse.load(HERE / f"fusion_eager_n{numel}.json.gz")))["items"]
    hit = next(r for r in items if r["id"] == "fusion")
    return hit["saving_ns"] / hit["window_ns"], [r["id"] for r in items]


def _unprofiled_saving(variant: str, numel: int) -> float:
    eager = RUNS[f"fusion_eager_n{numel}"]["unprofiled"]["step_ms_median"]
    twin = RUNS[f"fusion_{variant}_n{numel}"]["unprofiled"]["step_ms_median"]
    return float(1 - twin / eager)


def _profiled_median_ns(variant: str, numel: int) -> float:
    w = step_windows(traceparse.load(HERE / f"fusion_{variant}_n{numel}.json.gz"))
    return float(statistics.median((w["end_ns"] - w["start_ns"]).to_list()))


def test_the_captures_are_what_the_readme_says() -> None:
    for numel in (SMALL, LARGE):
        for v in ("eager", "hand", "triton", "compile"):
            r = RUNS[f"fusion_{v}_n{numel}"]
            assert "error" not in r, r
            assert r["sizes"]["ops"] == 24 and r["sizes"]["numel"] == numel
            assert r["unprofiled"]["max_abs_diff_vs_eager"] < 1e-6  # the same chain
            tl = traceparse.load(HERE / f"fusion_{v}_n{numel}.json.gz")
            kernels = tl.gpu.height
            assert kernels == (6 * 24 if v == "eager" else 6), (v, numel, kernels)


@pytest.mark.parametrize("variant", ["hand", "triton", "compile"])
def test_host_bound_chain_prediction_matches_each_fused_twin(variant: str) -> None:
    # 2**21 floats: 24 kernels of ~3 µs each issued at ~11 µs per op; the fused kernel
    # (14-33 µs) runs at GPU speed, so the saving is the chain's issuing
    pred, ids = _fusion(SMALL)
    measured = _unprofiled_saving(variant, SMALL)
    assert 0.75 <= measured <= 0.85, measured
    assert abs(pred - measured) / measured <= 0.25, (pred, measured)
    assert "fusion" in ids[:2]


@pytest.mark.parametrize("variant", ["triton", "compile"])
def test_gpu_bound_chain_prediction_is_an_upper_bound_within_25pct(variant: str) -> None:
    # 2**25 floats: each eager kernel moves 268 MB in ~65 µs; the fused kernel is priced
    # at that bandwidth for the chain's one input and one output (~67 µs) but runs 204-211 µs:
    # six fp32 sin per element make it compute-bound, which the memory-bound eager kernels
    # cannot show. The prediction therefore over-estimates, by less than 25%.
    pred, ids = _fusion(LARGE)
    measured = _unprofiled_saving(variant, LARGE)
    assert ids[0] == "fusion"
    assert pred >= measured
    assert (pred - measured) / measured <= 0.25, (pred, measured)


def test_the_profiled_compile_twin_pays_the_profiler_not_the_fusion() -> None:
    # under the profiler the compiled twin's step is 3.5x the hand-fused one's although
    # without the profiler they are within 15%: the difference is the recorded Python of
    # torch.compile's wrapper, which the eager trace cannot show and the user does not pay
    compile_ns, hand_ns = _profiled_median_ns("compile", SMALL), _profiled_median_ns("hand", SMALL)
    assert compile_ns > 2.5 * hand_ns, (compile_ns, hand_ns)
    un_c = RUNS[f"fusion_compile_n{SMALL}"]["unprofiled"]["step_ms_median"]
    un_h = RUNS[f"fusion_hand_n{SMALL}"]["unprofiled"]["step_ms_median"]
    assert abs(un_c - un_h) / un_h < 0.15, (un_c, un_h)


def _training_twin(name: str) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    d = Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures" / "fusion" / name
    twin = json.loads((d / "fusion_train_twin.json").read_text())
    tl = traceparse.load(d / twin["eager_trace"])
    return twin, recommend(build_payload(tl))["items"], step_windows(tl).height


def test_training_step_fusion_against_compiled_twin() -> None:
    """The sweep's gpt2s training step at batch 32 on an H100 (GPU-bound, where the fix is
    the fusion alone; sample_traces/h100_captures/fusion/gpt2s_b32): eager 96.55 ms,
    torch.compile + AdamW(fused=True) 40.32 ms per step without the profiler (58.2%
    saved). The eager trace's fusion fix is first and predicts 52.1% profiler-free: within
    25%, and below the measurement (Inductor also fuses concatenations and neighbours the
    chain rule keeps apart).
    Its replayed eager step matches the unprofiled one within 3%, and every chain was
    priced from its op shapes."""
    twin, items, steps = _training_twin("gpt2s_b32")
    hit = items[0]
    assert hit["id"] == "fusion"
    measured = 1 - twin["fused_step_ms_median"] / twin["eager_step_ms_median"]
    predicted = hit["saving_unprofiled_ns"] / hit["window_unprofiled_ns"]
    assert abs(predicted - measured) <= 0.25 * measured and predicted < measured
    assert hit["window_unprofiled_ns"] / steps / 1e6 == pytest.approx(
        twin["eager_step_ms_median"], rel=0.03)
    assert "as long as the chain's longest" not in hit["evidence"][0]


def test_host_bound_training_step_fusion_against_compiled_twin() -> None:
    """gpt2s at batch 8 (host-bound; eager 76.41 ms, compiled + fused AdamW 32.07 ms
    unprofiled: 58.0% saved). torch.compile removes both the kernels' traffic and most of
    the per-op dispatch: the fusion fix (chains take the optimizer's per-parameter kernels
    and the small kernels between memory-bound ones, and their launches go with them)
    predicts 58.9%, within 25%; CUDA graphs, the dispatch mechanism alone, ranks first."""
    twin, items, _ = _training_twin("gpt2s_b8")
    ids = [r["id"] for r in items]
    assert ids[:2] == ["cuda-graphs", "fusion"]
    hit = items[1]
    measured = 1 - twin["fused_step_ms_median"] / twin["eager_step_ms_median"]
    predicted = hit["saving_unprofiled_ns"] / hit["window_unprofiled_ns"]
    assert abs(predicted - measured) <= 0.25 * measured
