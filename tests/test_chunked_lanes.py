"""The report's timeline lanes in pieces (traceparse/lanes_chunks.py,
traceparse/reports/lanes_parts.py) against ``timeline_lanes`` of the whole gpu table.

* hand-computed frames cut into windows: two lanes (one on the null stream), overlapping
  activities, an activity crossing a window edge, exact and binned modes, a ``max_lanes``
  cut;
* exact integer busy time per bin (``bin_busy``) by hand: an activity over several bins,
  equal bin edges, time outside the edges; against a brute-force sum on random cases;
* no phantom shade past 2**53 ns (where float64 sums round): a generated lane of 20,001
  activities in the first 1e12 ns of a 1e13 ns window draws the two segments worked out by
  hand, every drawn bin holding activity, in memory and in pieces;
* generated nsys exports read one GPU row per piece, both executors (one of them 1e16 ns
  long);
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
from chunked_exports import launched_export
from conftest import ids, shared_files

from traceparse import loader, schema
from traceparse.lanes_chunks import timeline_lanes as lanes_in_pieces
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.reports import lanes_parts
from traceparse.reports.lanes import bin_busy, bin_edges, bin_segments, timeline_lanes
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
    parts = [lanes_parts.window_segments(rows(*w), *w, lp) for w in wins]
    one = parts[0]
    for p in parts[1:]:
        one = lanes_parts.merge_segments([one, p], lp)
    a = lanes_parts.finish(lp, one, budget=budget, bins=bins)
    # the windows' partials merged backwards give the same (exact: the rows are put back
    # in start order; binned: int64 sums)
    back = parts[-1]
    for p in parts[-2::-1]:
        back = lanes_parts.merge_segments([back, p], lp)
    assert lanes_parts.finish(lp, back, budget=budget, bins=bins) == a
    while len(parts) > 1:  # pairwise, as Dask's tree would
        parts = [lanes_parts.merge_segments(parts[i:i + 2], lp)
                 for i in range(0, len(parts), 2)]
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
    # the null-stream row [500, 1200) crosses the window edge at 600: counted whole by
    # the window it starts in (bins 1-3: 150, 275, 275 ns), not by the next one
    lp = lanes_parts.lane_plan(lanes_parts.lane_counts(gpu, 100, chunks.END), budget=3,
                               bins=4, max_lanes=32)
    assert lp is not None
    first = lanes_parts.window_segments(gpu, 100, 600, lp)
    later = lanes_parts.window_segments(gpu, 600, chunks.END, lp)
    assert first.busy is not None and later.busy is not None
    assert first.busy[1, 0].tolist() == [0, 150, 275, 275]  # lane 1: the null stream
    assert later.busy[1].sum() == 0
    assert later.busy[0, 0].tolist() == [0, 0, 25, 75]  # stream 7's [900, 1000)


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


def test_bin_busy_hand_computed() -> None:
    edges = np.array([0, 10, 20, 30, 40, 50])
    # key 0: [5, 43) -> 5 in bin 0, bins 1-3 full (10 each), 3 in bin 4 (38 in all);
    #        [41, 44) -> 3 more in bin 4
    # key 1: [20, 30) exactly bin 2; [30, 30) nothing; [-5, 3) and [48, 60) cut at the
    #        edges 0 and 50 -> 3 in bin 0, 2 in bin 4
    busy = bin_busy(np.array([0, 0, 1, 1, 1, 1]), np.array([5, 41, 20, 30, -5, 48]),
                    np.array([43, 44, 30, 30, 3, 60]), edges, 2)
    assert busy.dtype == np.int64
    assert busy.tolist() == [[5, 10, 10, 10, 6], [3, 0, 10, 0, 2]]
    # a window of 3 ns in 5 bins: equal edges make empty bins, never counted
    edges = bin_edges(0, 3, 5)
    assert edges.tolist() == [0, 1, 1, 2, 2, 3]
    assert bin_busy(np.array([0]), np.array([0]), np.array([3]), edges, 1).tolist() == [
        [1, 0, 1, 0, 1]]
    # shades: a quarter up from any busy ns; 1/4 of the bin exactly is 0.25
    assert bin_segments(np.array([[1, 25, 26, 100, 0]]), np.array([0, 100, 200, 300, 400,
                                                                  500])) == [
        [0, 200, 0, 0.25], [200, 100, 0, 0.5], [300, 100, 0, 1.0]]


def test_bin_busy_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    for span, bins in [(5, 7), (1000, 13), (10**13, 600), (2**62, 9)]:
        edges = bin_edges(0, span, bins)
        start = rng.integers(0, span, 40)
        end = np.minimum(start + rng.integers(0, span // 3 + 2, 40), span)
        key = rng.integers(0, 2, 40)
        want = [[sum(max(0, min(int(e), int(edges[b + 1])) - max(int(s), int(edges[b])))
                     for k, s, e in zip(key, start, end, strict=True) if k == row)
                 for b in range(bins)] for row in range(2)]
        assert bin_busy(key, start, end, edges, 2).tolist() == want, span


def _far_lane(base: int) -> pl.DataFrame:
    """20,001 compute activities in the first 1e12 ns of a 1e13 ns window on stream 1
    (activity k at ``base + k * 49,997,500 + j``, ``j < 1e7`` random, 0 for the first; 10 to
    12 ms long), then a memory activity over its last 1e10 ns."""
    rng = np.random.default_rng(7)
    n = 20_001
    start = base + np.arange(n) * (10**12 // n) + rng.integers(0, 10**7, n) * (np.arange(n) > 0)
    end = start + rng.integers(10**7, 12 * 10**6, n)
    rows = [(1, int(s), int(e), "compute") for s, e in zip(start, end, strict=True)]
    return _gpu([*rows, (1, base + 10**13 - 10**10, base + 10**13, "memory")])


def _activity_in_every_drawn_bin(gpu: pl.DataFrame, out: dict[str, Any], bins: int) -> None:
    """Every bin that a segment of ``out`` (binned, ``bins`` bins) covers overlaps some
    activity of that segment's lane in ``gpu``."""
    t0 = out["window_start_ns"]
    edges = [int(x) for x in bin_edges(0, out["window_ns"], bins)]
    for ln in out["lanes"]:
        lane = gpu.filter(pl.col("stream_id") == ln["stream_id"])
        s = lane["start_ns"].to_numpy() - t0
        e = lane["end_ns"].to_numpy() - t0
        for a, w, _c, _level in ln["segments"]:
            i, j = edges.index(a), edges.index(a + w)
            for lo, hi in zip(edges[i:j], edges[i + 1:j + 1], strict=True):
                assert ((s < hi) & (e > lo)).any(), (lo, hi)


def test_no_phantom_shade_past_2_53() -> None:
    # every bin of 1e13 / 600 ns in [0, 1e12) holds about 333 activities busy 3.3-4.0e9 ns
    # (at most 335 * 12e6 < 1/4 of the bin): one compute segment at 0.25 over 60 bins;
    # bins 60-598 idle; the last bin [9,983,333,333,333, 1e13) memory 1e10 ns (0.6): 0.75.
    # Float64 running sums of the starts (about 1e16; n * t up to 2e17) shaded 34 of the
    # idle bins 0.25 (h35's reports/lanes.py: 36 segments).
    gpu = _far_lane(10**9)
    want = [[0, 10**12, 0, 0.25], [9_983_333_333_333, 16_666_666_667, 1, 0.75]]
    mem = timeline_lanes(gpu, budget=10, bins=600)
    assert (mem["window_ns"], mem["lanes"][0]["segments"]) == (10**13, want)
    _activity_in_every_drawn_bin(gpu, mem, 600)
    starts = [10**9, *(int(x) for x in gpu["start_ns"].to_numpy()[1500::1500])]
    assert _pieces(gpu, starts, budget=10, bins=600) == mem
    # 7 bins of 1,428,571,428,571 ns: bin 0 compute, bins 1-5 idle, bin 6 memory (0.007)
    mem = timeline_lanes(gpu, budget=10, bins=7)
    assert mem["lanes"][0]["segments"] == [[0, 1_428_571_428_571, 0, 0.25],
                                           [8_571_428_571_429, 1_428_571_428_571, 1, 0.25]]
    _activity_in_every_drawn_bin(gpu, mem, 7)
    assert _pieces(gpu, starts, budget=10, bins=7) == mem


def _edge_export(path: Path) -> Path:
    """Two kernels overlapping on stream 7 (one crossing the next piece), a copy on stream
    7, a kernel on stream 8 and one on device 1."""
    acts = [Activity("kernel", 7, 1000, 4000, name="gemm"),
            Activity("kernel", 8, 3000, 1000, name="gemm"),
            Activity("kernel", 7, 4500, 4500, name="relu"),
            Activity("memcpy", 7, 9500, 500, bytes=4096, copy_kind="HtoD",
                     src_kind="Pinned", dst_kind="Device"),
            Activity("kernel", 7, 2000, 500, name="gemm", device=1)]
    return launched_export(path, acts, "lane edges")


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


def test_generated_export_past_2_53_one_row_per_piece(tmp_path: Path) -> None:
    # 101 kernels in the first 1e15 ns of a 1e16 ns export (one every 9.9e12 ns, so in
    # every bin of 1.67e13 ns), a copy over the last 1e13 ns: one compute segment at 0.25,
    # idle bins 60-598 (h35's float sums shaded 24 of them), the last bin 0.6 -> 0.75
    rng = np.random.default_rng(7)
    step, n = 10**15 // 101, 101
    acts = [Activity("kernel", 7, 10**6 + k * step + (int(rng.integers(0, 10**7)) if k else 0),
                     int(rng.integers(10**7, 12 * 10**6)), name="gemm") for k in range(n)]
    acts.append(Activity("memcpy", 7, 10**6 + 10**16 - 10**13, 10**13, bytes=4096,
                         copy_kind="HtoD", src_kind="Pinned", dst_kind="Device"))
    calls = tuple(Call("cudaLaunchKernel_v7000" if a.kind == "kernel"
                       else "cudaMemcpyAsync_v3020", a.start_ns - 500, a.start_ns - 400, a)
                  for a in acts)
    path = str(samplegen_sqlite.write(Scenario("far", "far", calls), tmp_path / "far.sqlite"))
    gpu = read(path).gpu
    mem = timeline_lanes(gpu, budget=10, bins=600)
    assert (mem["window_ns"], mem["lanes"][0]["segments"]) == (10**16, [
        [0, 10**15, 0, 0.25], [9_983_333_333_333_332, 16_666_666_666_668, 1, 0.75]])
    _activity_in_every_drawn_bin(gpu, mem, 600)
    assert lanes_in_pieces(path, chunk_rows=1, budget=10, bins=600) == mem


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
