"""Data-loading evidence in traces whose profiler recorded every CPU range as an op
(Kineto before 2022: ``"cat": "Operator"``), and fixes that exist only under the profiler
(analyses/issuing.py ``loading_range``; reports/recommend.py ``_unprofiled_fires``;
docs/analyses.md "Input pipeline" and "Fixes without the profiler")."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, ranges, timeline

from traceparse import load
from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.issuing import loading_range
from traceparse.analyses.savings import savings
from traceparse.reports.recommend import _ms, _unprofiled_fires
from traceparse.timeline import Timeline

US = 1000
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
RESNET = TRACES / "torch" / "kineto__resnet50_worker0.1623143089861.pt.trace.json.gz"


def _loader_tl(name: str) -> Timeline:
    """Kernel A [20,25) us launched by [10,15); kernel B [70,80) launched by [60,65); a
    ``forward`` range [0,100) and an op-kind range ``name`` over [26,58) on the launching
    thread (2)."""
    return timeline(
        gpu=gpu([{"start_ns": 20 * US, "end_ns": 25 * US, "correlation_id": 1, "name": "a"},
                 {"start_ns": 70 * US, "end_ns": 80 * US, "correlation_id": 2, "name": "b"}]),
        api=api([{"name": "cudaLaunchKernel", "start_ns": 10 * US, "end_ns": 15 * US,
                  "correlation_id": 1},
                 {"name": "cudaLaunchKernel", "start_ns": 60 * US, "end_ns": 65 * US,
                  "correlation_id": 2}]),
        ranges=ranges([{"kind": "user_annotation", "name": "forward", "start_ns": 0,
                        "end_ns": 100 * US},
                       {"kind": "cpu_op", "name": name, "start_ns": 26 * US,
                        "end_ns": 58 * US}]))


def test_a_loader_recorded_as_an_op_is_data_loading() -> None:
    names = pl.DataFrame({"name": [LOADER, "aten::_prefetch_data", "DataLoader", "collate"],
                          "kind": ["cpu_op", "cpu_op", "user_annotation", "osrt"]})
    assert names.select(loading_range(pl.col("name"), pl.col("kind")).alias("x"))[
        "x"].to_list() == [True, False, True, False]
    # the gap [25,70) is covered by the loader (32 of 45 us): input_pipeline, and the fix
    # takes its 32 us of GPU idle off the host: window [20,80) -> [20,48)
    tl = _loader_tl(LOADER)
    assert idle_gaps(tl, min_ns=US).select("cause", "cause_name").rows() == [
        ("input_pipeline", LOADER)]
    sv = savings(tl).filter(pl.col("change") == "input_pipeline").row(0, named=True)
    assert (sv["measured_ns"], sv["saving_ns"]) == (60 * US, 32 * US)
    # a framework op (its name holds a namespace) is never data loading
    assert "input_pipeline" not in savings(_loader_tl("aten::_prefetch_data"))[
        "change"].to_list()


def test_a_fix_must_also_fire_without_the_profiler() -> None:
    row = {"saving_ns": 382, "measured_ns": 996}
    assert _unprofiled_fires({**row, "saving_unprofiled_ns": None,
                              "window_unprofiled_ns": None}, 0.05)
    assert not _unprofiled_fires({**row, "saving_unprofiled_ns": 1,
                                  "window_unprofiled_ns": 615}, 0.05)
    assert _unprofiled_fires({**row, "saving_unprofiled_ns": 31,
                              "window_unprofiled_ns": 615}, 0.05)  # 5.04 %


@pytest.mark.shared
def test_resnet50_loader_is_an_input_pipeline() -> None:
    """``kineto__resnet50_worker0`` (2021): every CPU range is ``"cat": "Operator"``; six
    ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` ranges of 62.6-73.4 ms,
    one per step, on the thread that launches the kernels."""
    if not RESNET.exists():
        pytest.skip(f"real-trace corpus not present: {RESNET}")
    with gzip.open(RESNET) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    dl = [e for e in ev if e["name"] == LOADER]
    assert len(dl) == 6 and {e["cat"] for e in dl} == {"Operator"}
    tl = load(RESNET)
    g = idle_gaps(tl, min_ns=10 * US).sort("dur_ns", descending=True).head(5)
    assert g["cause"].to_list() == ["input_pipeline"] * 5
    sv = savings(tl).filter(pl.col("change") == "input_pipeline")
    assert sv.height == 1 and sv["saving_ns"][0] > 0


@pytest.mark.shared
def test_resnet50_offers_no_fix_that_only_the_profiler_needs() -> None:
    """Under the profiler (~21 us recorded per op, 3,938 ops a step) the host issues each
    step's kernels too slowly to run ahead, and CUDA graphs (382 ms), the input pipeline
    (285 ms) and fusion (248 ms) of the 996 ms window all save. Without the profiler's
    cost the replay is GPU-bound (615 ms, 603 ms of GPU busy time): the loader runs while
    the GPU works, and CUDA graphs save 1.17 ms, the input pipeline nothing; fusion still
    saves 92 ms. Only fusion is offered."""
    if not RESNET.exists():
        pytest.skip(f"real-trace corpus not present: {RESNET}")
    from traceparse.reports.fixes import fixes_list

    tl = load(RESNET)
    sv = {r["change"]: r for r in savings(tl).filter(pl.col("bounds_job")).to_dicts()}
    cg = sv["no_launch_overhead"]
    assert cg["saving_ns"] > 0.3 * cg["measured_ns"]
    assert cg["saving_unprofiled_ns"] < 0.05 * cg["window_unprofiled_ns"]
    assert sv["input_pipeline"]["saving_unprofiled_ns"] < 0.10 * cg["window_unprofiled_ns"]
    assert sv["fusion"]["saving_unprofiled_ns"] > 0.02 * cg["window_unprofiled_ns"]
    items, note = fixes_list(tl)
    assert [r["id"] for r in items] == ["fusion"]
    # the withheld fixes are named with both figures, the engine's own
    assert note.startswith("Withheld, as at the central estimate of the profiler's per-op "
                           "cost the saving is its own recording: ")
    assert (f"cuda-graphs would save {_ms(cg['saving_ns'])} of {_ms(cg['measured_ns'])} "
            f"under the profiler but {_ms(cg['saving_unprofiled_ns'])} of "
            f"{_ms(cg['window_unprofiled_ns'])} without it") in note
    assert "input-pipeline would save" in note
    # at the band's low end (least recording removed) CUDA graphs would clear 5 %: said
    from traceparse.analyses.profiler_cost import profiler_cost
    from traceparse.analyses.savings import unprofiled_at
    from traceparse.analyses.steps import step_windows

    pc = profiler_cost(tl, price_windows=step_windows(tl))
    low = unprofiled_at(tl, [("no_launch_overhead", 0)],
                        pc["overhead_low_ns"] / pc["overhead_ns"])[("no_launch_overhead", 0)]
    assert low[0] >= 0.05 * low[1]
    assert (f"({_ms(low[0])} of {_ms(low[1])} at the low end of the profiler's per-op "
            "estimate") in note
    assert note.count("at the low end") == 1  # the input pipeline stays under 10 % there


@pytest.mark.shared
def test_no_fix_line_names_the_profiler_only_fix_in_the_vendor_s_words() -> None:
    """``hta__mi250_minitoy`` (ROCm): HIP graphs would save 1.31 ms of 8.91 ms under the
    profiler, 0.29 ms of 7.46 ms without it: no fix, and the line says why in HIP's words."""
    path = TRACES / "torch" / "hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    from traceparse.reports.fixes import fixes_list

    items, why = fixes_list(load(path))
    assert items == []
    assert why.startswith("no fix: no mechanism (HIP graphs, fusion")
    assert "CUDA graphs" not in why
    assert "is its own recording: cuda-graphs would save" in why


@pytest.mark.shared
def test_the_graph_line_quotes_the_profiler_free_figure_too() -> None:
    """``summary``'s launches line and the report's launch note quote the CUDA-graph
    saving beside its profiler-free figure, the engine row the withheld fix names."""
    if not RESNET.exists():
        pytest.skip(f"real-trace corpus not present: {RESNET}")
    from click.testing import CliRunner

    from traceparse.analyses.savings import best
    from traceparse.cli import main
    from traceparse.reports.payload import build_payload

    tl = load(RESNET)
    top = best(savings(tl), "no_launch_overhead")
    assert top is not None
    unprof = (f"without the profiler {_ms(top['saving_unprofiled_ns'])} of "
              f"{_ms(top['window_unprofiled_ns'])}")
    out = CliRunner().invoke(main, ["summary", str(RESNET)])
    line = next(x for x in out.output.splitlines() if "CUDA graphs could save" in x)
    assert f"could save {_ms(top['saving_ns'])} on rank 0" in line and unprof in line
    assert unprof in build_payload(tl)["launches"]["note"]
