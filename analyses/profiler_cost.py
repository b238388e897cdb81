"""How much host time torch.profiler itself added to a Kineto trace (docs/calibration.md).

Mechanism: every op the profiler records on the host costs the recording thread a fixed
time, ``per_event_ns``, spent in the profiler's own callbacks (taking timestamps, copying
the op's name, its input shapes and concrete inputs when ``record_shapes`` is on) and not in
the program. The recorded ops are the host ranges ``cpu_op`` (aten ops, autograd nodes),
``user_annotation`` / ``profiler_step`` (``record_function``) and ``python_function``
(``with_stack`` / ``with_modules`` frames). The CUPTI callback of each CUDA runtime call is
folded into the per-op cost: runtime calls come at a near-fixed 0.2-0.5 per op in the
traces the constant was measured on, and their own cost could not be separated.

So the profiler's host cost up to an instant is ``per_event_ns`` times the number of
recorded ops that began before it on the process, and the whole trace's cost is
``per_event_ns * events``. GPU kernels are not slowed (CUPTI timestamps them on the
device); the cost reaches the step time only where the host is the bottleneck, which is
what the replay (:mod:`traceparse.analyses.replay_host`) decides.

The constant is **one physical number**, not a per-file factor: :data:`PER_EVENT_NS` was
measured on the sweep in ``traces/gpu/sweep`` (an H200 host, torch 2.11, record_shapes on,
no stack): for each eager configuration whose host is the bottleneck the per-event cost
that makes the replayed, profiler-free step equal the step measured without the profiler
was solved for (``benchmarks/predict_sweep.py`` prints them: 2,893-4,154 ns over six
host-bound runs), and :data:`PER_EVENT_NS` is their median; :data:`PER_EVENT_SPREAD_NS` is
half their range (the uncertainty reported).
Leave-one-out (the constant re-derived without each file, then used to predict that file)
is in benchmarks/RESULTS.md. Other hosts, torch versions and recording options (with_stack
records many more, but cheaper, events) may cost differently: the figure is an estimate,
reported with its uncertainty, never a measured saving.

Non-Kineto traces (nsys) are not torch.profiler traces: their overhead is reported as 0
with ``applies = False``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.timeline import Timeline

#: Host cost of one recorded event (ns), see the module docstring.
PER_EVENT_NS = 3380.0
#: Half the range of the per-file solutions the constant was taken from (ns).
PER_EVENT_SPREAD_NS = 630.0

#: Host range kinds torch.profiler records (one callback pair each).
RECORDED_RANGE_KINDS = ("cpu_op", "user_annotation", "profiler_step", "python_function")

_KEY = ["rank", "process_id"]


def is_kineto(tl: Timeline) -> bool:
    """Whether every source of ``tl`` is a Kineto (torch.profiler) trace."""
    fmt = tl.sources["format"].cast(pl.String)
    return bool(fmt.len()) and bool(fmt.str.starts_with("kineto").all())


def host_events(tl: Timeline) -> pl.DataFrame:
    """The host ops torch.profiler recorded (ranges of :data:`RECORDED_RANGE_KINDS`):
    ``rank, process_id, start_ns, source`` (the range kind), sorted by process and start."""
    r = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(RECORDED_RANGE_KINDS)))
    cols = {"rank": pl.Int64, "process_id": pl.Int64, "start_ns": pl.Int64,
            "source": pl.String}
    out = r.select("rank", "process_id", "start_ns", pl.col("kind").cast(pl.String)
                   .alias("source")).cast(cols)  # type: ignore[arg-type]
    return (out.filter(pl.col("start_ns").is_not_null())
            .with_columns(pl.col("process_id").fill_null(0)).sort(*_KEY, "start_ns"))


def options(tl: Timeline) -> dict[str, bool]:
    """Recording options visible in the events: ``record_shapes`` (ops carry Input Dims),
    ``with_stack`` (python_function frames other than modules), ``with_modules``
    (``nn.Module:`` frames)."""
    ops = tl.ranges.filter(pl.col("kind").cast(pl.String) == "cpu_op")
    py = tl.ranges.filter(pl.col("kind").cast(pl.String) == "python_function")
    names = py["name"].cast(pl.String)
    mods = names.str.starts_with("nn.Module:").fill_null(False)
    return {"record_shapes": bool(ops.height and ops["input_dims"].is_not_null().any()),
            "with_stack": bool((~mods).any()) if py.height else False,
            "with_modules": bool(mods.any()) if py.height else False}


def _host_ns(tl: Timeline, windows: pl.DataFrame | None) -> int:
    """Host time the estimate is relative to: the summed step windows, else the span of
    the recorded host ranges per process (first start to last end)."""
    if windows is not None and windows.height:
        return int((windows["end_ns"] - windows["start_ns"]).sum())
    r = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(RECORDED_RANGE_KINDS)))
    if not r.height:
        return 0
    span = (r.with_columns(pl.col("process_id").fill_null(0)).group_by(_KEY)
            .agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("s")))
    return int(span["s"].sum())


def profiler_cost(tl: Timeline, *, windows: pl.DataFrame | None = None,
                  per_event_ns: float | None = None) -> dict[str, Any]:
    """Estimated host time torch.profiler added to ``tl`` (see the module docstring).

    Args:
        tl: the timeline.
        windows: optional ``rank, start_ns, end_ns`` windows (e.g. the steps): only events
            inside them count and ``host_ns`` is their summed length.
        per_event_ns: the per-event cost; default :data:`PER_EVENT_NS`.

    Returns:
        ``{"applies", "host_ns", "events", "events_per_ms", "per_event_ns",
        "per_event_spread_ns", "overhead_ns", "overhead_low_ns", "overhead_high_ns",
        "overhead_frac", "options", "by_source"}``; ``overhead_frac`` = overhead / host time
        (None without host time).

    Example:
        1000 recorded events in a 10 ms step at 2.9 us each: overhead 2.9 ms, 29 %.
    """
    c = PER_EVENT_NS if per_event_ns is None else float(per_event_ns)
    applies = is_kineto(tl)
    ev = host_events(tl)
    if windows is not None and windows.height:
        w = windows.select(pl.col("rank").cast(pl.Int64), pl.col("start_ns").alias("_ws"),
                           pl.col("end_ns").alias("_we")).sort("_ws")
        j = ev.sort("start_ns").join_asof(w, left_on="start_ns", right_on="_ws", by="rank",
                                          strategy="backward", check_sortedness=False)
        ev = j.filter(pl.col("_we").is_not_null() & (pl.col("start_ns") < pl.col("_we")))
    n = ev.height if applies else 0
    host = _host_ns(tl, windows)
    spread = PER_EVENT_SPREAD_NS * (c / PER_EVENT_NS)
    over = n * c
    by_source = (ev.group_by("source").len().sort("source").rows() if applies else [])
    return {"applies": applies, "host_ns": host, "events": n,
            "events_per_ms": n / (host / 1e6) if host else None,
            "per_event_ns": c, "per_event_spread_ns": spread,
            "overhead_ns": round(over),
            "overhead_low_ns": round(n * max(c - spread, 0.0)),
            "overhead_high_ns": round(n * (c + spread)),
            "overhead_frac": over / host if host else None,
            "options": options(tl), "by_source": {k: int(v) for k, v in by_source}}


def advance_fn(tl: Timeline) -> dict[tuple[int, int], np.ndarray]:
    """Sorted recorded-op start times per ``(rank, process_id)``: the profiler's host cost
    before an instant ``t`` on a process is ``per_event_ns * searchsorted(times, t)``
    (:func:`advance`). Empty for non-Kineto traces (no profiler cost)."""
    if not is_kineto(tl):
        return {}
    ev = host_events(tl)
    out: dict[tuple[int, int], np.ndarray] = {}
    for (r, p), s in ev.group_by(_KEY):
        out[(int(r), int(p))] = np.sort(s["start_ns"].to_numpy().astype(np.int64))  # type: ignore[arg-type]
    return out


def advance(times: np.ndarray | None, t: np.ndarray, per_event_ns: float) -> np.ndarray:
    """Profiler host cost (ns, int64) spent before each instant of ``t`` on a process whose
    recorded event starts are ``times`` (sorted): events that began strictly before it."""
    if times is None or times.size == 0 or per_event_ns == 0:
        return np.zeros(np.asarray(t).shape, np.int64)
    k = np.searchsorted(times, np.asarray(t, np.int64), side="left")
    return np.rint(k * per_event_ns).astype(np.int64)
