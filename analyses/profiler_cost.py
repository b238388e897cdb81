"""How much host time torch.profiler itself added to a Kineto trace (docs/calibration.md).

Mechanism: every op the profiler records on the host costs the recording thread time spent
in the profiler's own callbacks, not in the program. The recorded ops are the host ranges
``cpu_op`` (aten ops, autograd nodes), ``user_annotation`` / ``profiler_step``
(``record_function``) and ``python_function`` (``with_stack`` / ``with_modules`` frames).
The profiler's host cost up to an instant is the summed per-event cost of the recorded ops
that began before it on the process. GPU kernels are not slowed (CUPTI timestamps them on
the device); the cost reaches the step time only where the host is the bottleneck, which
is what the replay (:mod:`traceparse.analyses.replay_host`) decides.

**The per-event cost is read off the trace itself** (:func:`estimate`). torch.profiler's
enter callback records the op (name, input shapes and concrete inputs with
``record_shapes``, correlation id) and takes the op's start timestamp as its *last* step;
the exit callback takes the end timestamp as its *first* step and then does its own
bookkeeping. So each op's callbacks lie in the gaps just before its start and just after
its end. Where a composite op (``aten::linear``, ``aten::t``, an autograd node) calls
another recorded op from C++, no Python runs between them and unprofiled the call takes
tens of ns: the gap from the parent's start to its first child's start is that child's
enter bookkeeping, the gap from its last child's end to the parent's end that child's exit
bookkeeping (:func:`bookkeeping`). Their medians summed over the composite ops of a window
(a step) are the **visible** bookkeeping of one event there. The whole per-event cost is
larger than what the gaps show (the CUPTI callbacks of the op's CUDA runtime calls run
inside the op; other effects, such as the record buffers slowing the thread's own work,
were not separated), and it moves
with the same thing the visible part moves with: how fast this host ran the profiler in
this run. The estimate is therefore ``visible x VISIBLE_RATIO``, per step, so a step of the
trace in which the profiler ran slower is charged more (bracketed gpt2m b4: steps of
141/139/104 ms with 2.2/2.2/1.3 us enter gaps).

:data:`VISIBLE_RATIO` is **one physical number**: the whole per-event cost per unit of its
visible part. ``benchmarks/profiler_ratio.py`` solved it for every host-bound run with an
unprofiled truth (the shared H200 sweep, the H200 re-checks, the H100 sweep: 24 runs): the
ratio that makes the replayed profiler-free step equal the measured one. The constant is
their median; :data:`VISIBLE_RATIO_RANGE` their lowest and highest (the overhead's
reported low..high). Its leave-one-out (each run predicted with the median of the others' ratios)
is in benchmarks/RESULTS.md beside the previous model's (one constant in ns).
A window with fewer than :data:`MIN_SAMPLES` composite ops takes the estimate pooled over
all windows; a trace with none (nothing nested) falls back to :data:`PER_EVENT_NS`, the
previous shipped constant (median of the per-file solutions on the shared sweep).
**Python frames** (``python_function``, ``with_stack`` / ``with_modules``) are priced at
their own visible bookkeeping (:func:`bookkeeping` of ``python_function`` frames, not
scaled; never above the op price): the tracer records a frame, not an op with its inputs,
and at the op price the 118,743 frames of a vLLM graph capture came to twice the time they
were recorded in (docs/calibration.md, "Python frames"). The figure is an estimate,
reported with its uncertainty, never a measured saving.

**Graph launches** (:func:`graph_launch_costs`): under the profiler a graph launch lasts
about a microsecond per recorded kernel node and the graph's first kernel starts only after
it returns; its duration above the process's ordinary launch call is removed as measured
profiler time (not scaled by the per-op band), and the graph's kernels read it at the
call's return (docs/calibration.md "Graph launches under the profiler").

Non-Kineto traces (nsys) are not torch.profiler traces: their overhead is reported as 0
with ``applies = False``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from traceparse.timeline import Timeline

#: Host cost of one recorded event (ns) where the trace shows no bookkeeping: the median of
#: the per-file solutions on the shared sweep (the previous model, module docstring).
PER_EVENT_NS = 3380.0
#: Half the range of the per-file solutions that constant was taken from (ns).
PER_EVENT_SPREAD_NS = 630.0

#: Ratio of the whole per-event cost to its part the trace shows (see the module docstring).
VISIBLE_RATIO = 1.14
#: Lowest and highest per-run ratio it was taken from: the range the overhead is reported in.
VISIBLE_RATIO_RANGE = (0.83, 1.92)
#: Fewest bookkeeping samples (composite ops with a recorded child) a window needs for its
#: own estimate; with fewer it takes the estimate pooled over all windows.
MIN_SAMPLES = 20

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


def bookkeeping(tl: Timeline, kind: str = "cpu_op") -> pl.DataFrame:
    """The profiler's bookkeeping the trace shows: for every recorded ``cpu_op`` with at least
    one recorded ``cpu_op`` inside it on its thread (a composite op, an autograd node), the
    time from its start to its first child's start (``enter_ns``) and from its last child's
    end to its own end (``exit_ns``): ``rank, process_id, start_ns, enter_ns, exit_ns``
    sorted by process and start. Between them runs only the parent's C++ (no Python), so
    the two gaps are one child's enter and exit callbacks plus the call itself.
    ``kind="python_function"``: the same gaps of Python frames with a recorded frame inside
    them (``with_stack``); there the parent's own bytecode before its first call and after
    its last runs in the gaps too, so they bound the Python tracer's callbacks from above."""
    cols = ["rank", "process_id", "thread_id", "depth", "start_ns", "end_ns"]
    out_schema = {"rank": pl.Int64, "process_id": pl.Int64, "start_ns": pl.Int64,
                  "enter_ns": pl.Int64, "exit_ns": pl.Int64}
    if not is_kineto(tl):
        return pl.DataFrame(schema=out_schema)
    r = (tl.ranges.filter((pl.col("kind").cast(pl.String) == kind)
                          & pl.col("end_ns").is_not_null() & pl.col("depth").is_not_null())
         .select(cols).cast({"rank": pl.Int64, "process_id": pl.Int64, "thread_id": pl.Int64,
                             "depth": pl.Int64})
         .with_columns(pl.col("process_id").fill_null(0), pl.col("thread_id").fill_null(0))
         .with_row_index("_row"))
    par = r.select("rank", "process_id", "thread_id", (pl.col("depth") + 1).alias("depth"),
                   pl.col("start_ns").alias("_ps"), pl.col("end_ns").alias("_pe"),
                   pl.col("_row").alias("_prow")).sort("_ps")
    by = ["rank", "process_id", "thread_id", "depth"]
    j = (r.filter(pl.col("depth") > 0).sort("start_ns")
         .join_asof(par, left_on="start_ns", right_on="_ps", by=by, strategy="backward",
                    check_sortedness=False)
         .filter(pl.col("_prow").is_not_null() & (pl.col("_pe") >= pl.col("end_ns"))))
    g = j.group_by("rank", "process_id", "_prow").agg(
        pl.col("_ps").first().alias("start_ns"),
        (pl.col("start_ns").min() - pl.col("_ps").first()).alias("enter_ns"),
        (pl.col("_pe").first() - pl.col("end_ns").max()).alias("exit_ns"))
    return g.select(list(out_schema)).cast(out_schema).sort(*_KEY, "start_ns")  # type: ignore[arg-type]


def _visible(b: pl.DataFrame) -> float | None:
    """Visible bookkeeping of one event in ``b``'s rows: median enter + median exit (ns)."""
    if b.height < MIN_SAMPLES:
        return None
    return float(b["enter_ns"].median()) + float(b["exit_ns"].median())  # type: ignore[arg-type]


def _in_windows(ev: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """``ev`` rows that start inside a window, with the window's index ``_w``."""
    w = (windows.with_row_index("_w")
         .select("_w", pl.col("rank").cast(pl.Int64), pl.col("start_ns").alias("_ws"),
                 pl.col("end_ns").alias("_we")).sort("_ws"))
    j = ev.sort("start_ns").join_asof(w, left_on="start_ns", right_on="_ws", by="rank",
                                      strategy="backward", check_sortedness=False)
    return j.filter(pl.col("_we").is_not_null() & (pl.col("start_ns") < pl.col("_we")))


def estimate(tl: Timeline, windows: pl.DataFrame | None = None) -> dict[str, Any]:
    """The per-event cost this trace shows (module docstring): ``{"per_event_ns",
    "visible_ns", "samples", "source", "by_window"}``. ``source`` is ``"trace"`` (visible
    bookkeeping x :data:`VISIBLE_RATIO`) or ``"default"`` (:data:`PER_EVENT_NS`: fewer than
    :data:`MIN_SAMPLES` composite ops, or not a Kineto trace). With ``windows``, only
    composite ops starting inside them count, and ``by_window`` holds each window's own
    estimate (None where it has too few samples; those take the pooled one)."""
    b = bookkeeping(tl)
    by_window: list[float | None] = []
    if windows is not None and windows.height:
        b = _in_windows(b, windows)
        for i in range(windows.height):
            v = _visible(b.filter(pl.col("_w") == i))
            by_window.append(None if v is None else v * VISIBLE_RATIO)
    v = _visible(b)
    py = _visible(bookkeeping(tl, "python_function"))
    if v is None:
        return {"per_event_ns": PER_EVENT_NS, "visible_ns": None, "samples": b.height,
                "source": "default", "by_window": [None] * len(by_window),
                "python_ns": py}
    return {"per_event_ns": v * VISIBLE_RATIO, "visible_ns": v, "samples": b.height,
            "source": "trace", "by_window": by_window, "python_ns": py}


def _python_priced(ev: pl.DataFrame, cost: np.ndarray, est: dict[str, Any]) -> np.ndarray:
    """``cost`` (one per row of ``ev``, which carries ``source``) with each Python frame
    (``python_function``) priced at the Python frames' own visible bookkeeping
    (``est["python_ns"]``) where the trace shows it and it is below the op's price: the
    Python tracer's callbacks record a frame, not an op with its inputs, and a frame's
    visible gaps bound them from above (:func:`bookkeeping`)."""
    py = est.get("python_ns")
    if py is None or "source" not in ev.columns:
        return cost
    is_py = (ev["source"] == "python_function").fill_null(False).to_numpy()
    return np.where(is_py, np.minimum(cost, float(py)), cost)


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
                  per_event_ns: float | None = None,
                  price_windows: pl.DataFrame | None = None) -> dict[str, Any]:
    """Estimated host time torch.profiler added to ``tl`` (see the module docstring).

    Args:
        tl: the timeline.
        windows: optional ``rank, start_ns, end_ns`` windows (e.g. the steps): only events
            inside them count, ``host_ns`` is their summed length, and each window's events
            cost that window's own estimate (:func:`estimate`).
        per_event_ns: an explicit per-event cost for every event (overrides the estimate
            from the trace).
        price_windows: without ``windows``, every event still counts but each is priced
            at the estimate of the window it starts in (:func:`event_costs`; the pooled
            estimate outside them): the costs the replays remove (pass the steps).

    Returns:
        ``{"applies", "host_ns", "events", "events_per_ms", "per_event_ns",
        "per_event_spread_ns", "per_event_source", "visible_ns", "graph_launches",
        "graph_launch_ns", "overhead_ns", "overhead_low_ns", "overhead_high_ns",
        "overhead_frac", "options", "by_source"}``; ``graph_launch_ns`` is the graph
        launches' measured excess (:func:`graph_launch_costs`), part of every overhead
        figure and outside the band;
        ``per_event_ns`` is the mean cost of the counted events (overhead / events),
        ``per_event_source`` ``"trace"``, ``"default"`` (:data:`PER_EVENT_NS`) or
        ``"explicit"``; ``visible_ns`` the visible bookkeeping per event the estimate was
        scaled from (None unless ``"trace"``); ``overhead_low_ns`` / ``overhead_high_ns``
        the overhead at the lowest / highest ratio measured (:data:`VISIBLE_RATIO_RANGE`;
        for the constant, +/- :data:`PER_EVENT_SPREAD_NS`; the high end at most the host
        time); ``per_event_spread_ns`` half
        that range per event; ``overhead_frac`` = overhead / host time
        (None without host time).

    Example:
        1000 recorded events in a 10 ms step at 2.9 us each: overhead 2.9 ms, 29 %.
    """
    applies = is_kineto(tl)
    ev = host_events(tl)
    if windows is not None and windows.height:
        ev = _in_windows(ev, windows)
    n = ev.height if applies else 0
    host = _host_ns(tl, windows)
    if per_event_ns is not None:
        c, source, visible = float(per_event_ns), "explicit", None
        over = n * c
    else:
        est = estimate(tl, windows) if applies else {"per_event_ns": PER_EVENT_NS,
                                                     "source": "default", "visible_ns": None,
                                                     "by_window": []}
        source, visible = est["source"], est["visible_ns"]
        if (applies and n and windows is None and price_windows is not None
                and price_windows.height):
            over = float(_event_table(tl, price_windows, True)["_op"].sum())
        else:
            over = float(_python_priced(ev, _costs_of(ev, est), est).sum()) if n else 0.0
        c = over / n if n else float(est["per_event_ns"])
    lo, hi = _relative_range(source)
    spread = c * (hi - lo) / 2
    by_source = (ev.group_by("source").len().sort("source").rows() if applies else [])
    # graph launches: their measured excess, not an estimate (no band)
    gl = graph_launch_costs(tl)
    if windows is not None and windows.height and gl.height:
        gl = _in_windows(gl, windows)
    graph = float(gl["excess_ns"].sum()) if gl.height else 0.0
    return {"applies": applies, "host_ns": host, "events": n,
            "events_per_ms": n / (host / 1e6) if host else None,
            "per_event_ns": c, "per_event_spread_ns": spread,
            "per_event_source": source, "visible_ns": visible,
            "graph_launches": gl.height, "graph_launch_ns": round(graph),
            "overhead_ns": round(over + graph),
            "overhead_low_ns": round(over * max(lo, 0.0) + graph),
            # the band's high end is never more than the host time it was recorded in
            "overhead_high_ns": round(min(over * hi + graph, host) if host
                                      else over * hi + graph),
            "overhead_frac": (over + graph) / host if host else None,
            "options": options(tl), "by_source": {k: int(v) for k, v in by_source}}


def _relative_range(source: str) -> tuple[float, float]:
    """Low and high ends of the overhead relative to the estimate: the measured ratio range
    for a trace estimate, +/- the constant's spread otherwise."""
    if source == "trace":
        return VISIBLE_RATIO_RANGE[0] / VISIBLE_RATIO, VISIBLE_RATIO_RANGE[1] / VISIBLE_RATIO
    return 1 - PER_EVENT_SPREAD_NS / PER_EVENT_NS, 1 + PER_EVENT_SPREAD_NS / PER_EVENT_NS


def _costs_of(ev: pl.DataFrame, est: dict[str, Any]) -> np.ndarray:
    """Per-event cost of ``ev``'s rows: their window's estimate where ``ev`` carries a
    window index ``_w`` and that window has its own, else the pooled one."""
    pooled = float(est["per_event_ns"])
    if "_w" not in ev.columns or not est["by_window"]:
        return np.full(ev.height, pooled)
    per_w = np.array([pooled if v is None else v for v in est["by_window"]], float)
    return per_w[ev["_w"].to_numpy().astype(np.int64)]


#: Host calls that launch a CUDA/HIP graph (``cudaGraphLaunch``, ``hipGraphLaunch``).
GRAPH_LAUNCH_RE = r"(?i)graphlaunch"


def step_priced(tl: Timeline) -> dict[str, Any]:
    """:func:`profiler_cost` with each event priced at its step's estimate (the costs the
    replays remove), computed once per timeline: ``summary``'s profiler clause and the
    withheld fixes' low end of the band quote the same figures."""
    from traceparse.analyses.steps import step_windows
    from traceparse.derived import cached

    return cached(tl, "profiler_cost_steps", ("gpu", "api", "ranges", "sources"),
                  lambda: profiler_cost(tl, price_windows=step_windows(tl)))


def graph_launch_costs(tl: Timeline) -> pl.DataFrame:
    """The profiler's cost inside graph launches (docs/calibration.md "Graph launches under
    the profiler"): per graph-launch call whose kernels the trace recorded, its duration
    above the median duration of the process's other calls that launched GPU work (an
    ordinary launch; 0 where there is none): ``rank, process_id, start_ns, end_ns,
    nodes, excess_ns, device_id, first_start_ns`` (the device and start of the graph's
    first activity); the first launch of a graph (by node count) is capped at the median
    excess of the process's launches with as many nodes (its graph upload is the
    program's). Empty for non-Kineto traces."""
    from traceparse.derived import cached

    return cached(tl, "graph_launch_costs", ("gpu", "api", "sources"),
                  lambda: _graph_launch_costs(tl))


def _graph_launch_costs(tl: Timeline) -> pl.DataFrame:
    schema = {"rank": pl.Int64, "process_id": pl.Int64, "start_ns": pl.Int64,
              "end_ns": pl.Int64, "nodes": pl.Int64, "excess_ns": pl.Int64,
              "device_id": pl.Int64, "first_start_ns": pl.Int64}
    if (not is_kineto(tl) or not tl.api.height
            or not tl.api["name"].cast(pl.String).str.contains(GRAPH_LAUNCH_RE).any()):
        return pl.DataFrame(schema=schema)
    from traceparse.links import launch_join

    lj = (launch_join(tl).select("rank", "process_id", "api_name", "api_start_ns",
                                 "api_end_ns", "device_id", "start_ns", "kind")
          .filter(pl.col("api_start_ns").is_not_null() & (pl.col("kind") != "sync"))
          .select(pl.col("rank").cast(pl.Int64),
                  pl.col("process_id").fill_null(0).cast(pl.Int64),
                  pl.col("api_name").cast(pl.String), pl.col("api_start_ns").cast(pl.Int64),
                  pl.col("api_end_ns").cast(pl.Int64), pl.col("device_id").cast(pl.Int64),
                  pl.col("start_ns").cast(pl.Int64)))
    calls = (lj.sort("start_ns")
             .group_by("rank", "process_id", "api_name", "api_start_ns", "api_end_ns")
             .agg(pl.len().alias("nodes"), pl.col("device_id").first(),
                  pl.col("start_ns").first().alias("first_start_ns"))
             .with_columns((pl.col("api_end_ns") - pl.col("api_start_ns")).alias("_d"),
                           pl.col("api_name").str.contains(GRAPH_LAUNCH_RE).alias("_g")))
    if not calls["_g"].any():
        return pl.DataFrame(schema=schema)
    base = (calls.filter(~pl.col("_g")).group_by(_KEY)
            .agg(pl.col("_d").median().alias("_b")))
    # a graph's recording costs the same at every launch: what its first launch spends
    # beyond the median of the launches with as many nodes is the graph's upload (the
    # program's warm-up), not the profiler's
    grp = [*_KEY, "nodes"]
    g = (calls.filter(pl.col("_g")).join(base, on=_KEY, how="left")
         .with_columns((pl.col("_d") - pl.col("_b").fill_null(0)).clip(0).alias("_x"))
         .with_columns(pl.when(pl.col("api_start_ns") == pl.col("api_start_ns").min()
                               .over(grp))
                       .then(pl.min_horizontal("_x", pl.col("_x").median().over(grp)))
                       .otherwise(pl.col("_x")).round().cast(pl.Int64).alias("excess_ns")))
    return (g.select("rank", "process_id", pl.col("api_start_ns").alias("start_ns"),
                     pl.col("api_end_ns").alias("end_ns"), "nodes", "excess_ns",
                     "device_id", "first_start_ns")
            .cast(schema).sort(*_KEY, "start_ns"))  # type: ignore[arg-type]


def graph_launch_gpu_wait(tl: Timeline) -> tuple[int, int]:
    """How much of the graph launches' recording the GPU spent waiting: per launch with an
    excess (:func:`graph_launch_costs`), the part of the call during which its device ran
    nothing (after the device's last activity that ended before the graph's first kernel;
    none before the device's first activity), at most the excess: ``(launches that idled
    the GPU, summed ns)``."""
    g = graph_launch_costs(tl)
    if not g.height:
        return 0, 0
    acts = (tl.gpu.filter(pl.col("kind").cast(pl.String) != "sync")
            .select(pl.col("rank").cast(pl.Int64), pl.col("device_id").cast(pl.Int64),
                    pl.col("end_ns").cast(pl.Int64).alias("_prev")).sort("_prev"))
    j = (g.sort("first_start_ns")
         .join_asof(acts, left_on="first_start_ns", right_on="_prev",
                    by=["rank", "device_id"], strategy="backward", check_sortedness=False)
         .with_columns((pl.min_horizontal("end_ns", "first_start_ns")
                        - pl.max_horizontal("start_ns", pl.col("_prev").fill_null(
                            pl.col("first_start_ns"))))
                       .clip(0).alias("_idle"))
         .with_columns(pl.min_horizontal("_idle", "excess_ns").alias("_w")))
    w = j.filter(pl.col("_w") > 0)
    return w.height, int(w["_w"].sum())


def _event_table(tl: Timeline, windows: pl.DataFrame | None, costs: bool,
                 per_event_ns: float | None = None) -> pl.DataFrame:
    """Every profiler event the replays remove, sorted per process: the recorded ops (cost
    ``_op``: their window's estimate, else the pooled one, or ``per_event_ns``) and the
    graph launches (cost ``_graph``: their excess), ``rank, process_id, start_ns, _op,
    _graph`` (costs only with ``costs``)."""
    ev = host_events(tl).select(*_KEY, "start_ns", "source").with_row_index("_i")
    if costs and per_event_ns is not None:
        ev = ev.with_columns(pl.lit(float(per_event_ns)).alias("_op"))
    elif costs:
        est = estimate(tl, windows)
        if windows is not None and windows.height and est["by_window"]:
            inw = _in_windows(ev, windows).select("_i", "_w")
            ev = ev.join(inw, on="_i", how="left").sort("_i")
            per_w = np.array([est["per_event_ns"] if v is None else v
                              for v in est["by_window"]] + [est["per_event_ns"]], float)
            w = ev["_w"].fill_null(len(per_w) - 1).to_numpy().astype(np.int64)
            op = per_w[w]
            ev = ev.drop("_w")
        else:
            op = np.full(ev.height, float(est["per_event_ns"]))
        ev = ev.with_columns(pl.Series("_op", _python_priced(ev, op, est)))
    ev = ev.drop("source")
    g = graph_launch_costs(tl)
    if costs:
        ev = ev.with_columns(pl.lit(0.0).alias("_graph"))
    gr = g.select(*_KEY, "start_ns").with_columns(
        pl.lit(None, pl.UInt32).alias("_i"),
        *((pl.lit(0.0).alias("_op"), g["excess_ns"].cast(pl.Float64).alias("_graph"))
          if costs else ()))
    # a graph launch after the ops that start with it (ties keep the op order)
    return (pl.concat([ev.with_columns(pl.lit(0).alias("_s")),
                       gr.with_columns(pl.lit(1).alias("_s"))], how="diagonal_relaxed")
            .sort(*_KEY, "start_ns", "_s", "_i"))


def event_cost_parts(tl: Timeline, windows: pl.DataFrame | None = None, *,
                     per_event_ns: float | None = None
                     ) -> tuple[dict[tuple[int, int], np.ndarray],
                                dict[tuple[int, int], np.ndarray]]:
    """The two parts of :func:`event_costs`, aligned with :func:`advance_fn`'s times:
    ``(recorded ops' estimated cost, graph launches' measured excess)`` per process (each 0
    where the event is of the other kind): a band scales only the first."""
    if not is_kineto(tl):
        return {}, {}
    ev = _event_table(tl, windows, True, per_event_ns)
    ops: dict[tuple[int, int], np.ndarray] = {}
    graph: dict[tuple[int, int], np.ndarray] = {}
    for (r, p), s in ev.group_by(_KEY, maintain_order=True):
        ops[(int(r), int(p))] = s["_op"].to_numpy().astype(float)  # type: ignore[arg-type]
        graph[(int(r), int(p))] = s["_graph"].to_numpy().astype(float)  # type: ignore[arg-type]
    return ops, graph


def event_costs(tl: Timeline, windows: pl.DataFrame | None = None, *,
                per_event_ns: float | None = None) -> dict[tuple[int, int], np.ndarray]:
    """Cost (ns) of each profiler event, aligned with :func:`advance_fn`'s times: a recorded
    op costs the estimate of the window it starts in, else the pooled estimate
    (:func:`estimate`; ``per_event_ns`` instead when given); a graph launch its measured
    excess (:func:`graph_launch_costs`). Empty for non-Kineto traces."""
    ops, graph = event_cost_parts(tl, windows, per_event_ns=per_event_ns)
    return {k: v + graph[k] for k, v in ops.items()}


def advance_fn(tl: Timeline) -> dict[tuple[int, int], np.ndarray]:
    """Sorted start times of the profiler's events per ``(rank, process_id)`` (recorded ops
    and graph launches, :func:`event_costs`): the profiler's host cost before an instant
    ``t`` on a process is the summed cost of the events before it (:func:`advance`). Empty
    for non-Kineto traces (no profiler cost)."""
    if not is_kineto(tl):
        return {}
    ev = _event_table(tl, None, False)
    out: dict[tuple[int, int], np.ndarray] = {}
    for (r, p), s in ev.group_by(_KEY, maintain_order=True):
        out[(int(r), int(p))] = s["start_ns"].to_numpy().astype(np.int64)  # type: ignore[arg-type]
    return out


def advance(times: np.ndarray | None, t: np.ndarray,
            per_event_ns: float | np.ndarray) -> np.ndarray:
    """Profiler host cost (ns, int64) spent before each instant of ``t`` on a process whose
    recorded event starts are ``times`` (sorted): the events that began strictly before it,
    each at ``per_event_ns`` (one cost, or one per event aligned with ``times``)."""
    if times is None or times.size == 0:
        return np.zeros(np.asarray(t).shape, np.int64)
    k = np.searchsorted(times, np.asarray(t, np.int64), side="left")
    if np.ndim(per_event_ns) == 0:
        return np.rint(k * float(per_event_ns)).astype(np.int64)  # type: ignore[arg-type]
    cum = np.concatenate([[0.0], np.cumsum(np.asarray(per_event_ns, float))])
    return np.rint(cum[k]).astype(np.int64)
