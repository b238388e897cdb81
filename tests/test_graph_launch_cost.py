"""The profiler's cost inside CUDA-graph launches (analyses/profiler_cost.py
``graph_launch_costs``; docs/calibration.md "Graph launches under the profiler"): a generated
trace with a hand-computed replay, then the committed H100 graph decode runs against their
step times measured without the profiler."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceparse import schema
from traceparse.analyses import profiler_cost, replay_host, scale
from traceparse.analyses.calibrate import calibrate
from traceparse.analyses.replay import predicted
from traceparse.links import launch_join
from traceparse.timeline import Timeline

US = 1000
H100 = Path(__file__).resolve().parents[1] / "sample_traces" / "h100_captures" / "sweep"


def _graph_tl() -> Timeline:
    """Step [0, 290) us. A 5 us cudaMemcpyAsync [10, 15) copies on stream 7 [16, 18); a
    cudaGraphLaunch [20, 120) whose three kernels run [125, 175), [176, 226), [227, 277)
    on stream 7 (the first starts 5 us after the call returned, as under torch.profiler);
    a cudaStreamSynchronize [121, 280)."""
    def rows(r: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"rank": 0, "process_id": 1, **x, "start_ns": x["start_ns"] * US,
                 "end_ns": x["end_ns"] * US, "dur_ns": (x["end_ns"] - x["start_ns"]) * US}
                for x in r]

    api = rows([{"kind": "runtime", "name": "cudaMemcpyAsync", "start_ns": 10, "end_ns": 15,
                 "thread_id": 1, "correlation_id": 1},
                {"kind": "runtime", "name": "cudaGraphLaunch", "start_ns": 20, "end_ns": 120,
                 "thread_id": 1, "correlation_id": 2},
                {"kind": "runtime", "name": "cudaStreamSynchronize", "start_ns": 121,
                 "end_ns": 280, "thread_id": 1, "correlation_id": 3}])
    gpu = rows([{"kind": "memcpy", "category": "memory", "name": "Memcpy HtoD",
                 "start_ns": 16, "end_ns": 18, "device_id": 0, "stream_id": 7,
                 "correlation_id": 1}]
               + [{"kind": "kernel", "category": "compute", "name": f"k{i}", "start_ns": s,
                   "end_ns": e, "device_id": 0, "stream_id": 7, "correlation_id": 2}
                  for i, (s, e) in enumerate([(125, 175), (176, 226), (227, 277)])])
    ranges = rows([{"kind": "profiler_step", "name": "ProfilerStep#1", "start_ns": 0,
                    "end_ns": 290, "thread_id": 1}])
    src = pl.DataFrame([{"rank": 0, "file": "gen.json", "format": "kineto-json"}])
    return Timeline(gpu=schema.conform("gpu", pl.DataFrame(gpu)),
                    api=schema.conform("api", pl.DataFrame(api)),
                    ranges=schema.conform("ranges", pl.DataFrame(ranges)),
                    sources=schema.conform("sources", src)).validate()


def test_graph_launch_excess_moves_the_graphs_kernels() -> None:
    """Excess = the graph launch's 100 us less the process's ordinary launch call (the 5 us
    copy call): 95 us. Replayed without it (recorded ops priced at 0 to isolate it): the
    copy stays [16, 18); the graph's first kernel reads the removed time at the call's
    return (120 - 95 = 25 us before its latency ends): 20 + 105 - 95 = 30 -> [30, 80);
    the queued kernels keep their 1 us gaps: [81, 131), [132, 182)."""
    tl = _graph_tl()
    g = profiler_cost.graph_launch_costs(tl)
    assert g.select("start_ns", "nodes", "excess_ns").rows() == [(20 * US, 3, 95 * US)]
    ev = profiler_cost.advance_fn(tl)
    costs = profiler_cost.event_costs(tl, per_event_ns=0.0)
    assert ev[(0, 1)].tolist() == [0, 20 * US] and costs[(0, 1)].tolist() == [0.0, 95e3]
    plain = predicted(tl)
    assert (plain["pred_end_ns"] // US).to_list() == [18, 175, 226, 277]
    got = predicted(tl, profiler=(ev, costs))
    assert (got["pred_end_ns"] // US).to_list() == [18, 80, 131, 182]
    # predict's engine gives the same ends
    rep = replay_host.replay_host(
        tl, advance=lambda k, t: profiler_cost.advance(ev.get(k), t, costs.get(k, 0.0)))
    assert (rep.pred_end // US).tolist() == [18, 80, 131, 182]
    # the overhead figure carries it, outside the per-op band
    # the GPU ran nothing from the copy's end (18) to the first kernel (125): the whole
    # excess idled it
    assert profiler_cost.graph_launch_gpu_wait(tl) == (1, 95 * US)
    pc = profiler_cost.profiler_cost(tl, per_event_ns=0.0)
    assert (pc["graph_launches"], pc["graph_launch_ns"]) == (1, 95 * US)
    assert pc["overhead_low_ns"] == pc["overhead_high_ns"] == 95 * US


def test_no_graph_launch_no_cost() -> None:
    """An nsys export (not torch.profiler) has no graph-launch profiler cost."""
    tl = _graph_tl()
    src = pl.DataFrame([{"rank": 0, "file": "gen.sqlite", "format": "nsys-sqlite"}])
    nsys = Timeline(**{**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__},
                       "sources": schema.conform("sources", src)}).validate()
    assert profiler_cost.graph_launch_costs(nsys).height == 0
    assert profiler_cost.advance_fn(nsys) == {}


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_h100_graph_decode_predicts_its_unprofiled_step(batch: int) -> None:
    """Held-out H100 captures (the rule was found on the shared H200 graph runs): each
    graph launch's first kernel starts after the call returned (the trace's own evidence
    that the GPU waited for the call), and the profiler-free self-prediction lands within
    3% of the step measured without the profiler (profiled steps were 6-26% above it)."""
    from traceparse.kineto.reader import read

    tl = read(H100 / f"decode_b{batch}_graph.json.gz")
    lj = launch_join(tl).filter(pl.col("api_name").cast(pl.String).str.contains("GraphLaunch"))
    first = lj.group_by("api_start_ns").agg(pl.col("api_end_ns").first(),
                                            pl.col("start_ns").min())
    assert first.height >= 10
    assert (first["start_ns"] >= first["api_end_ns"]).mean() >= 0.9  # type: ignore[operator]
    truth = json.loads((H100 / f"decode_b{batch}_graph.truth.json").read_text())
    want = truth["graph_step_ms_median"] * 1e6
    r = scale.predict_scaled(tl, calibrate(tl), 1.0, step_regex=r"^decode_step_\d+$")
    assert r["profiler"]["graph_launches"] == first.height
    assert abs(r["predicted_step_ns"] / want - 1) < 0.03, (r["predicted_step_ns"], want)
    assert r["profiled_step_ns"] > want * 1.05


def test_first_launch_of_a_graph_is_capped_at_its_median() -> None:
    """Two launches of the same 3-node graph: the first lasts 300 us (it uploads the
    graph), the second 100 us; ordinary call 5 us. Excesses 295 and 95 us; the first is
    capped at their median, 195 us (its upload is the program's, not the profiler's)."""
    tl = _graph_tl()
    api, gpu = tl.api.to_dicts(), tl.gpu.to_dicts()
    first = next(r for r in api if r["name"] == "cudaGraphLaunch")
    first["end_ns"], first["dur_ns"] = first["start_ns"] + 300 * US, 300 * US
    api.append({**first, "start_ns": 400 * US, "end_ns": 500 * US, "dur_ns": 100 * US,
                "correlation_id": 9})
    gpu += [{**k, "start_ns": k["start_ns"] + 400 * US, "end_ns": k["end_ns"] + 400 * US,
             "correlation_id": 9} for k in gpu if k["correlation_id"] == 2]
    two = Timeline(**{**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__},
                      "api": schema.conform("api", pl.DataFrame(api)),
                      "gpu": schema.conform("gpu", pl.DataFrame(gpu))}).validate()
    g = profiler_cost.graph_launch_costs(two)
    assert g.select("start_ns", "excess_ns").rows() == [(20 * US, 195 * US),
                                                        (400 * US, 95 * US)]


def test_verdict_names_the_graph_launch_recording() -> None:
    """A compute-bound graph decode run says how long the GPU waited for its graph launches'
    recording (at most the excess the replays remove); the eager twin says nothing."""
    from traceparse.analyses.summary import summarize
    from traceparse.kineto.reader import read
    from traceparse.units import duration

    tl = read(H100 / "decode_b1_graph.json.gz")
    n, x = profiler_cost.graph_launch_gpu_wait(tl)
    assert 0 < x <= int(profiler_cost.graph_launch_costs(tl)["excess_ns"].sum())
    v = summarize(tl)["verdict"]
    assert (f"under the profiler the GPU waited {duration(x)}") in v, v
    assert f"for {n} graph launches recording their kernel nodes" in v
    eager = summarize(read(H100 / "decode_b1_eager.json.gz"))["verdict"]
    assert "graph launches" not in eager
