"""diff's op level is host time: an op's own time, less its waits for the GPU in blocking
calls (analyses/host_sync.py ``op_waits``; docs/diff.md "Op time"), and not comparable
between traces recorded with different profiler options ("Recording options")."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest
from conftest import TRACES
from perf_helpers import api, gpu, ranges, timeline

from traceparse import load
from traceparse.analyses.diff import compare, diff, host_ranges, recording_differs
from traceparse.analyses.host_sync import op_waits
from traceparse.timeline import Timeline

STEP = 10_000  # ns


def test_an_op_waits_only_inside_its_own_thread_s_blocking_calls() -> None:
    # thread 2: aten::item [5, 55) holds cudaStreamSynchronize [10, 50): 40 ns; an op
    # [30, 70) on the same thread overlaps the call over [30, 50): 20; an op on thread 3
    # over the same span waited for nothing; aten::add [60, 70) is after the call: 0
    tl = timeline(
        gpu=gpu([{"start_ns": 0, "end_ns": 50, "name": "k", "correlation_id": 1}]),
        api=api([{"name": "cudaLaunchKernel", "start_ns": 0, "end_ns": 4,
                  "correlation_id": 1},
                 {"name": "cudaStreamSynchronize", "start_ns": 10, "end_ns": 50}]),
        ranges=ranges([{"kind": "cpu_op", "name": n, "start_ns": s, "end_ns": e,
                        "thread_id": t}
                       for n, s, e, t in [("aten::item", 5, 55, 2), ("outer", 30, 70, 2),
                                          ("other", 5, 55, 3), ("aten::add", 60, 70, 2)]]))
    w = op_waits(tl)
    assert w.select("name", "dur_ns", "wait_ns").rows() == [
        ("aten::item", 50, 40), ("outer", 40, 20), ("other", 50, 0), ("aten::add", 10, 0)]


def _run(wait: int, n: int = 6) -> Timeline:
    """``n`` steps of ``STEP`` ns: a kernel launched at +0 runs [+10, +110 + wait); the
    host then calls ``aten::item`` at +100, which spends 10 ns, synchronises over
    [+110, +110 + wait) (the kernel's end), and spends 10 ns more: its duration is
    ``wait`` + 20, its own time 20."""
    g, a, r = [], [], []
    for s in range(n):
        t0 = s * STEP
        r.append({"kind": "profiler_step", "name": f"ProfilerStep#{s}", "start_ns": t0,
                  "end_ns": t0 + STEP})
        a.append({"name": "cudaLaunchKernel", "start_ns": t0, "end_ns": t0 + 5,
                  "correlation_id": s + 1})
        g.append({"start_ns": t0 + 10, "end_ns": t0 + 110 + wait, "name": "k",
                  "correlation_id": s + 1})
        a.append({"name": "cudaStreamSynchronize", "start_ns": t0 + 110,
                  "end_ns": t0 + 110 + wait})
        r.append({"kind": "cpu_op", "name": "aten::item", "start_ns": t0 + 100,
                  "end_ns": t0 + 120 + wait})
    return timeline(gpu=gpu(g), api=api(a), ranges=ranges(r))


def test_a_longer_wait_is_not_an_op_regression() -> None:
    # the kernel grows from 200 to 5,100 ns: aten::item's duration 120 -> 5,020 ns (+4,083 %)
    # but its own time is 20 ns in both; the kernel row carries the change
    d = diff(_run(100), _run(5000))
    op = d.filter(pl.col("level") == "op").row(0, named=True)
    assert (op["name"], op["base_median_ns"], op["new_median_ns"], op["flag"]) == (
        "aten::item", 20.0, 20.0, "")
    k = d.filter(pl.col("level") == "kernel").row(0, named=True)
    assert (k["base_median_ns"], k["new_median_ns"], k["flag"]) == (200.0, 5100.0,
                                                                     "regression")
    notes = compare(_run(100), _run(5000), names=("A", "B")).notes
    assert any("less the waits for the GPU" in n and "A and B" in n for n in notes)


def test_without_waits_there_is_no_note() -> None:
    t = timeline(gpu=gpu([{"start_ns": 0, "end_ns": 50, "name": "k", "correlation_id": 1}]),
                 api=api([{"name": "cudaLaunchKernel", "start_ns": 0, "end_ns": 4,
                           "correlation_id": 1}]),
                 ranges=ranges([{"kind": "cpu_op", "name": "aten::add", "start_ns": 0,
                                 "end_ns": 6}]))
    assert not any("waits for the GPU" in n for n in compare(t, t).notes)


@pytest.mark.shared
def test_decode_graph_item_waits_are_its_synchronise_calls() -> None:
    """``sweep/decode_b1_graph``: every ``aten::item`` holds one ``cudaStreamSynchronize``
    on its thread; its wait is that call's duration, read from the JSON."""
    path = TRACES / "gpu" / "sweep" / "decode_b1_graph.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    syncs = [e for e in ev if e.get("cat") == "cuda_runtime"
             and e["name"] == "cudaStreamSynchronize"]
    expect = []
    for it in (e for e in ev if e["name"] == "aten::item"):
        inside = [c for c in syncs if c["tid"] == it["tid"] and it["ts"] <= c["ts"]
                  and c["ts"] + c["dur"] <= it["ts"] + it["dur"]]
        assert len(inside) == 1
        expect.append(inside[0]["dur"])
    got = op_waits(load(path)).filter(pl.col("name") == "aten::item")["wait_ns"].to_list()
    assert len(got) == len(expect) == 20
    # the JSON's microseconds with three decimals are whole nanoseconds
    assert got == [round(d * 1000) for d in expect]
    assert min(got) > 270_000  # each waits for most of a graph replay


@pytest.mark.shared
def test_eager_to_graph_decode_flags_no_op_for_its_waits() -> None:
    """``decode_b1_eager`` -> ``decode_b1_graph``: compared whole, ``aten::item`` was a
    +2,030 % regression (its median 24.2 -> 516 us, 490 us of it the synchronise); less
    the waits it is faster, and no op of the pair is flagged slower by more than its own
    host work."""
    base, new = (TRACES / "gpu" / "sweep" / f"decode_b1_{v}.json.gz" for v in ("eager", "graph"))
    if not base.exists():
        pytest.skip(f"real-trace corpus not present: {base}")
    d = diff(load(base), load(new))
    item = d.filter((pl.col("level") == "op") & (pl.col("name") == "aten::item")).row(
        0, named=True)
    assert item["flag"] == "improvement"
    assert item["new_median_ns"] < 20_000
    step = d.filter(pl.col("level") == "step").row(0, named=True)
    assert step["flag"] == "improvement" and step["delta_pct"] < -80
    assert d.filter((pl.col("level") == "op") & (pl.col("flag") == "regression")
                    & (pl.col("delta_pct") > 100)).height == 0


def _with_frames(frames: bool) -> Timeline:
    """``_run(100)`` whose ops carry Input Dims; ``frames``: a Python frame (``with_stack``)
    around each op, as ``torch.profiler(with_stack=True)`` records."""
    t = _run(100)
    r = t.ranges.with_columns(
        pl.when(pl.col("kind").cast(pl.String) == "cpu_op").then(pl.lit("[[1]]"))
        .otherwise(None).alias("input_dims"))
    if frames:
        ops = r.filter(pl.col("kind").cast(pl.String) == "cpu_op")
        py = ranges([{"kind": "python_function", "name": "model.py(12): forward",
                      "start_ns": s - 5, "end_ns": e + 5}
                     for s, e in zip(ops["start_ns"], ops["end_ns"], strict=True)])
        r = pl.concat([r, py], how="vertical_relaxed")
    return timeline(gpu=t.gpu, api=t.api, ranges=r)


def test_ops_recorded_with_different_options_are_not_comparable() -> None:
    a, b = _with_frames(False), _with_frames(True)
    assert recording_differs(a, b) == {"with_stack": "new"}
    assert recording_differs(b, a) == {"with_stack": "base"}
    assert recording_differs(a, a) == {}
    d = diff(a, b)
    assert d.filter(pl.col("level") == "op")["flag"].to_list() == ["not comparable"]
    assert d.filter(pl.col("level") == "kernel")["flag"].to_list() == [""]
    notes = compare(a, b, names=("A", "B")).notes
    assert any("different profiler options (B with with_stack" in n for n in notes)


def test_a_trace_without_ops_shows_no_options() -> None:
    # a whole-step CUDA-graph replay records no op: its options are unknown, not off
    t = _with_frames(True)
    bare = timeline(gpu=t.gpu, api=t.api,
                    ranges=t.ranges.filter(pl.col("kind").cast(pl.String) == "profiler_step"))
    assert recording_differs(t, bare) == {}


@pytest.mark.shared
def test_warmup_twin_recorded_python_frames_its_bottleneck_did_not() -> None:
    """``scenarios/warmup``: the bottleneck ran without ``with_stack`` (its meta: compiling
    inside the profiled steps would record millions of compiler frames), the twin with it:
    the twin's 328 Python frames a step made ``aten::copy_`` 11.4 -> 41.6 us and
    ``TorchDynamo Cache Lookup`` +296 %, flagged as regressions of the warmed-up run."""
    s = TRACES / "gpu" / "scenarios"
    base, new = s / "warmup-bottleneck.json.gz", s / "warmup-twin.json.gz"
    if not base.exists():
        pytest.skip(f"real-trace corpus not present: {base}")
    metas = [json.loads(p.with_name(p.name.replace(".json.gz", ".meta.json")).read_text())
             ["profiler"] for p in (base, new)]
    assert [m["with_stack"] for m in metas] == [False, True]
    a, b = load(base), load(new)
    assert recording_differs(a, b) == {"with_stack": "new", "with_modules": "new"}
    d = diff(a, b)
    ops = d.filter(pl.col("level") == "op")
    assert ops.filter(pl.col("flag").is_in(["regression", "improvement"])).height == 0
    assert "not comparable" in ops["flag"].to_list()


def test_nvtx_ranges_are_ops_when_emit_nvtx_wrote_them_else_ranges() -> None:
    # emit_nvtx names each op's range "aten::mm, seq = N, op_id = M" (unique per call): the
    # counters go and the two calls are one op key; a user's "forward" range is a range;
    # the numbered step annotation "step 3" is the step level's, not a range
    rows = [("aten::mm, seq = 1, op_id = 10", 0, 40), ("aten::mm, seq = 2, op_id = 11", 50, 80),
            ("forward", 0, 90), ("step 3", 0, 100)]
    tl = timeline(
        gpu=gpu([{"start_ns": 0, "end_ns": 50, "name": "k", "correlation_id": 1}]),
        api=api([{"name": "cudaLaunchKernel", "start_ns": 0, "end_ns": 4,
                  "correlation_id": 1},
                 {"name": "cudaDeviceSynchronize", "start_ns": 60, "end_ns": 75}]),
        ranges=ranges([{"name": n, "start_ns": s_, "end_ns": e} for n, s_, e in rows]))
    # the second aten::mm [50, 80) and forward [0, 90) hold the 15 ns synchronise [60, 75)
    assert host_ranges(tl).rows() == [("op", "aten::mm", 40), ("op", "aten::mm", 15),
                                      ("range", "forward", 75)]


@pytest.mark.shared
def test_emit_nvtx_ops_of_an_nsys_export_are_compared() -> None:
    """``nsys-ai__mfu_2gpu_before``: 1,995 closed NVTX ranges named ``aten::to, op_id = N``
    (counted in the SQLite): one op key with 1,995 instances; NCCL's own NVTX ranges
    (``ncclGroupEnd``) are ranges."""
    import sqlite3

    path = TRACES / "nsys" / "nsys-ai__mfu_2gpu_before.sqlite"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n = con.execute("select count(*) from NVTX_EVENTS e left join StringIds s on s.id = "
                    "e.textId where coalesce(e.text, s.value) like 'aten::to, %' and "
                    "e.end is not null and e.eventType = 59").fetchone()[0]
    con.close()
    h = host_ranges(load(path))
    assert n == 1995
    assert h.filter((pl.col("level") == "op") & (pl.col("name") == "aten::to")).height == n
    assert h.filter(pl.col("name") == "ncclGroupEnd")["level"].unique().to_list() == ["range"]
    assert not h["name"].str.contains("op_id").any()


@pytest.mark.shared
def test_ops_of_nsys_and_kineto_traces_are_not_comparable() -> None:
    """``aten::add`` timed by ``emit_nvtx`` under Nsight Systems (``nsys-ai__mfu_2gpu_before``)
    and by torch.profiler (``sweep/decode_b1_eager``): different recording costs."""
    n = TRACES / "nsys" / "nsys-ai__mfu_2gpu_before.sqlite"
    k = TRACES / "gpu" / "sweep" / "decode_b1_eager.json.gz"
    if not n.exists() or not k.exists():
        pytest.skip(f"real-trace corpus not present: {n}")
    c = compare(load(n), load(k), names=("N", "K"))
    add = c.time.filter((pl.col("level") == "op") & (pl.col("name") == "aten::add"))
    assert add["n_base"].item() > 0 and add["n_new"].item() > 0
    assert add["flag"].item() == "not comparable"
    assert any("recorded by torch.profiler and the other by" in x for x in c.notes)
