"""Step attribution windows never overlap (docs/llm.md "Attribution windows never overlap").

Where the GPU falls behind the host, a step's wall ``[start, start + wall)`` runs past the
next step's start; parts summed over those walls counted the overlap once per step (the
summary said ``launch_bound-twin``'s 6 steps held 6.96 ms of wall time, compute 66.1 %, in a
3.98 ms span with 2.27 ms of kernels)."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import TRACES
from traceparse.analyses import phases
from traceparse.analyses.attribution import PARTS
from traceparse.analyses.steps import step_periods
from traceparse.analyses.summary import summarize
from traceparse.samplegen.llm import PID, STREAM, TID, _doc

US = 1000


def _lagging_steps() -> dict:
    """Three ProfilerSteps of 100 us at 0, 100, 200 us, each with a 1 GFLOP op and
    launching one 150 us kernel 10 us in; the GPU falls behind: kernels [20, 170),
    [170, 320), [320, 470) us."""
    ev = _steps([(0, 20), (100, 170), (200, 320)], step_us=100, call_at=10, kernel_us=150)
    for host in (0, 100, 200):
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": PID, "tid": TID,
                   "ts": host + 1, "dur": 8, "args": {"flops": 1_000_000_000}})
    return _doc(ev)


def _steps(starts: list[tuple[int, int]], *, step_us: int, call_at: int,
           kernel_us: int) -> list[dict]:
    """Per (host start, kernel start) in us: a ProfilerStep of ``step_us`` whose 5 us
    launch call at ``call_at`` in launches one ``kernel_us`` gemm starting there."""
    ev: list[dict] = []
    for i, (host, k0) in enumerate(starts):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}",
                   "pid": PID, "tid": TID, "ts": host, "dur": step_us, "args": {}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
                   "tid": TID, "ts": host + call_at, "dur": 5,
                   "args": {"correlation": 100 + i}})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": STREAM,
                   "ts": k0, "dur": kernel_us,
                   "args": {"device": 0, "stream": STREAM, "correlation": 100 + i,
                            "grid": [64, 1, 1], "block": [256, 1, 1]}})
    return ev


def test_attribution_windows_by_hand(tmp_path: Path) -> None:
    p = tmp_path / "lag.pt.trace.json"
    p.write_text(json.dumps(_lagging_steps()))
    st = phases.phase_steps(traceparse.load(p))
    # walls: GPU ends 170, 320, 470 us minus starts 0, 100, 200 -> 170, 220, 270 (sum 660,
    # in a 470 us span: the walls overlap)
    assert st["wall_ns"].to_list() == [170 * US, 220 * US, 270 * US]
    # running ends 170, 320, 470; windows end at the next start (100, 200), the last at 470:
    # [0, 100), [100, 200), [200, 470) -> 100, 100, 270 = the 470 us span, once
    assert st["attributed_ns"].to_list() == [100 * US, 100 * US, 270 * US]
    # compute: [20, 100) = 80; [100, 170) + [170, 200) = 100; [200, 320) + [320, 470) = 270;
    # 450 us = the three kernels (over the walls it was 150 + 220 + 270 = 640 us)
    assert st["compute_ns"].to_list() == [80 * US, 100 * US, 270 * US]
    parts = st.select(pl.sum_horizontal(*PARTS).alias("s"))["s"].to_list()
    assert parts == st["attributed_ns"].to_list()  # one device: parts sum to the window
    # the phase's compute share: 450 / 470 = 95.74 %
    s = phases.phase_summary(st).row(0, named=True)
    assert s["compute_pct"] == pytest.approx(100.0 * 450 / 470)
    # 3 GFLOP in the 470 us the steps took: 3e9 / 470e-6 s = 6.383 TFLOP/s (over the
    # summed walls, 660 us, it read 4.545)
    assert st["flops"].to_list() == [1e9] * 3
    assert s["tflop_per_s"] == pytest.approx(3e9 / 470e-6 / 1e12)
    # each step's own rate over its period (finishes 170, 320, 470: periods 170, 150,
    # 150 us, summing to the same 470): 5.88, 6.67, 6.67 TFLOP/s (over the walls, 170,
    # 220 and 270 us, it read 5.88, 4.55, 3.70: slower each step only as the queue grew)
    assert st["period_ns"].to_list() == [170 * US, 150 * US, 150 * US]
    assert st["tflop_per_s"].to_list() == pytest.approx(
        [1e9 / 170e-6 / 1e12, 1e9 / 150e-6 / 1e12, 1e9 / 150e-6 / 1e12])


def test_attribution_windows_tile_the_union() -> None:
    # steps at 0 (wall 500), 100 (wall 50), 200 (wall 50): step 0's work outlasts both
    # later steps; running ends 500, 500, 500 -> [0, 100), [100, 200), [200, 500): 500 ns,
    # the union of the walls (a window may run past its own wall, never past the union)
    st = pl.DataFrame({"rank": [0, 0, 0, 1], "start_ns": [0, 100, 200, 0],
                       "wall_ns": [500, 50, 50, 30]})
    out = phases.attribution_windows(st)
    assert out["attr_end_ns"].to_list() == [100, 200, 500, 30]


# ------------------------------------------------------------------------------ real file


def _raw_events(path: Path) -> tuple[list[dict[str, Any]], list[str],
                                      Callable[[Decimal], int], list[tuple[int, int]],
                                      dict[Any, int]]:
    """The file's complete events read from its JSON with exact decimals (not through
    traceparse): the events, their lower-cased categories (2020 Kineto: Runtime, Kernel),
    the microseconds-to-ns conversion, the host's ProfilerStep ranges ``(start, end)`` in
    order (not their gpu_user_annotation copies on the GPU) and each runtime/driver call's
    start by correlation id."""
    with gzip.open(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds") or 0)

    def ns(v: Decimal) -> int:
        return base + round(v * 1000)

    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    cat = [str(e.get("cat", "")).lower() for e in ev]
    steps = sorted((ns(e["ts"]), ns(e["ts"] + e["dur"])) for e, c in zip(ev, cat, strict=True)
                   if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))
                   and c != "gpu_user_annotation")
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e, c in zip(ev, cat, strict=True)
              if c in ("cuda_runtime", "cuda_driver", "runtime")
              and "correlation" in (e.get("args") or {})}
    return ev, cat, ns, steps, launch


def _raw_step_spans(path: Path) -> tuple[int, int, int]:
    """From the file's own events (json, not traceparse): ``(sum of the steps' walls,
    length of their union, kernel time inside that union)``. A step's wall runs from its
    ProfilerStep start to the later of its end and the end of the last kernel whose
    launching call (same correlation) started inside it."""
    ev, cat, ns, steps, launch = _raw_events(path)
    kern = [(launch.get(e["args"].get("correlation"), ns(e["ts"])), ns(e["ts"]),
             ns(e["ts"] + e["dur"])) for e, c in zip(ev, cat, strict=True) if c == "kernel"]
    walls = []
    for s, e in steps:
        ends = [k1 for t, _, k1 in kern if s <= t < e]
        walls.append((s, max([e, *ends])))
    union: list[list[int]] = []
    for s, e in walls:
        if union and s <= union[-1][1]:
            union[-1][1] = max(union[-1][1], e)
        else:
            union.append([s, e])
    busy: list[list[int]] = []
    for _, k0, k1 in sorted(kern, key=lambda k: k[1]):
        if busy and k0 <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], k1)
        else:
            busy.append([k0, k1])
    inside = sum(max(0, min(b, u1) - max(a, u0)) for a, b in busy for u0, u1 in union)
    return sum(e - s for s, e in walls), sum(e - s for s, e in union), inside


@pytest.mark.shared
@pytest.mark.parametrize("name", [
    "gpu/scenarios/launch_bound-twin.json.gz",       # walls 6.96 ms in a 3.98 ms span
    "torch/kineto__resnet50_worker0.1623143089861.pt.trace.json.gz",  # 1,129 in 1,066 ms
    "torch/hta__trace_diff_control.json.gz",         # 465.15 in 465.01 ms
    "gpu/sweep/train_gpt2m_b16.json.gz",             # 375.96 in 370.58 ms
])
def test_real_steps_attributed_once(name: str) -> None:
    walls, union, kernel = _raw_step_spans(TRACES / name)
    assert walls > union  # the raw walls overlap
    st = phases.phase_steps(traceparse.load(TRACES / name))
    assert int(st["wall_ns"].sum()) == walls
    assert int(st["attributed_ns"].sum()) == union
    # every kernel interval in the steps once, no more (kernels outrank copies and idle)
    assert int(st["compute_ns"].sum() + st["communication_ns"].sum()) == kernel


@pytest.mark.shared
def test_launch_bound_twin_summary_step_clause() -> None:
    path = TRACES / "gpu/scenarios/launch_bound-twin.json.gz"
    _, union, kernel = _raw_step_spans(path)
    tl = traceparse.load(path)
    v = summarize(tl)["verdict"]
    assert f"over its 6 steps ({union / 1e6:.2f} ms of wall time" in v
    assert f"compute is {100.0 * kernel / union:.1f}%" in v


@pytest.mark.shared
@pytest.mark.parametrize("name", [
    # walls 1,129.3 ms in a 1,065.6 ms union: TFLOP/s 2.78 over the walls, 2.95 over the span
    "torch/kineto__resnet50_worker0.1623143089861.pt.trace.json.gz",
    # walls 376.0 ms in 370.6 ms: 142.8 -> 144.9 TFLOP/s
    "gpu/sweep/train_gpt2m_b16.json.gz",
])
def test_phase_tflops_over_the_steps_span(name: str) -> None:
    _, union, _ = _raw_step_spans(TRACES / name)
    wait = _raw_first_step_queue_wait(TRACES / name)
    st = phases.phase_steps(traceparse.load(TRACES / name))
    s = phases.phase_summary(st).row(0, named=True)
    # over the steps' periods: their union less the first step's wait behind work queued
    # before the recording (gpt2m b16: 245 such kernels; resnet50: none waited)
    assert int(st["period_ns"].sum()) == union - wait
    assert s["tflop_per_s"] == pytest.approx(float(st["flops"].sum()) / (union - wait) / 1e3)


def _raw_first_step_queue_wait(path: Path) -> int:
    """From the file's JSON: how long the first ProfilerStep's first launched activity
    waited behind activities with no launch call that ran first on their stream (queued
    before the recording): from its first launch call (or the step's start, if later) to
    the end of that queue, never negative."""
    ev, cat, ns, steps, launch = _raw_events(path)
    acts = [((e.get("args") or {}).get("stream"), ns(e["ts"]), ns(e["ts"] + e["dur"]),
             launch.get((e.get("args") or {}).get("correlation")))
            for e, c in zip(ev, cat, strict=True) if c in ("kernel", "gpu_memcpy", "gpu_memset")]
    first_linked: dict[Any, int] = {}
    for st, t0, _, call in acts:
        if call is not None:
            first_linked[st] = min(first_linked.get(st, t0), t0)
    queue = max((t1 for st, t0, t1, call in acts
                 if call is None and st in first_linked and t0 < first_linked[st]), default=None)
    step = steps[0]
    calls = [call for _, _, _, call in acts if call is not None and step[0] <= call < step[1]]
    if queue is None or not calls:
        return 0
    return max(0, queue - max(step[0], min(calls)))


def test_tail_tokens_per_s_over_attributed_time() -> None:
    from traceparse.analyses import diff_tail as dt
    from traceparse.timeline import Timeline

    # 4 decode steps of 32 tokens issued every 10 ms whose walls (latencies) are 25 ms:
    # each overlaps the next, so the 4 steps took 3 * 10 + 25 = 55 ms, not 4 * 25 = 100:
    # 128 tokens / 55 ms = 2327.3 tok/s (over the summed walls it read 1280)
    def walls() -> pl.DataFrame:
        st = pl.DataFrame({"rank": [0] * 4, "step": [f"s{i}" for i in range(4)],
                           "phase": ["decode"] * 4,
                           "start_ns": [i * 10_000_000 for i in range(4)],
                           "end_ns": [i * 10_000_000 + 1_000_000 for i in range(4)],
                           "wall_ns": [25_000_000] * 4, "tokens": [32] * 4})
        return step_periods(phases.attribution_windows(st).with_columns(
            (pl.col("attr_end_ns") - pl.col("start_ns")).alias("attributed_ns")))

    w = walls()
    assert w["attributed_ns"].to_list() == [10_000_000] * 3 + [25_000_000]
    # the step times the tail compares: 25 ms, then a step finished every 10 ms
    assert w["period_ns"].to_list() == [25_000_000] + [10_000_000] * 3
    t = dt.tail_diff(Timeline(), Timeline(), walls=(w, w))
    r = t.filter((pl.col("name") == "decode") & (pl.col("metric") == "tokens_per_s")).row(
        0, named=True)
    assert r["base"] == pytest.approx(128 / 0.055)


def _queued_first(k0_us: int) -> dict:
    """Two ProfilerSteps of 20 ms at 0 and 20 ms. Step 0 launches kernel A at 1 ms (the call
    returns at 1.005 ms) and A runs [k0, k0 + 5 ms); step 1 launches B at 21 ms, running
    [max(k0 + 5 ms, 21.01 ms), + 5 ms)."""
    b0 = max(k0_us + 5000, 21_010)
    return _doc(_steps([(0, k0_us), (20_000, b0)], step_us=20_000, call_at=1000,
                       kernel_us=5000))


@pytest.mark.parametrize(("k0_us", "known_us"), [(1_010, 0), (12_000, 12_000)])
def test_step_attribution_starts_where_the_gpu_is_known(tmp_path: Path, k0_us: int,
                                                         known_us: int) -> None:
    """A first kernel that starts 5 us after its call returned: the GPU was idle before it
    and step 0 is attributed from its start (0). One that starts 10.995 ms after (more than
    steps.UNRECORDED_QUEUE_NS): the GPU ran unrecorded work before it, so step 0 is
    attributed from the kernel's start (12 ms), in both step tables."""
    from traceparse.analyses.steps import step_table

    p = tmp_path / "q.pt.trace.json"
    p.write_text(json.dumps(_queued_first(k0_us)))
    tl = traceparse.load(p)
    st = phases.phase_steps(tl)
    # step 0's window: [known, 20 ms); step 1's [20, 40 ms) (B ends before its host range)
    assert st["attributed_ns"].to_list() == [(20_000 - known_us) * US, 20_000 * US]
    assert st["wall_ns"][0] == 20_000 * US  # the step's latency is unchanged
    assert st["compute_ns"][0] == 5000 * US
    # the rest of the window is idle or launch overhead: 20 - 5 = 15 ms not queued (1.01
    # ms before the kernel, 13.99 ms after); queued, only the 3 ms after it (nothing before)
    assert st["idle_ns"][0] + st["launch_overhead_ns"][0] == (20_000 - known_us - 5000) * US
    host = step_table(tl).row(0, named=True)
    assert sum(host[c] for c in PARTS) == (20_000 - known_us) * US
