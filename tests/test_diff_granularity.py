"""diff's category level compares time per step, not per activity: generated pairs whose
work is recorded at different granularity (five kernels vs one fused kernel, kernels vs one
whole-graph activity), with hand-computed answers, and the nsys eager/graph decode captures.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from traceparse import load, schema
from traceparse.analyses.diff import Thresholds, category_per_step, compare, diff
from traceparse.analyses.diff_tail import step_walls
from traceparse.reports import diff as render
from traceparse.timeline import Timeline

STEP = 1000  # ns
DECODE = Path(__file__).resolve().parent.parent / "sample_traces" / "h100_captures" / "decode_nsys"


def _run(per_step: list[tuple[str, str, int]], *, steps: bool = True, n: int = 6) -> Timeline:
    """``n`` steps of ``STEP`` ns. Each step launches the activities ``per_step`` (kind,
    name, duration), one after another: call k at +100 + 20k for 10 ns, activity at +200
    + 60k. ``steps``: ProfilerStep#N ranges over each step."""
    gpu, api, rng = [], [], []
    corr = 0
    for s in range(n):
        t0 = s * STEP
        if steps:
            rng.append({"rank": 0, "kind": "profiler_step", "name": f"ProfilerStep#{s}",
                        "start_ns": t0, "end_ns": t0 + STEP, "dur_ns": STEP,
                        "process_id": 1, "thread_id": 1})
        for k, (kind, name, dur) in enumerate(per_step):
            corr += 1
            call = "cudaGraphLaunch" if kind == "graph" else "cudaLaunchKernel"
            api.append({"rank": 0, "kind": "runtime", "name": call,
                        "start_ns": t0 + 100 + 20 * k, "end_ns": t0 + 110 + 20 * k,
                        "dur_ns": 10, "process_id": 1, "thread_id": 1,
                        "correlation_id": corr})
            st = t0 + 200 + 60 * k
            gpu.append({"rank": 0, "kind": kind, "category": "compute", "start_ns": st,
                        "end_ns": st + dur, "dur_ns": dur, "device_id": 0, "stream_id": 7,
                        "process_id": 1, "correlation_id": corr, "name": name})
    tables = {"gpu": schema.conform("gpu", pl.DataFrame(gpu)),
              "api": schema.conform("api", pl.DataFrame(api))}
    if rng:
        tables["ranges"] = schema.conform("ranges", pl.DataFrame(rng))
    return Timeline(**tables).validate()


EAGER = [("kernel", f"k{i}", 50) for i in range(5)]  # 250 ns of compute per step


def _cat(d: pl.DataFrame, name: str = "compute") -> dict[str, object]:
    r = d.filter((pl.col("level") == "category") & (pl.col("name") == name))
    assert r.height == 1, d
    return r.row(0, named=True)


def test_category_time_per_step_by_launching_call() -> None:
    tl = _run(EAGER, n=2)
    got = category_per_step(tl, step_walls(tl))
    # every step launched 5 x 50 ns of compute
    assert got.to_dicts() == [{"level": "category", "name": "compute", "dur_ns": 250}] * 2


def test_fused_kernel_same_time_per_step_is_not_a_regression() -> None:
    # per activity: median 50 -> 250 ns (+400 %); per step: 250 -> 250 ns, p = 1, no flag
    base, new = _run(EAGER), _run([("kernel", "fused", 250)])
    r = _cat(diff(base, new))
    assert (r["per"], r["base_median_ns"], r["new_median_ns"]) == ("step", 250.0, 250.0)
    assert r["flag"] == "" and r["delta_pct"] == 0.0
    c = compare(base, new, thresholds=Thresholds(time_pct=5.0))
    assert c.verdict == "PASS"
    # ... while a real slowdown per step is still flagged: 250 -> 300 ns in every step
    r = _cat(diff(base, _run([("kernel", "fused", 300)])))
    assert (r["new_median_ns"], r["delta_pct"], r["flag"]) == (300.0, 20.0, "regression")


def test_without_steps_categories_stay_per_activity() -> None:
    base, new = _run(EAGER, steps=False), _run([("kernel", "fused", 250)], steps=False)
    r = _cat(diff(base, new))
    assert (r["per"], r["base_median_ns"], r["new_median_ns"]) == ("instance", 50.0, 250.0)
    assert r["flag"] == "regression"


def test_whole_graph_activity_is_not_comparable_and_not_gated() -> None:
    # one graph activity spans 320 ns (its kernels' 250 plus idle between them)
    base, new = _run(EAGER), _run([("graph", "CUDA graph 1", 320)])
    c = compare(base, new, names=("eager", "graph"), thresholds=Thresholds(time_pct=5.0))
    r = _cat(c.time)
    assert (r["base_median_ns"], r["new_median_ns"], r["flag"]) == (250.0, 320.0,
                                                                    "not comparable")
    assert c.verdict == "PASS"
    assert any(n.startswith("time: graph records each CUDA-graph replay") for n in c.notes)
    rows = render.gated_rows(c).filter(pl.col("level") == "category")
    assert rows["metric"].to_list() == ["median_per_step_ns"]


@pytest.mark.parametrize("batch", [1, 64])
def test_nsys_eager_vs_graph_decode_passes_a_5pct_gate(batch: int) -> None:
    # the H100 nsys decode pair: 20 NVTX steps each; the graph trace records one activity
    # per replay. Per activity its compute median was +19,832 % (b1) and the gate failed.
    eager = load(DECODE / f"decode_b{batch}_eager.sqlite.gz")
    graph = load(DECODE / f"decode_b{batch}_graph.sqlite.gz")
    c = compare(eager, graph, thresholds=Thresholds(time_pct=5.0))
    assert c.verdict == "PASS"
    step = c.time.filter(pl.col("level") == "step").row(0, named=True)
    assert step["flag"] == "improvement" and step["delta_pct"] < -50
    comp = _cat(c.time)
    assert comp["per"] == "step" and comp["flag"] == "not comparable"
    assert (comp["n_base"], comp["n_new"]) == (20, 20)
    # the per-step compute is the steps' kernel time: within 10 % of the graph spans
    assert abs(comp["new_median_ns"] / comp["base_median_ns"] - 1) < 0.10
