"""The report's timeline lanes in pieces (traceparse/lanes_chunks.py,
traceparse/reports/lanes_parts.py) against ``timeline_lanes`` of the whole gpu table.

* hand-computed frames cut into windows: two lanes (one on the null stream), overlapping
  activities, an activity crossing a window edge, exact and binned modes, a ``max_lanes``
  cut;
* running sums past 2**53 ns (where float64 rounds): the carried sums give the whole
  array's dict, and exact integer sums converted once are not the running sums;
* a generated nsys export read one GPU row per piece, both executors;
* every shared nsys export: the windows' own rows are the timeline's gpu rows; the lanes
  at about nine pieces and at the default piece size, in the
  default, exact, binned and two-lane settings.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from conftest import ids, shared_files

from traceparse import loader, schema
from traceparse.lanes_chunks import timeline_lanes as lanes_in_pieces
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.reports import lanes_parts
from traceparse.reports.lanes import timeline_lanes
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import Activity, Call, Scenario

NSYS = shared_files("nsys", "*.sqlite")
HAVE_DASK = importlib.util.find_spec("distributed") is not None


def _gpu(rows: list[tuple[int | None, int, int, str]]) -> pl.DataFrame:
    """GPU rows ``(stream, start, end, category)`` on rank 0, device 0."""
    return schema.conform("gpu", pl.DataFrame({
        "rank": [0] * len(rows), "kind": ["kernel"] * len(rows),
        "device_id": [0] * len(rows), "stream_id": [r[0] for r in rows],
        "start_ns": [r[1] for r in rows], "end_ns": [r[2] for r in rows],
        "dur_ns": [r[2] - r[1] for r in rows], "category": [r[3] for r in rows],
        "name": [f"k{i}" for i in range(len(rows))]},
        schema_overrides={"stream_id": pl.Int64}))


def _pieces(gpu: pl.DataFrame, starts: list[int], **kw: int) -> dict[str, Any]:
    """The lanes of ``gpu`` computed from the windows starting at ``starts`` (each window
    given the rows it overlaps or starts, as :func:`traceparse.nsys.chunks.read_rows`
    gives them), partials merged one at a time in order and, separately, in pairs."""
    wins = list(zip(starts, [*starts[1:], chunks.END], strict=True))

    def rows(t0: int, t1: int) -> pl.DataFrame:
        return gpu.filter((pl.col("start_ns") < t1)
                          & ((pl.col("end_ns") > t0) | (pl.col("start_ns") >= t0)))

    budget, bins = kw.get("budget", 4000), kw.get("bins", 600)
    counts = lanes_parts.merge_counts([lanes_parts.lane_counts(rows(*w), *w) for w in wins])
    lp = lanes_parts.lane_plan(counts, budget=budget, bins=bins,
                               max_lanes=kw.get("max_lanes", 32))
    if lp is None:
        return lanes_parts.finish(None, None, budget=budget, bins=bins)
    parts = [lanes_parts.window_segments(rows(*w), *w, lp, i == 0)
             for i, w in enumerate(wins)]
    one = parts[0]
    for p in parts[1:]:
        one = lanes_parts.merge_segments([one, p], lp)
    while len(parts) > 1:  # pairwise, as Dask's tree would
        parts = [lanes_parts.merge_segments(parts[i:i + 2], lp)
                 for i in range(0, len(parts), 2)]
    a = lanes_parts.finish(lp, one, budget=budget, bins=bins)
    assert lanes_parts.finish(lp, parts[0], budget=budget, bins=bins) == a
    return a


# stream 7: compute [100, 300), memory [250, 400) (overlapping it), compute [900, 1000);
# null stream: compute [500, 1200), crossing the window edge at 600
ROWS = [(7, 100, 300, "compute"), (7, 250, 400, "memory"), (None, 500, 1200, "compute"),
        (7, 900, 1000, "compute")]
LANE7 = {"rank": 0, "device_id": 0, "stream_id": 7, "busy_ns": 450, "events": 3}
NULL = {"rank": 0, "device_id": 0, "stream_id": None, "busy_ns": 700, "events": 1}


def test_exact_two_lanes_overlap_and_an_edge_crossing() -> None:
    gpu = _gpu(ROWS)
    want = {"categories": ["compute", "memory", "communication", "sync"], "budget": 4000,
            "events": 4, "mode": "exact", "window_start_ns": 100, "window_ns": 1100,
            "drawn_events": 4, "lanes_total": 2, "bin_ns": 0,
            "lanes": [{**LANE7, "segments": [[0, 200, 0, 1.0], [150, 150, 1, 1.0],
                                             [800, 100, 0, 1.0]]},
                      {**NULL, "segments": [[400, 700, 0, 1.0]]}]}
    assert timeline_lanes(gpu) == want
    for starts in ([100], [100, 600], [100, 260, 600, 950], [100, 101, 500, 501, 1100]):
        assert _pieces(gpu, starts) == want, starts


def test_binned_hand_computed() -> None:
    # bins of 275 ns (edges 0, 275, 550, 825, 1100 after the start at 100)
    # stream 7: bin 0 compute 200 + memory 125 (capped at 1.0, compute dominant); bin 1
    # memory 25 -> 0.25; bin 2 compute 25 -> 0.25; bin 3 compute 75 (0.27) -> 0.5
    # null stream: bin 1 150 ns (0.55) -> 0.75; bins 2 and 3 full -> one segment
    gpu = _gpu(ROWS)
    want_lanes = [{**LANE7, "segments": [[0, 275, 0, 1.0], [275, 275, 1, 0.25],
                                         [550, 275, 0, 0.25], [825, 275, 0, 0.5]]},
                  {**NULL, "segments": [[275, 275, 0, 0.75], [550, 550, 0, 1.0]]}]
    mem = timeline_lanes(gpu, budget=3, bins=4)
    assert (mem["mode"], mem["bin_ns"], mem["lanes"]) == ("binned", 275, want_lanes)
    for starts in ([100], [100, 600], [100, 250, 260, 600, 950, 1000]):
        assert _pieces(gpu, starts, budget=3, bins=4) == mem, starts
    # binned partials fold in time order only
    lp = lanes_parts.lane_plan(lanes_parts.lane_counts(gpu, 100, chunks.END), budget=3,
                               bins=4, max_lanes=32)
    assert lp is not None
    first = lanes_parts.window_segments(gpu, 100, 600, lp, True)
    later = lanes_parts.window_segments(gpu, 600, chunks.END, lp, False)
    assert (first.state is not None, later.state, len(later.pending)) == (True, None, 1)
    with pytest.raises(ValueError, match="out of time order"):
        lanes_parts.merge_segments([lanes_parts.merge_segments([first, later], lp), first],
                                   lp)
    with pytest.raises(ValueError, match="first window"):
        lanes_parts.finish(lp, later, budget=3, bins=4)


def test_max_lanes_keeps_the_busiest() -> None:
    gpu = _gpu(ROWS)
    for kw in ({"max_lanes": 1}, {"max_lanes": 1, "budget": 0, "bins": 4}):
        mem = timeline_lanes(gpu, **kw)
        assert (mem["lanes_total"], mem["drawn_events"], mem["events"]) == (2, 1, 4)
        assert [ln["stream_id"] for ln in mem["lanes"]] == [None]  # 700 ns > 450 ns
        assert _pieces(gpu, [100, 600], **kw) == mem


def test_empty() -> None:
    gpu = _gpu([])
    assert _pieces(gpu, [0]) == timeline_lanes(gpu)
    assert timeline_lanes(gpu)["mode"] == "empty"


def test_running_sums_past_2_53_carry_the_same_bits() -> None:
    # 20,000 activities over 1e13 ns on two streams: a lane's starts sum to about 1e17,
    # past 2**53, where every addition of np.cumsum rounds
    rng = np.random.default_rng(7)
    n = 20_000
    start = np.sort(rng.integers(0, 10**13, n))
    dur = rng.integers(1, 10**9, n)
    stream = rng.integers(1, 3, n)
    cat = rng.choice(["compute", "memory"], n)
    gpu = _gpu([(int(s), int(a), int(a + d), str(c))
                for s, a, d, c in zip(stream, start, dur, cat, strict=True)])
    starts = [int(start[0])] + [int(x) for x in start[::1500][1:]]
    for kw in ({"budget": 10, "bins": 600}, {"budget": 10, "bins": 7}):
        assert _pieces(gpu, starts, **kw) == timeline_lanes(gpu, **kw)
    # the whole array's running sum at the bin edges is not the exact sum rounded once
    lane = gpu.filter((pl.col("stream_id") == 1) & (pl.col("category") == "compute"))
    s = np.sort(lane["start_ns"].to_numpy() - int(gpu["start_ns"].min()))  # type: ignore[arg-type]
    edges = np.linspace(0, 10**13, 601).round().astype(np.int64)
    k = np.searchsorted(s, edges)
    run = np.concatenate([[0], np.cumsum(s, dtype=np.float64)])[k]
    exact = np.array([float(sum(int(v) for v in s[:i])) for i in k])
    assert (run != exact).sum() > 100


def _edge_export(path: Path) -> Path:
    """Two kernels overlapping on stream 7 (one crossing the next piece), a copy on stream
    7, a kernel on stream 8 and one on device 1."""
    acts = [Activity("kernel", 7, 1000, 4000, name="gemm"),
            Activity("kernel", 8, 3000, 1000, name="gemm"),
            Activity("kernel", 7, 4500, 4500, name="relu"),
            Activity("memcpy", 7, 9500, 500, bytes=4096, copy_kind="HtoD",
                     src_kind="Pinned", dst_kind="Device"),
            Activity("kernel", 7, 2000, 500, name="gemm", device=1)]
    calls = tuple(Call("cudaLaunchKernel_v7000" if a.kind == "kernel"
                       else "cudaMemcpyAsync_v3020", a.start_ns - 500, a.start_ns - 400, a)
                  for a in acts)
    return samplegen_sqlite.write(Scenario("edges", "lane edges", calls), path)


def test_generated_export_one_row_per_piece(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    gpu = read(path).gpu
    exact = lanes_in_pieces(path, chunk_rows=1)
    assert exact == timeline_lanes(gpu)
    assert [(ln["device_id"], ln["stream_id"], ln["segments"]) for ln in exact["lanes"]] == [
        (0, 7, [[0, 4000, 0, 1.0], [3500, 4500, 0, 1.0], [8500, 500, 1, 1.0]]),
        (0, 8, [[2000, 1000, 0, 1.0]]), (1, 7, [[1000, 500, 0, 1.0]])]
    binned = lanes_in_pieces(path, chunk_rows=1, budget=2, bins=9)
    assert binned["mode"] == "binned"
    assert binned == timeline_lanes(gpu, budget=2, bins=9)
    # bins of 1000 ns: stream 7 busy all through its kernels (the overlap counts twice,
    # capped at 1.0), then half the last bin copying
    assert binned["lanes"][0]["segments"] == [[0, 8000, 0, 1.0], [8000, 1000, 1, 0.5]]
    with pytest.raises(ValueError, match="unknown executor"):
        lanes_in_pieces(path, executor="memory")


@pytest.mark.skipif(not HAVE_DASK, reason="distributed is not installed (the optional "
                    "extra traceparse[dask]); the dask executor is not tested")
def test_dask_executor_equals_memory(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    gpu = read(path).gpu
    for kw in ({}, {"budget": 2, "bins": 9}):
        for rows in (1, chunks.BLOCK_ROWS):  # five windows; one
            got = lanes_in_pieces(path, executor="dask", workers=2, chunk_rows=rows, **kw)
            assert got == timeline_lanes(gpu, **kw), (kw, rows)


SETTINGS: list[dict[str, int]] = [{}, {"budget": 10**9}, {"budget": 10, "bins": 50},
                                  {"max_lanes": 2, "budget": 10}]


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_pieces_equal_memory(path: Path) -> None:
    gpu = loader.load(path).gpu
    # the windows' own rows (those starting in them) are the timeline's gpu rows, every
    # kind, with the timeline's ranks and categories
    plan = chunks.plan(path, block_rows=max(gpu.height // 9, 1))
    cols = ["rank", "device_id", "stream_id", "kind", "category", "start_ns", "end_ns"]
    own = [chunks.read_rows(plan, plan.blocks_for(*w), w)
           .filter((pl.col("start_ns") >= w[0]) & (pl.col("start_ns") < w[1]))
           .select(pl.col(c).cast(gpu.schema[c]) for c in cols)
           for w in plan.windows(max(gpu.height // 9, 1))]
    whole = gpu.select(cols).sort(cols, nulls_last=True)
    got = pl.concat(own).sort(cols, nulls_last=True) if own else whole.clear()
    assert got.equals(whole)
    for kw in SETTINGS:
        mem = timeline_lanes(gpu, **kw)
        if kw.get("budget") == 10**9 and gpu.height:
            assert mem["mode"] == "exact"
        if kw.get("budget") == 10 and mem["drawn_events"] > 10:
            assert mem["mode"] == "binned"
        for rows in (max(gpu.height // 9, 1), chunks.BLOCK_ROWS):
            assert lanes_in_pieces(str(path), chunk_rows=rows, **kw) == mem, (kw, rows)
