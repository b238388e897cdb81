"""Compare two traces: per kernel, op, host range, category and step, with a noise-aware
test.

For every key (kernel name, torch op name, NVTX range or annotation name, GPU category,
step) both traces give a
**distribution of instance durations** (every launch of a kernel, every call of an op,
every activity of a category or its time per step, every step). A change is only
flagged when run-to-run noise does not explain it:

* the two-sided **Mann-Whitney U test** (rank-sum; no normality assumption; ties get
  average ranks, the normal approximation uses the tie-corrected variance and a continuity
  correction) gives ``p_value`` < ``alpha`` (default 0.01), and
* the median changed by at least ``min_effect_pct`` (default 5 %) and by more than one
  tick of the coarser clock (:func:`clock_tick_ns`: whole microseconds in older Kineto
  traces), and
* both sides have at least ``min_n`` (default 3) instances (else ``insufficient``).

``delta_pct`` is the change of the median instance duration, ``total_delta_ns`` the change
of the summed time (what a kernel costs the step).

A **category**'s instances are its time per step when both traces have at least
``min_n`` steps (column ``per`` = ``step``): the summed duration of its activities launched
in each step (an activity belongs to the step its launching call, else the activity
itself, started in; a step without such activity counts 0). An activity's duration depends
on how the work was recorded, not only on how long it took: a CUDA graph traced as one
activity is hundreds of kernels' worth, so per instance a graph replay of the same kernels
reads as a +20,000 % "compute regression". Per step, the granularity cancels. Without
steps on both sides a category is compared per instance (``per`` = ``instance``), as
kernels and ops always are. Even per step, a graph's span also holds the idle between its
kernels, which a trace of the same kernels launched one by one counts as idle: when only
one trace records whole-graph activities, the categories holding them are shown but
flagged ``not comparable`` (never gated). An **op**'s instance is its host time less its
waits for the GPU in blocking calls (:func:`traceparse.analyses.host_sync.op_waits`); when
the two traces were recorded with different profiler options (:func:`recording_differs`),
op rows are ``not comparable`` too. Flags: ``regression`` (slower),
``improvement`` (faster), ``insufficient``, ``not comparable`` (above), ``only base`` /
``only new``, or empty.

The rank test is implemented with numpy (:func:`mann_whitney_u`); its p-values match
``scipy.stats.mannwhitneyu(..., method="asymptotic")`` (checked in the tests when scipy is
installed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses._dist import MIN_EFFECT_PCT
from traceparse.timeline import Timeline

LEVELS = ("step", "category", "range", "op", "kernel")


def _avg_ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-based average ranks of ``x`` and the sizes of its tie groups."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    _, first, counts = np.unique(xs, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0  # average 1-based rank of each tie group
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(avg, counts)
    return ranks, counts


def mann_whitney_u(a: Any, b: Any) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test of samples ``a`` and ``b``: ``(U of a, p-value)``.

    Normal approximation with tie correction and continuity correction (as scipy's
    ``method="asymptotic"``). All values equal -> p = 1.

    Example:
        a = [1, 2, 3], b = [4, 5, 6]: ranks of a are 1, 2, 3 -> R = 6, U = 6 - 3*4/2 = 0;
        mu = 4.5, sigma = sqrt(9 * 7 / 12) = 2.291; z = (0 - 4.5 + 0.5) / 2.291 = -1.746;
        p = erfc(1.746 / sqrt 2) = 0.0809.
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    n1, n2 = xa.size, xb.size
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    ranks, ties = _avg_ranks(np.concatenate([xa, xb]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    tie_term = float((ties ** 3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return u1, 1.0
    mu = n1 * n2 / 2.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    return u1, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def category_per_step(tl: Timeline, walls: pl.DataFrame) -> pl.DataFrame:
    """``level, name, dur_ns``: each GPU category's summed activity time in each step of
    ``walls`` (``rank, start_ns, end_ns``), one row per (category, step), 0 where the step
    launched none of it. An activity belongs to the step of its rank open at its launching
    call's start, else its own start (the one that started last where steps nest:
    :func:`traceparse.analyses.steps.step_of_launch`); one launched between steps belongs
    to none.

    Example:
        Steps [0, 100) and [100, 200); kernels of 30 and 20 ns launched at 10 and 50 and a
        copy of 5 ns launched at 120: compute 50 and 0, memory 0 and 5.
    """
    from traceparse.analyses.steps import step_of_launch

    schema = {"level": pl.String, "name": pl.String, "dur_ns": pl.Int64}
    w = walls.sort("rank", "start_ns").with_row_index("_wid")
    acts = step_of_launch(tl, w, ["category", "dur_ns"], kinds=None, own_start=True)
    # the two columns read, selected before the filter copies them
    cats = sorted(set(tl.gpu.select("kind", "category").filter(pl.col("kind") != "sync")
                      ["category"].cast(pl.String).unique().to_list()))
    if w.height == 0 or not cats:
        return pl.DataFrame(schema=schema)
    per = acts.group_by("_wid", pl.col("category").cast(pl.String)).agg(pl.col("dur_ns").sum())
    # one row per (rank, category, step): ranks in order, categories sorted, steps by start
    grid = (w.select("_wid", "rank").join(pl.DataFrame({"category": cats}), how="cross")
            .join(per, on=["_wid", "category"], how="left"))
    return (grid.sort("rank", "category", "_wid")
            .select(pl.lit("category").alias("level"), pl.col("category").alias("name"),
                    pl.col("dur_ns").fill_null(0).cast(pl.Int64)))


def graph_categories(tl: Timeline) -> set[str]:
    """The categories of ``tl``'s whole-graph activities (kind ``graph``: a CUDA graph
    traced as one activity, nsys ``--cuda-graph-trace=graph``)."""
    g = tl.gpu.select("kind", "category").filter(pl.col("kind") == "graph")
    return set(g["category"].cast(pl.String).unique().to_list())


def instances(tl: Timeline, *, step_regex: str | None = None,
              walls: pl.DataFrame | None = None, per_step: bool = False) -> pl.DataFrame:
    """Instance durations of every level: ``level, name, dur_ns``. Steps are the rows of
    :func:`traceparse.analyses.diff_tail.step_walls` (``walls`` when already computed), so
    the step median here and the tail's P50 are one computation. ``per_step``: categories
    as :func:`category_per_step` of those steps, else per activity."""
    from traceparse.analyses.diff_tail import step_walls

    g = tl.gpu.filter(pl.col("kind").cast(pl.String) != "sync")
    st = walls if walls is not None else step_walls(tl, step_regex=step_regex)
    cat = (category_per_step(tl, st) if per_step else
           g.select(pl.lit("category").alias("level"),
                    pl.col("category").cast(pl.String).alias("name"), "dur_ns"))
    parts = [
        g.filter(pl.col("kind") == "kernel").select(
            pl.lit("kernel").alias("level"), pl.col("name").cast(pl.String), "dur_ns"),
        cat,
        host_ranges(tl),
    ]
    if st.height:
        parts.append(st.select(pl.lit("step").alias("level"), pl.lit("step").alias("name"),
                               pl.col("period_ns").alias("dur_ns")))
    return pl.concat([p.cast({"dur_ns": pl.Int64}) for p in parts])


def host_ranges(tl: Timeline) -> pl.DataFrame:
    """The op and range levels' instances: ``level, name, dur_ns`` of every closed
    :data:`traceparse.analyses.host_sync.WAIT_KINDS` range, its duration less its waits for
    the GPU (docs/diff.md, "Op time"). Level ``op``: framework ops, and NVTX ranges that
    ``emit_nvtx`` wrote for them (``aten::mm, seq = 12, op_id = 34``: its counters dropped,
    so the calls of one op are one key); level ``range``: other NVTX ranges and
    ``record_function`` annotations, but the numbered step annotations
    (:data:`traceparse.analyses.steps.AUTO_STEP_RE`), which are the step level."""
    from traceparse.analyses.host_sync import op_waits
    from traceparse.analyses.optree import EMIT_NVTX_COUNTERS
    from traceparse.analyses.steps import AUTO_STEP_RE

    name = pl.col("name")
    emit = name.str.contains(EMIT_NVTX_COUNTERS)
    return (op_waits(tl).filter(~name.str.contains(AUTO_STEP_RE))
            .select(pl.when((pl.col("kind") == "cpu_op") | emit).then(pl.lit("op"))
                    .otherwise(pl.lit("range")).alias("level"),
                    name.str.replace_all(EMIT_NVTX_COUNTERS, ""),
                    (pl.col("dur_ns") - pl.col("wait_ns")).alias("dur_ns")))


def diff(base: Timeline, new: Timeline, *, alpha: float = 0.01,
         min_effect_pct: float = MIN_EFFECT_PCT, min_n: int = 3,
         step_regex: str | None = None,
         walls: tuple[pl.DataFrame, pl.DataFrame] | None = None,
         graphs: tuple[set[str], set[str]] | None = None,
         clocks: Clocks | None = None) -> pl.DataFrame:
    """Per-key comparison of two timelines (see the module docstring). ``walls``,
    ``graphs`` (:func:`graph_categories` of both) and ``clocks`` (:func:`clocks_of`) when the
    caller already has them.

    Returns:
        ``level, name, per, n_base, n_new, base_median_ns, new_median_ns, delta_pct,
        base_total_ns, new_total_ns, total_delta_ns, p_value, flag`` sorted by level
        (step, category, op, kernel) then |total_delta_ns| descending; ``per`` says what
        one instance is (``step`` for categories when both traces have ``min_n`` steps).
    """
    from traceparse.analyses.diff_tail import step_walls

    wb, wn = walls if walls else (step_walls(base, step_regex=step_regex),
                                  step_walls(new, step_regex=step_regex))
    per_step = wb.height >= min_n and wn.height >= min_n
    gb_cats, gn_cats = graphs or (graph_categories(base), graph_categories(new))
    mixed = gb_cats ^ gn_cats
    c = clocks or clocks_of(base, new)
    # ops are host time: recorded with different profiler options or by different profilers
    # they carry different profiler costs (docs/diff.md, "Recording options")
    ops_comparable = not c.recording and not c.profilers
    # a median that moved by at most one tick of the coarser clock is not a measured change
    tick = max(c.ticks)
    ib = instances(base, walls=wb, per_step=per_step)
    inew = instances(new, walls=wn, per_step=per_step)
    gb = {k: v["dur_ns"].to_numpy() for k, v in ib.group_by("level", "name")}
    gn = {k: v["dur_ns"].to_numpy() for k, v in inew.group_by("level", "name")}
    rows = []
    for key in set(gb) | set(gn):
        a = gb.get(key, np.array([], dtype=np.int64))
        b = gn.get(key, np.array([], dtype=np.int64))
        mb = float(np.median(a)) if a.size else None
        mn = float(np.median(b)) if b.size else None
        delta = (mn - mb) * 100.0 / mb if mb and mn is not None else None
        p = None
        if not a.size:
            flag = "only new"
        elif not b.size:
            flag = "only base"
        elif (key[0] == "category" and key[1] in mixed) or (
                key[0] in ("op", "range") and not ops_comparable):
            flag = "not comparable"
        elif a.size < min_n or b.size < min_n:
            flag = "insufficient"
        else:
            p = mann_whitney_u(a, b)[1]
            big = (delta is not None and abs(delta) >= min_effect_pct
                   and abs(mn - mb) > tick)  # type: ignore[operator]
            flag = ("regression" if delta > 0 else "improvement") if (  # type: ignore[operator]
                p < alpha and big) else ""
        per = "step" if key[0] == "step" or (key[0] == "category" and per_step) else "instance"
        rows.append({"level": key[0], "name": key[1], "per": per, "n_base": int(a.size),
                     "n_new": int(b.size), "base_median_ns": mb, "new_median_ns": mn,
                     "delta_pct": delta, "base_total_ns": int(a.sum()),
                     "new_total_ns": int(b.sum()), "p_value": p, "flag": flag})
    schema = {"level": pl.String, "name": pl.String, "per": pl.String, "n_base": pl.Int64,
              "n_new": pl.Int64,
              "base_median_ns": pl.Float64, "new_median_ns": pl.Float64,
              "delta_pct": pl.Float64, "base_total_ns": pl.Int64, "new_total_ns": pl.Int64,
              "p_value": pl.Float64, "flag": pl.String}
    out = pl.DataFrame(rows, schema=schema).with_columns(
        total_delta_ns=pl.col("new_total_ns") - pl.col("base_total_ns"))
    order = {lv: i for i, lv in enumerate(LEVELS)}
    return (out.with_columns(pl.col("level").replace_strict(order).alias("_o"),
                             pl.col("total_delta_ns").abs().alias("_a"))
            .sort(["_o", "_a", "name"], descending=[False, True, False]).drop("_o", "_a")
            .select(*[c for c in schema if c not in ("p_value", "flag")], "total_delta_ns",
                    "p_value", "flag"))


@dataclass(frozen=True)
class Clocks:
    """How the two traces' host and GPU times were recorded (:func:`clocks_of`): each
    one's clock tick, the profiler options on in only one (:func:`recording_differs`), and
    whether two different profilers recorded them (:func:`profilers_differ`)."""

    ticks: tuple[int, int]
    recording: dict[str, str]
    profilers: bool


def clocks_of(base: Timeline, new: Timeline) -> Clocks:
    """:class:`Clocks` of BASE and NEW, computed once for :func:`diff` and its notes."""
    return Clocks((clock_tick_ns(base), clock_tick_ns(new)), recording_differs(base, new),
                  profilers_differ(base, new))


def clock_tick_ns(tl: Timeline, *, min_values: int = 16) -> int:
    """The tick of the clock ``tl``'s times were written in: 1,000 ns when every GPU
    activity's and host range's start (from the earliest) and duration is a whole
    microsecond and there are at least ``min_values`` of them; else 1. Kineto traces
    written before 2022 hold whole microseconds (``"ts": 1694128201545, "dur": 2``): a
    2 us op there may have taken anything from 1.5 to 2.5 us. (Finer round ticks are not
    read: no profiler writes them, and hand-made timelines would match.)"""
    vals = []
    for f in (tl.gpu, tl.ranges):
        if f.height:
            t = f.select(pl.col("start_ns") - pl.col("start_ns").min(), "dur_ns").drop_nulls()
            vals += [t["start_ns"].to_numpy(), t["dur_ns"].to_numpy()]
    v = np.concatenate(vals) if vals else np.zeros(0, np.int64)
    return 1000 if v.size >= min_values and not np.any(v % 1000) else 1


def profilers_differ(base: Timeline, new: Timeline) -> bool:
    """Whether one trace was recorded by torch.profiler and the other by another profiler
    (Nsight Systems): their host ranges (Kineto ops against ``emit_nvtx``'s NVTX ranges)
    carry different recording costs."""
    from traceparse.analyses.profiler_cost import is_kineto

    return is_kineto(base) != is_kineto(new)


def recording_differs(base: Timeline, new: Timeline) -> dict[str, str]:
    """The torch.profiler options (:func:`traceparse.analyses.profiler_cost.options`, read
    from the events) on in one trace and off in the other: option -> the trace it is on in
    (``"base"`` / ``"new"``). Only between two traces that both recorded ops: in a trace
    without any (a CUDA-graph replay of the whole step records none) the options cannot
    be seen."""
    from traceparse.analyses.profiler_cost import options

    if not all(t.ranges.select((pl.col("kind").cast(pl.String) == "cpu_op").any()).item()
               for t in (base, new)):
        return {}
    ob, on = options(base), options(new)
    return {k: ("base" if ob[k] else "new") for k in ob if ob[k] != on[k]}


def _ops_waited(tl: Timeline) -> bool:
    """Whether some op or range of ``tl`` waited for the GPU inside a blocking call."""
    from traceparse.analyses.host_sync import op_waits

    return bool(op_waits(tl).select((pl.col("wait_ns") > 0).any()).item())


def time_failed(d: pl.DataFrame, fail_above_pct: float | None) -> pl.Series:
    """Per row: a flagged regression whose median rose by more than ``fail_above_pct`` %."""
    if fail_above_pct is None or d.height == 0:
        return pl.Series("failed", [False] * d.height, dtype=pl.Boolean)
    return d.select(((pl.col("flag") == "regression") & (pl.col("delta_pct") > fail_above_pct))
                    .fill_null(False).alias("failed"))["failed"]


def gate(d: pl.DataFrame, fail_above_pct: float | None) -> bool:
    """True when a flagged regression's median rose by more than ``fail_above_pct``."""
    return bool(time_failed(d, fail_above_pct).any())


@dataclass(frozen=True)
class Thresholds:
    """The gate: ``time_pct`` (``--fail-above``), ``tail_pct`` (``--fail-tail-above``),
    ``memory_pct`` / ``memory_bytes`` (``--fail-memory-above`` / ``-bytes``); None = not
    gated."""

    time_pct: float | None = None
    tail_pct: float | None = None
    memory_pct: float | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True)
class Comparison:
    """Everything ``traceparse diff`` shows; each gated frame has a ``failed`` column."""

    time: pl.DataFrame
    tail: pl.DataFrame
    memory: pl.DataFrame
    allocations: pl.DataFrame
    notes: tuple[str, ...]
    thresholds: Thresholds
    steps: tuple[int, int]

    @property
    def failed(self) -> dict[str, bool]:
        """Per gate (time, tail, memory): whether any of its rows failed."""
        return {"time": bool(self.time["failed"].any()),
                "tail": bool(self.tail["failed"].any()),
                "memory": bool(self.memory["failed"].any())}

    @property
    def verdict(self) -> str:
        """``FAIL (time, memory)`` / ``PASS`` (gates given) / ``no gate`` (none given)."""
        bad = [k for k, v in self.failed.items() if v]
        if bad:
            return f"FAIL ({', '.join(bad)})"
        t = self.thresholds
        given = [v for v in (t.time_pct, t.tail_pct, t.memory_pct, t.memory_bytes)
                 if v is not None]
        return "PASS" if given else "no gate"


def compare(base: Timeline, new: Timeline, *, names: tuple[str, str] = ("BASE", "NEW"),
            thresholds: Thresholds | None = None, alpha: float = 0.01,
            min_effect_pct: float = MIN_EFFECT_PCT, min_n: int = 3, step_regex: str | None = None,
            top_allocations: int | None = 50) -> Comparison:
    """Time (:func:`diff`), tail (:func:`traceparse.analyses.diff_tail.tail_diff`) and
    memory (:func:`traceparse.analyses.diff_memory.memory_diff`) of NEW against BASE, each
    with its ``failed`` column under ``thresholds`` (docs/diff.md)."""
    from traceparse.analyses import diff_memory as dm
    from traceparse.analyses import diff_tail as dt

    th = thresholds or Thresholds()
    walls = (dt.step_walls(base, step_regex=step_regex),
             dt.step_walls(new, step_regex=step_regex))
    graphs = (graph_categories(base), graph_categories(new))
    clocks = clocks_of(base, new)
    d = diff(base, new, alpha=alpha, min_effect_pct=min_effect_pct, min_n=min_n,
             step_regex=step_regex, walls=walls, graphs=graphs, clocks=clocks)
    t = dt.tail_diff(base, new, alpha=alpha, min_effect_pct=min_effect_pct, min_n=min_n,
                     walls=walls)
    m = dm.memory_diff(base, new, walls, min_effect_pct=min_effect_pct)
    notes = []
    note = dm.absent_note(base, new, *names)
    if note:
        notes.append(note)
    one = [n for n, mine, other in zip(names, graphs, graphs[::-1], strict=True)
           if mine and not other]
    if one:
        notes.append(f"time: {one[0]} records each CUDA-graph replay as one activity (graph-"
                     "level tracing): its span also holds the idle between the graph's "
                     "kernels, so its categories are not comparable with kernels launched "
                     "one by one (flag 'not comparable', not gated); the step rows compare")
    coarse = [n for n, t in zip(names, clocks.ticks, strict=True) if t > 1]
    if coarse:
        notes.append(f"time: {' and '.join(coarse)} hold{'s' if len(coarse) == 1 else ''} "
                     "times in whole microseconds: a median that moved by at most one tick "
                     "(1 us) is not flagged (a 2 us op there took 1.5 to 2.5 us)")
    rec = clocks.recording
    if rec:
        on = {w: [k for k, v in rec.items() if v == w] for w in ("base", "new")}
        said = "; ".join(f"{name} with {', '.join(on[w])}" for name, w in
                         zip(names, ("base", "new"), strict=True) if on[w])
        notes.append(f"time: the two traces were recorded with different profiler options "
                     f"({said}; the other without): the profiler's own cost on the host "
                     "differs, so op and range rows are flagged 'not comparable' (not "
                     "gated), and a host-bound step's time differs by the recording too")
    if clocks.profilers:
        notes.append("time: one trace was recorded by torch.profiler and the other by "
                     "another profiler: their host ranges carry different recording costs, "
                     "so op and range rows are flagged 'not comparable' (not gated)")
    waited = [n for n, tl in zip(names, (base, new), strict=True) if _ops_waited(tl)]
    if waited:
        notes.append("time: op and range rows are each op's or range's own time, less "
                     "the waits for the GPU inside it (blocking calls such as "
                     f"cudaStreamSynchronize, recorded inside them in {' and '.join(waited)})"
                     ": a wait lasts as long as the GPU work before it, so it moves with the "
                     "step, not with the op")
    if not walls[0].height and not walls[1].height:
        notes.append("tail: not compared: neither trace has steps (ProfilerStep#N, serving "
                     "step annotations or --steps REGEX; graph-capture steps are left out)")
    return Comparison(
        time=d.with_columns(time_failed(d, th.time_pct)),
        tail=t.with_columns(dt.tail_failed(t, th.tail_pct)),
        memory=m.with_columns(dm.memory_failed(m, th.memory_pct, th.memory_bytes)),
        allocations=dm.allocation_changes(base, new, top=top_allocations),
        notes=tuple(notes), thresholds=th, steps=(walls[0].height, walls[1].height))
