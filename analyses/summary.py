"""One-screen summary of a timeline: window, attribution per device, top kernels, top gaps,
launch statistics, communication and a one-line verdict.

:func:`summarize` returns a plain dict ``{"sections": {name: frame}, "verdict": str}``; the
renderers (:mod:`traceparse.reports.summary_text`, the CLI's csv/json, the HTML report) draw it.
Sections are computed by the functions in :data:`SECTIONS`, in order; a new section is one
more entry there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from traceparse import schema, units
from traceparse.analyses import llm_summary
from traceparse.analyses.attribution import breakdown, check_attribution
from traceparse.analyses.comm import comm_summary
from traceparse.analyses.gaps import DEFAULT_MIN_NS, idle_gaps
from traceparse.analyses.hostrows import distinct_rows
from traceparse.analyses.launches import launch_summary
from traceparse.analyses.streamwait import NO_PRODUCER
from traceparse.derived import cached
from traceparse.timeline import Timeline


@dataclass(frozen=True)
class SummaryOptions:
    """Knobs shared by every section.

    Attributes:
        top: rows kept in top-N sections.
        min_gap_ns: shortest idle gap listed.
        gaps: :func:`traceparse.analyses.gaps.idle_gaps` already computed with ``min_gap_ns`` (the
            report passes its own so the gaps are found once), or None to compute them.
    """

    top: int = 10
    min_gap_ns: int = DEFAULT_MIN_NS
    gaps: pl.DataFrame | None = None


SectionFn = Callable[[Timeline, SummaryOptions], pl.DataFrame]

#: Verdict wording per attribution part: (label, what the share is of).
VERDICTS = {
    "compute_ns": ("compute-bound", "compute"),
    "communication_ns": ("communication-bound", "exposed communication"),
    "memory_ns": ("memory-copy-bound", "memcpy/memset"),
    "launch_overhead_ns": ("launch-bound", "launch overhead (the host issuing work)"),
    "warmup_ns": ("warm-up-dominated", "warm-up (module loading, compilation, graph capture)"),
    "host_sync_ns": ("host-sync-bound", "the host blocked in a synchronising call"),
    "idle_ns": ("idle-bound", "idle (no GPU work queued)"),
}


def window_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """One row: the trace's time span and how many devices, kernels, copies and calls."""
    span = tl.span_ns() or (0, 0)
    kinds = tl.gpu["kind"]  # compared as codes: no string per activity
    return pl.DataFrame({
        "start_ns": [span[0]], "end_ns": [span[1]], "dur_ns": [span[1] - span[0]],
        "devices": [distinct_rows(tl.gpu.select("rank", "device_id")).height],
        "kernels": [int((kinds == "kernel").sum())],
        "memops": [int(kinds.is_in(["memcpy", "memset"]).sum())],
        "api_calls": [tl.api.height]})


def breakdown_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """:func:`traceparse.analyses.attribution.breakdown` (checked to sum to the window)."""
    return check_attribution(breakdown(tl))


def top_kernels_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """Kernels grouped by name: instances, total/avg ns and share of summed kernel time."""
    k = tl.gpu.select("kind", "name", "dur_ns").filter(pl.col("kind") == "kernel")
    if k.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "instances": pl.UInt32,
                                    "total_ns": pl.Int64, "avg_ns": pl.Float64,
                                    "pct": pl.Float64})
    total = int(k["dur_ns"].sum())
    # grouped on the name's dictionary codes; only the distinct names become strings (a
    # String copy of every kernel's name was 2.5 GB at 10M kernels)
    return (k.group_by("name")
            .agg(pl.len().alias("instances"), pl.col("dur_ns").sum().alias("total_ns"),
                 pl.col("dur_ns").mean().alias("avg_ns"))
            .with_columns(pl.col("name").cast(pl.String),
                          (pl.col("total_ns") * 100.0 / max(total, 1)).alias("pct"))
            .sort(["total_ns", "name"], descending=[True, False])
            .head(opts.top))


def top_gaps_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """The largest idle gaps (:func:`traceparse.analyses.gaps.idle_gaps`)."""
    gaps = opts.gaps if opts.gaps is not None else idle_gaps(tl, min_ns=opts.min_gap_ns)
    return gaps.head(opts.top)


def launches_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """Launch, queue and kernel time distributions
    (:func:`traceparse.analyses.launches.launch_summary`)."""
    return launch_summary(tl)


def savings_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """What removing launch overhead or exposed communication would save, per rank, from the
    what-if replay (:func:`traceparse.analyses.savings.savings`: the numbers ``whatif``
    prints), next to the attribution part each removes."""
    from traceparse.analyses.savings import savings

    return savings(tl)


def straggler_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """Ranks that start their collectives last
    (:func:`traceparse.analyses.comm.straggler_summary`): per straggling (rank, device), the
    calls it was last to start and their summed skew (what its lateness cost the others);
    empty without collectives seen on two or more ranks/devices."""
    from traceparse.analyses.comm import straggler_summary

    return straggler_summary(tl)


def communication_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """NCCL/RCCL time per collective, exposed vs overlapped
    (:func:`traceparse.analyses.comm.comm_summary`)."""
    return comm_summary(tl).head(opts.top)


def gpu_metrics_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """Measured GPU metrics per top kernel (:func:`traceparse.analyses.metrics.kernel_metrics`),
    with the sampling rate; empty without nsys GPU metrics."""
    from traceparse.analyses.metrics import kernel_metrics, sample_rate_hz

    km = kernel_metrics(tl)
    if km.height == 0:
        return km
    rate = sample_rate_hz(tl.metrics)
    return km.head(opts.top).with_columns(
        pl.lit(rate / 1e3 if rate else None, dtype=pl.Float64).alias("sampled_khz"))


def gpu_clock_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """SM clock during the kernels vs the device's listed clock (throttling), from nsys GPU
    metrics (:func:`traceparse.analyses.metrics.kernel_clock`); empty without them."""
    from traceparse.analyses.metrics import kernel_clock

    return kernel_clock(tl)


def memory_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """Device memory peaks (:func:`traceparse.analyses.memory.peaks`); empty without
    memory events."""
    from traceparse.analyses.memory import peaks

    return peaks(tl)


def graphs_section(tl: Timeline, opts: SummaryOptions) -> pl.DataFrame:
    """What CUDA/HIP graphs in the trace mean for the attribution
    (:func:`traceparse.analyses.graphs.graph_notes`), one note per row."""
    from traceparse.analyses.graphs import graph_notes

    return pl.DataFrame({"note": graph_notes(tl)}, schema={"note": pl.String})


SECTIONS: dict[str, SectionFn] = {
    "window": window_section,
    "breakdown": breakdown_section,
    "top_kernels": top_kernels_section,
    "top_gaps": top_gaps_section,
    "launches": launches_section,
    "communication": communication_section,
    "phases": llm_summary.phases_section,
    "phase_mix": llm_summary.phase_mix_section,
    "layers": llm_summary.layers_section,
    "op_tree": llm_summary.op_tree_section,
    "gpu_metrics": gpu_metrics_section,
    "gpu_clock": gpu_clock_section,
    "memory": memory_section,
    "graphs": graphs_section,
    "savings": savings_section,
    "stragglers": straggler_section,
}


#: A straggler is named when its summed collective skew is at least this share of the
#: longest device window.
STRAGGLER_MIN_FRAC = 0.05

#: Verdict of an idle-bound window whose gaps are mostly ``stream_wait``
#: (:mod:`traceparse.analyses.streamwait`).
STREAM_WAIT_VERDICT = ("stream-wait-bound", "idle with work queued on a stream that waited "
                       "on an event (cross-stream wait)")
#: Added when the largest stream wait's event has no producer in the trace: "idle" is
#: then what the trace records, not what the GPU did (docs/analyses.md).
UNRECORDED_PRODUCER = ("; an event completes only when its stream reaches it, so with "
                       "the producer outside this trace the GPU most likely ran work the "
                       "trace does not record while the stream waited")


def verdict(bd: pl.DataFrame, gaps: pl.DataFrame | None = None,
            stragglers: pl.DataFrame | None = None,
            sync_ops: pl.DataFrame | None = None) -> str:
    """One line naming the largest attribution part over all devices, e.g.
    ``"launch-bound: 59.2% of the window is launch overhead (the host issuing work)"``.

    Host sync names the blocking call that overlaps the most host-sync time, and the
    framework op that made most of it when one did (``sync_ops``:
    :func:`traceparse.analyses.host_sync.host_sync_by_op`; e.g. ``mostly cudaMemcpyAsync,
    from aten::to``); idle-bound traces get the most common gap cause (by time) among
    ``gaps``; warm-up-dominated traces also give the largest steady-state part (the window
    without warm-up), so a one-off module load does not hide what the run is bound by.
    """
    if bd.height == 0 or int(bd["window_ns"].sum()) == 0:
        return "no GPU activity"
    window = int(bd["window_ns"].sum())
    sums = {p: int(bd[p].sum()) if p in bd.columns else 0 for p in VERDICTS}
    part = max(VERDICTS, key=lambda p: (sums[p], -list(VERDICTS).index(p)))
    label, what = VERDICTS[part]
    cause = _top_by_time(gaps, "cause") if part == "idle_ns" and gaps is not None \
        and gaps.height else None
    if cause == "stream_wait":  # work was queued: a stream waited on an event, not the host
        label, what = STREAM_WAIT_VERDICT
    line = f"{label}: {sums[part] * 100.0 / window:.1f}% of the window is {what}"
    if part == "host_sync_ns":
        line += _sync_clause(sync_ops)
    if cause == "stream_wait" and gaps is not None:
        top = gaps.filter(pl.col("cause") == "stream_wait").row(0, named=True)
        line += f" (largest: {top['cause_name']})"
        if NO_PRODUCER in str(top["cause_name"]):
            line += UNRECORDED_PRODUCER
    elif cause and gaps is not None:
        line += _idle_clause(gaps, cause)
    if stragglers is not None and stragglers.height:
        top = stragglers.row(0, named=True)
        longest = int(bd["window_ns"].max() or 0)  # type: ignore[arg-type]
        if top["skew_ns"] >= STRAGGLER_MIN_FRAC * longest:
            # with two ranks the only other rank waited the skew itself: said once
            waited = (" the other rank waited" if top["wait_ns"] == top["skew_ns"] else
                      " (the first rank to arrive at each waited that long; the other ranks "
                      f"waited {units.duration(top['wait_ns'])} in all)")
            line += (f"; rank {top['straggler_rank']} straggles: it started "
                     f"{units.plural(top['calls'], 'collective')} last, "
                     f"{units.duration(top['skew_ns'])} of summed skew{waited}")
    if part == "warmup_ns":
        steady = window - sums["warmup_ns"]
        rest = max((p for p in VERDICTS if p != "warmup_ns"),
                   key=lambda p: (sums[p], -list(VERDICTS).index(p)))
        if steady > 0:
            line += (f"; steady state (without warm-up) is {VERDICTS[rest][0]}: "
                     f"{sums[rest] * 100.0 / steady:.1f}% {VERDICTS[rest][1]}")
            if rest == "host_sync_ns":  # warm-up has priority: these are steady-state syncs
                line += _sync_clause(sync_ops)
            steady_cause = (_top_by_time(gaps, "cause") if rest == "idle_ns"
                            and gaps is not None and gaps.height else None)
            if steady_cause and gaps is not None:  # the idle gaps: warm-up's are not idle
                line += _idle_clause(gaps, steady_cause)
    return line


def _idle_clause(gaps: pl.DataFrame, cause: str) -> str:
    """``; largest gaps mostly CAUSE (NAME)``: the gap cause with the most idle time and,
    when the gaps name one, the call or range of that cause with the most idle time
    (``cuda_api (cudaMalloc)``: the host in an allocation with nothing in flight,
    docs/analyses.md)."""
    name = (_top_by_time(gaps.filter(pl.col("cause") == cause), "cause_name")
            if "cause_name" in gaps.columns else None)
    return f"; largest gaps mostly {cause}" + (f" ({name})" if name else "")


def _sync_clause(sync_ops: pl.DataFrame | None) -> str:
    """`` (mostly CALL, from OP)``: the blocking call with the most host-sync time and the
    framework op that made most of it (:func:`verdict`); empty without ``sync_ops``."""
    if sync_ops is None or sync_ops.height == 0:
        return ""
    from traceparse.analyses.host_sync import by_call, sync_origin

    call = str(by_call(sync_ops)["name"][0])
    op = sync_origin(sync_ops, call)
    return f" (mostly {call}" + (f", from {op})" if op else ")")


def _top_by_time(gaps: pl.DataFrame, col: str) -> str | None:
    """The value of ``col`` with the most *idle* gap time, over the gaps whose largest part
    is idle (``kind`` ``idle``): the verdict names the cause of idle time, not of gap time
    the attribution gave to launch overhead, warm-up or host sync, so an ``issuing`` gap
    (mostly launch overhead, :func:`traceparse.analyses.gaps.is_issuing`) never names it;
    ties by name; None without any idle gap."""
    weight = "idle_ns" if "idle_ns" in gaps.columns else "dur_ns"
    if "kind" in gaps.columns:
        gaps = gaps.filter(pl.col("kind") == "idle")
    g = gaps.filter(pl.col(col).is_not_null() & (pl.col(weight) > 0))
    if g.height == 0:
        return None
    top = (g.group_by(col).agg(pl.col(weight).sum())
           .sort([weight, col], descending=[True, False]))
    return str(top[col][0])


def _section(tl: Timeline, name: str, fn: SectionFn, opts: SummaryOptions) -> pl.DataFrame:
    """Section ``name`` of ``tl``, computed once per timeline and options (and kept in the
    cache entry's derived store, :mod:`traceparse.derived_store`, when ``tl`` came from the
    parse cache). Gaps passed in by the caller are the caller's: that section is not kept."""
    if name == "top_gaps" and opts.gaps is not None:
        return fn(tl, opts)
    key = f"summary:{name}:top={opts.top}:min_gap_ns={opts.min_gap_ns}"
    return cached(tl, key, tuple(schema.TABLES), lambda: fn(tl, opts))


def summarize(tl: Timeline, *, top: int = 10, min_gap_ns: int = DEFAULT_MIN_NS,
              sections: Sequence[str] | None = None, gaps: pl.DataFrame | None = None
              ) -> dict[str, Any]:
    """Compute the sections of :data:`SECTIONS` (all, or those named in ``sections``, in
    table order) and the verdict.

    Args:
        tl: the timeline.
        top: rows kept in top-N sections.
        min_gap_ns: shortest idle gap listed.
        sections: names of the sections wanted; None for all.
        gaps: precomputed :func:`traceparse.analyses.gaps.idle_gaps` (same ``min_gap_ns``), if any.

    Returns:
        ``{"sections": {name: frame, ...}, "verdict": str}``, sections in order.
    """
    opts = SummaryOptions(top=top, min_gap_ns=min_gap_ns, gaps=gaps)
    wanted = SECTIONS if sections is None else {k: v for k, v in SECTIONS.items()
                                                 if k in sections}
    out = {name: _section(tl, name, fn, opts) for name, fn in wanted.items()}
    # the verdict's inputs: the sections computed above, else the same memoised sections
    bd, strag = (out[name] if name in out else _section(tl, name, SECTIONS[name], opts)
                 for name in ("breakdown", "stragglers"))
    sync_ops = None
    if bd.height and int(bd["host_sync_ns"].sum()) > 0:
        from traceparse.analyses.host_sync import host_sync_by_op

        sync_ops = host_sync_by_op(tl)
    # the verdict names the cause of the idle time of every gap, not of the gaps a page
    # happens to list (summary shows 10, the report 50: casio was idle-bound by the one and
    # stream-wait-bound by the other)
    every_gap = gaps if gaps is not None else idle_gaps(tl, min_ns=min_gap_ns)
    line, caveat = verdict_line(tl, bd, every_gap, strag, sync_ops)
    return {"sections": out, "verdict": line, "untraced_gpu_work": caveat}


def verdict_line(tl: Timeline, bd: pl.DataFrame, gaps: pl.DataFrame,
                 stragglers: pl.DataFrame, sync_ops: pl.DataFrame | None
                 ) -> tuple[str, str | None]:
    """The summary's verdict and its idle caveat (``untraced_gpu_work``): :func:`verdict`
    of the breakdown, every gap, the stragglers and the host-sync ops, then the steps'
    view, the GPU metrics' caveat and the profiler's cost, as far as ``tl`` holds them."""
    line = verdict(bd, gaps, stragglers, sync_ops)
    line += _step_clause(tl, bd, line)
    caveat = None
    if tl.metrics.height:
        from traceparse.analyses.metrics import idle_caveat

        caveat = idle_caveat(tl)
        # the caveat concerns GPU-idle time: say it where the verdict is about such time
        if caveat and not line.startswith(tuple(VERDICTS[p][0] for p in BUSY_PARTS)):
            line += f"; but {caveat}"
    line += _profiler_clause(tl, line)
    return line, caveat


#: Verdicts about the host (its issuing, its syncs, its idle gaps): the profiler's own host
#: cost is part of what they measure.
HOST_VERDICTS = tuple(VERDICTS[p][0] for p in ("launch_overhead_ns", "host_sync_ns", "idle_ns"))


#: The profiler clause of a warm-up verdict with a host-bound steady state needs the
#: profiler's central share of the host time to reach this (``hta__alexnet``: 0% of 43 s).
STEADY_CLAUSE_FRAC = 0.01


def _profiler_clause(tl: Timeline, line: str) -> str:
    """For a host-bound verdict (or a warm-up verdict whose steady state is host-bound) on a
    torch.profiler trace, how much of the host time the profiler itself may have added
    (:func:`traceparse.analyses.profiler_cost.profiler_cost`: each recorded op at its
    step's per-op cost, as ``predict`` and the fixes' profiler-free replay remove it).
    Never a fix: it only says how much of the measured host time would not be there
    without the profiler."""
    from traceparse.analyses.profiler_cost import graph_launch_gpu_wait, step_priced
    from traceparse.analyses.savings import windows_of

    dur = units.duration
    # a warm-up verdict whose steady state is host-bound measures the host too
    steady = any(f"(without warm-up) is {v}:" in line for v in HOST_VERDICTS)
    if not line.startswith(HOST_VERDICTS) and not steady:
        # the graph launches' recording is measured, and where the GPU waited for it, it
        # idles the GPU whatever the verdict: said when that holds at least
        # GRAPH_CLAUSE_FRAC of the GPU window
        def rec() -> dict[str, int]:
            n, x = graph_launch_gpu_wait(tl)
            win = int(windows_of(tl)["measured_ns"].sum()) if n else 0
            return {"launches": n, "excess_ns": x, "window_ns": win}

        r = cached(tl, "graph_launch_recording", ("gpu", "api", "sources"), rec)
        n, x, win = r["launches"], r["excess_ns"], r["window_ns"]
        if not win or x < GRAPH_CLAUSE_FRAC * win:
            return ""
        return (f"; under the profiler the GPU waited {dur(x)} ({100 * x / win:.0f}% of "
                f"the GPU window) for {n:,} graph launches recording their kernel nodes, "
                "time an unprofiled run would not spend")
    # each recorded op priced at its step's estimate: the costs the replays remove
    pc = step_priced(tl)
    if not pc["applies"] or not pc["host_ns"] or not pc["overhead_ns"]:
        return ""
    if steady and pc["overhead_frac"] < STEADY_CLAUSE_FRAC:
        return ""  # a warm-up trace's host time is mostly the warm-up's
    # the band's high end is capped at the host time: then it is no bound, and not said
    # (hta__nccl_data: ~35 us per op, "366 ms to 667 ms of the 667 ms")
    capped = pc["overhead_high_ns"] >= pc["host_ns"]
    share = f"{100 * pc['overhead_frac']:.0f}%"
    span = (f"at least {dur(pc['overhead_low_ns'])} of the {dur(pc['host_ns'])} of host "
            f"time (central estimate {share}; its high end is more than all of it)"
            if capped else
            f"{dur(pc['overhead_low_ns'])} to {dur(pc['overhead_high_ns'])} ({share}) of the "
            f"{dur(pc['host_ns'])} of host time")
    return (f"; the profiler itself may have added {span} ({pc['events']:,} recorded ops at "
            f"~{dur(pc['per_event_ns'])} each"
            + (f", and {dur(pc['graph_launch_ns'])} recorded inside "
               f"{pc['graph_launches']:,} graph launches" if pc["graph_launches"] else "")
            + ")")


#: Share of the summed GPU windows the graph launches' recording must hold for a verdict
#: that is not host-bound to mention it.
GRAPH_CLAUSE_FRAC = 0.05


#: Attribution parts during which the GPU ran traced work; the others are GPU-idle time.
BUSY_PARTS = ("compute_ns", "communication_ns", "memory_ns")
#: The verdict adds the steps' own view when the verdict part's share over the steps differs
#: from its share over the device window by at least this many percentage points.
STEP_DISAGREE_PTS = 10.0


def _step_clause(tl: Timeline, bd: pl.DataFrame, line: str) -> str:
    """``"; over its N steps (W of wall time) compute is S% and idle I%"`` when the steps
    (:func:`traceparse.analyses.phases.phase_steps`: profiler steps or engine step ranges)
    and the device window tell different stories: the steps hold host-only time before the
    first or after the last GPU activity, which the device window leaves out."""
    if bd.height == 0 or not int(bd["window_ns"].sum()) or not tl.ranges.height:
        return ""
    from traceparse.analyses import phases

    st = cached(tl, "summary:phase_steps", tuple(schema.TABLES),
                lambda: phases.phase_steps(tl))
    # the steps' attribution windows (never overlapping): their walls overlap where the
    # GPU falls behind the host, and a sum of walls counts that time once per step
    if st.height == 0 or "compute_ns" not in st.columns or not int(st["attributed_ns"].sum()):
        return ""
    window, wall = int(bd["window_ns"].sum()), int(st["attributed_ns"].sum())
    part = next((p for p in VERDICTS if line.startswith(VERDICTS[p][0] + ":")), None)
    if part is None or part not in st.columns:
        return ""
    in_window = 100.0 * int(bd[part].sum()) / window
    in_steps = 100.0 * int(st[part].fill_null(0).sum()) / wall
    if abs(in_window - in_steps) < STEP_DISAGREE_PTS:
        return ""
    top = max((p for p in VERDICTS if p in st.columns),
              key=lambda p: (int(st[p].fill_null(0).sum()), -list(VERDICTS).index(p)))
    shares = f"{VERDICTS[part][1]} is {in_steps:.1f}%"
    if top != part:
        shares += (f" and {VERDICTS[top][1]} "
                   f"{100.0 * int(st[top].fill_null(0).sum()) / wall:.1f}%")
    return (f"; over its {units.plural(st.height, 'step')} ({units.duration(wall)} of wall "
            f"time, the window being {units.duration(window)} from the first to the last GPU "
            f"activity) {shares}")
