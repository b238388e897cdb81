"""The CUDA-graph fix on Nsight Systems captures it was not written against: the sweep's
decoder and its gpt2s training step on an H100 under nsys, eager against the same step
replayed from one CUDA graph (``sample_traces/h100_captures/decode_nsys`` and
``train_nsys``, made by ``sample_traces/capture/nsys_decode.sh``). The twin is the fix,
measured: the decoder's median ``step N`` NVTX range (found without ``--steps``; each step
ends in a sync), the training step's median GPU period (no per-step sync: its host range
is only the issuing), against the eager run's. The prediction is read from the eager trace
alone."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

import traceparse
from traceparse.analyses.steps import gpu_periods, step_windows
from traceparse.reports.payload import build_payload
from traceparse.reports.recommend import recommend

CAPTURES = Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures"
DIR = CAPTURES / "decode_nsys"


def _median_step(tl: traceparse.Timeline) -> float:
    w = step_windows(tl)
    assert w.height == 20 and w["step"].to_list()[:2] == ["step 0", "step 1"]
    return statistics.median((w["end_ns"] - w["start_ns"]).to_list())


@pytest.mark.parametrize("batch", [1, 64])
def test_cuda_graphs_first_and_within_a_quarter_of_the_measured_twin(batch: int) -> None:
    eager = traceparse.load(DIR / f"decode_b{batch}_eager.sqlite.gz")
    graph = traceparse.load(DIR / f"decode_b{batch}_graph.sqlite.gz")
    measured = 1 - _median_step(graph) / _median_step(eager)
    assert measured > 0.5  # the capture's premise: b1 79.5%, b64 66.1%
    _check(eager, graph, measured)


@pytest.mark.parametrize("batch", [2, 8])
def test_training_step_cuda_graphs_within_a_quarter_of_the_measured_twin(batch: int) -> None:
    d = CAPTURES / "train_nsys"
    eager = traceparse.load(d / f"train_gpt2s_b{batch}_eager.sqlite.gz")
    graph = traceparse.load(d / f"train_gpt2s_b{batch}_graph.sqlite.gz")
    assert step_windows(eager).height == step_windows(graph).height == 10
    pe, pg = gpu_periods(eager), gpu_periods(graph)
    measured = 1 - statistics.median(pg) / statistics.median(pe)
    assert measured > 0.4  # b2 78.8%, b8 58.1%
    _check(eager, graph, measured)


def _check(eager: traceparse.Timeline, graph: traceparse.Timeline, measured: float) -> None:
    """CUDA graphs is the eager run's first fix, its predicted share of the window within a
    quarter of ``measured``; the graph twin's first fix is another."""
    items = recommend(build_payload(eager))["items"]
    assert items[0]["id"] == "cuda-graphs", [i["id"] for i in items]
    predicted = items[0]["saving_ns"] / items[0]["window_ns"]
    assert abs(predicted - measured) <= 0.25 * measured, (predicted, measured)
    twin = recommend(build_payload(graph))["items"]
    assert not twin or twin[0]["id"] != "cuda-graphs", [i["id"] for i in twin]
