"""``predict --scale``: the input pipeline's host time grows with the batch
(analyses/scale_host.py; docs/calibration.md "Predicting another batch")."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, ranges, timeline

from traceparse import load
from traceparse.analyses.calibrate import calibrate
from traceparse.analyses.scale import predict_scaled
from traceparse.analyses.scale_host import loader_stretches, loader_time
from traceparse.timeline import Timeline

US = 1000


def test_loader_time_is_the_stretches_less_the_recording_inside() -> None:
    # stretches [0, 60) and [100, 130); recorded events at 10 and 20 (inside), 70 (outside),
    # 1 each: before 5 -> 5; before 65 -> 60 - 2 = 58; before 120 -> 80 - 2 = 78; before
    # 200 -> 90 - 2 = 88
    st = (np.array([0, 100]), np.array([60, 130]))
    got = loader_time(st, np.array([10, 20, 70]), 1.0, np.array([5, 65, 120, 200]))
    assert got.tolist() == [5, 58, 78, 88]
    assert loader_time(None, None, 1.0, np.array([50])).tolist() == [0]
    assert loader_time(st, None, 1.0, np.array([50])).tolist() == [50]


def _steps(loader: str, n: int = 4) -> Timeline:
    """``n`` steps of 100 us on thread 2: ``loader`` [0, 60), a launch call [60, 65), its
    kernel [70, 80); the ProfilerStep range is the step. A host-bound loop: the step's time
    is its host time, 100 us."""
    g, a, r = [], [], []
    for s in range(n):
        t0 = s * 100 * US
        r += [{"kind": "profiler_step", "name": f"ProfilerStep#{s}", "start_ns": t0,
               "end_ns": t0 + 100 * US},
              {"kind": "user_annotation", "name": loader, "start_ns": t0,
               "end_ns": t0 + 60 * US}]
        a.append({"name": "cudaLaunchKernel", "start_ns": t0 + 60 * US,
                  "end_ns": t0 + 65 * US, "correlation_id": s + 1})
        g.append({"start_ns": t0 + 70 * US, "end_ns": t0 + 80 * US, "name": "k",
                  "correlation_id": s + 1})
    return timeline(gpu=gpu(g), api=api(a), ranges=ranges(r))


def test_a_loader_on_the_critical_path_grows_the_step() -> None:
    # make_batch is data loading: at 2x the batch it takes 120 us, and every later host
    # instant moves 60 us later per step before it: each step 100 -> 160 us; at 0.5x
    # 30 us, each step 70 us. A range of the same length that loads nothing stays.
    tl = _steps("make_batch")
    assert {k: (v[0].tolist(), v[1].tolist()) for k, v in loader_stretches(tl).items()} == {
        (0, 1): ([0, 100 * US, 200 * US, 300 * US], [60 * US, 160 * US, 260 * US, 360 * US])}
    cal = calibrate(tl)
    one, two, half = (predict_scaled(tl, cal, f) for f in (1.0, 2.0, 0.5))
    assert one["predicted_step_ns"] == 100 * US
    assert two["predicted_step_ns"] == 160 * US
    assert half["predicted_step_ns"] == 70 * US
    assert (one["input_pipeline_ns"], two["input_pipeline_added_ns"],
            half["input_pipeline_added_ns"]) == (240 * US, 240 * US, -120 * US)
    other = _steps("bookkeeping")
    assert predict_scaled(other, calibrate(other), 2.0)["predicted_step_ns"] == 100 * US


@pytest.mark.shared
def test_input_starved_scenario_grows_by_its_loader_per_step() -> None:
    """``scenarios/input_starved-bottleneck``: each step's ``make_batch`` range on the
    launching thread (JSON: 6 ranges) holds the host while the GPU waits: at 2x the batch
    the predicted step grows by the profiler-free loader time per step."""
    path = TRACES / "gpu" / "scenarios" / "input_starved-bottleneck.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    tl = load(path)
    cal = calibrate(tl)
    one, two = predict_scaled(tl, cal, 1.0), predict_scaled(tl, cal, 2.0)
    per_step = one["input_pipeline_ns"] / len(one["steps"])
    assert per_step > 0.5 * one["predicted_step_ns"]  # the loader dominates the step
    grew = two["predicted_step_ns"] - one["predicted_step_ns"]
    assert abs(grew - per_step) < 0.02 * per_step
