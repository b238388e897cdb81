"""Property tests (hypothesis) for interval arithmetic and time attribution.

Reference implementations work nanosecond by nanosecond on small integer time lines, so they
are obviously right; the vectorised code must agree exactly.
"""

from __future__ import annotations

import itertools

import polars as pl
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from traceparse import schema
from traceparse.analyses import intervals
from traceparse.analyses.attribution import PARTS, breakdown, check_attribution
from traceparse.timeline import Timeline

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

ivals = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=8)


def _frame(xs: list[tuple[int, int]], g: int = 0) -> pl.DataFrame:
    return pl.DataFrame({"g": [g] * len(xs), "start_ns": [s for s, _ in xs],
                         "end_ns": [s + d for s, d in xs]},
                        schema={"g": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})


def _points(xs: list[tuple[int, int]]) -> set[int]:
    return {t for s, d in xs for t in range(s, s + d)}


def _as_points(frame: pl.DataFrame) -> set[int]:
    return {t for s, e in frame.select("start_ns", "end_ns").rows() for t in range(s, e)}


@SETTINGS
@given(ivals, ivals)
def test_interval_ops_match_point_sets(a: list[tuple[int, int]], b: list[tuple[int, int]]
                                       ) -> None:
    fa, fb = _frame(a), _frame(b)
    pa, pb = _points(a), _points(b)
    u = intervals.union(fa, by=["g"])
    assert _as_points(u) == pa and intervals.total(u) == len(pa)
    # union output is disjoint and non-touching
    rows = u.select("start_ns", "end_ns").rows()
    assert all(e1 < s2 for (_, e1), (s2, _) in itertools.pairwise(rows))
    assert _as_points(intervals.intersect(fa, fb, by=["g"])) == pa & pb
    assert _as_points(intervals.subtract(fa, fb, by=["g"])) == pa - pb


@SETTINGS
@given(ivals, ivals)
def test_groups_do_not_interact(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    both = pl.concat([_frame(a, 0), _frame(b, 1)])
    u = intervals.union(both, by=["g"])
    assert _as_points(u.filter(pl.col("g") == 0)) == _points(a)
    assert _as_points(u.filter(pl.col("g") == 1)) == _points(b)


# ---------------------------------------------------------------- timelines
KINDS = {  # strategy label -> (kind, name, copy_kind)
    "compute": ("kernel", "gemm", None),
    "comm": ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", None),
    "memory": ("memcpy", "[CUDA memcpy Host-to-Device]", "HtoD"),
    "peer": ("memcpy", "[CUDA memcpy Peer-to-Peer]", "PtoP"),
    "sync": ("sync", "Stream sync", None),
}

activity = st.tuples(
    st.sampled_from(sorted(KINDS)),          # what
    st.integers(0, 3),                        # stream
    st.integers(0, 200),                      # start
    st.integers(1, 40),                       # duration
    st.one_of(st.none(), st.tuples(st.integers(0, 60), st.integers(0, 30))),  # call: lead, len
    st.integers(0, 1),                        # device
)


def _timeline(acts: list[tuple]) -> Timeline:
    gpu, api = [], []
    for corr, (what, stream, start, dur, call, dev) in enumerate(acts, start=1):
        kind, name, copy = KINDS[what]
        s = start
        gpu.append({"rank": 0, "kind": kind, "start_ns": s, "end_ns": s + dur,
                    "dur_ns": dur, "device_id": dev, "stream_id": stream, "process_id": 1,
                    "correlation_id": corr, "name": name, "copy_kind": copy})
        if call is not None:
            lead, length = call
            cs = start - lead
            ce = cs + length
            api.append({"rank": 0, "kind": "runtime", "name": "cudaLaunchKernel",
                        "start_ns": cs, "end_ns": ce, "dur_ns": ce - cs, "process_id": 1,
                        "thread_id": 1, "correlation_id": corr})
    from traceparse.categorize import category_expr

    g = schema.conform("gpu", pl.DataFrame(gpu, infer_schema_length=None)
                       .with_columns(pl.lit("compute").alias("category")))
    g = g.with_columns(category_expr())
    a = (schema.conform("api", pl.DataFrame(api, infer_schema_length=None)) if api
         else schema.empty("api"))
    return Timeline(gpu=g, api=a).validate()


def _reference(acts: list[tuple], device: int) -> dict[str, int]:
    """Nanosecond-by-nanosecond attribution of one device (default window)."""
    mine = [x for x in acts if x[5] == device and x[0] != "sync"]
    lo = min(x[2] for x in mine)
    hi = max(x[2] + x[3] for x in mine)
    out = dict.fromkeys([*PARTS, "overlapped_comm_ns"], 0)
    cat = {"compute": "compute", "comm": "comm", "peer": "comm", "memory": "memory"}
    for t in range(lo, hi):
        running = {cat[x[0]] for x in mine if x[2] <= t < x[2] + x[3]}
        launching = any(x[4] is not None and x[2] - x[4][0] <= t
                        < min(x[2] - x[4][0] + x[4][1], x[2]) for x in mine)
        if "compute" in running:
            out["compute_ns"] += 1
            out["overlapped_comm_ns"] += "comm" in running
        elif "comm" in running:
            out["communication_ns"] += 1
        elif "memory" in running:
            out["memory_ns"] += 1
        elif launching:
            out["launch_overhead_ns"] += 1
        else:
            out["idle_ns"] += 1
    out["window_ns"] = hi - lo
    return out


def _parts(b: pl.DataFrame) -> dict[int, dict[str, int]]:
    return {r["device_id"]: {k: r[k] for k in (*PARTS, "overlapped_comm_ns", "window_ns")}
            for r in b.iter_rows(named=True)}


@SETTINGS
@given(st.lists(activity, min_size=1, max_size=12))
def test_breakdown_matches_reference_and_sums(acts: list[tuple]) -> None:
    b = check_attribution(breakdown(_timeline(acts)))
    got = _parts(b)
    devices = {x[5] for x in acts if x[0] != "sync"}
    assert set(got) == devices
    for d in devices:
        assert got[d] == _reference(acts, d)


@SETTINGS
@given(st.lists(activity, min_size=1, max_size=12), st.permutations([0, 1, 2, 3]))
def test_relabelling_streams_changes_nothing(acts: list[tuple], perm: list[int]) -> None:
    relabelled = [(w, perm[s] + 100, st_, d, c, dev) for w, s, st_, d, c, dev in acts]
    assert _parts(breakdown(_timeline(acts))) == _parts(breakdown(_timeline(relabelled)))


def _shifted(acts: list[tuple], by: int) -> list[tuple]:
    return [(w, s, t + by, d, c, 0) for w, s, t, d, c, _ in acts]


@SETTINGS
@given(st.lists(activity, min_size=1, max_size=8), st.lists(activity, min_size=1, max_size=8),
       st.integers(1, 500))
def test_inserting_idle_gap_adds_exactly_g(a: list[tuple], b: list[tuple], g: int) -> None:
    # Two bursts on device 0: everything of burst b (activities and launch calls) starts
    # after everything of burst a ends, so a cut between them straddles nothing. Moving b
    # later by g inserts a g-long stretch with nothing running and no launch in flight.
    assume(any(x[0] != "sync" for x in a) and any(x[0] != "sync" for x in b))
    a = _shifted(a, 60)  # launch leads are <= 60, so every call starts at >= 0
    end_a = max(max(x[2] + x[3] for x in a),
                max((x[2] - x[4][0] + x[4][1] for x in a if x[4] is not None), default=0))
    first = _shifted(b, end_a + 60)
    second = _shifted(b, end_a + 60 + g)
    before = _parts(check_attribution(breakdown(_timeline(a + first))))[0]
    after = _parts(check_attribution(breakdown(_timeline(a + second))))[0]
    assert after["idle_ns"] == before["idle_ns"] + g
    assert after["window_ns"] == before["window_ns"] + g
    for k in ("compute_ns", "memory_ns", "communication_ns", "launch_overhead_ns",
              "overlapped_comm_ns"):
        assert after[k] == before[k]


@SETTINGS
@given(st.lists(activity, min_size=1, max_size=10),
       st.lists(st.tuples(st.integers(0, 250), st.integers(1, 80)), max_size=4))
def test_sync_rows_are_never_busy(acts: list[tuple], syncs: list[tuple[int, int]]) -> None:
    assume(any(a[0] != "sync" for a in acts))
    extra = [("sync", 0, s, d, None, 0) for s, d in syncs]
    assert _parts(breakdown(_timeline(acts))) == _parts(breakdown(_timeline(acts + extra)))
