"""The verdict and ranked recommendations of the report, from the payload's numbers.

Every recommendation carries: ``id``, ``title``, ``saving_ns`` (the GPU wall time the fix
could recover **on one rank**: the rank where it saves most; never a sum over ranks),
``saving_pct`` (of that rank's window; of the summed device windows for ``tensor-cores``,
whose roofline points carry no rank), ``evidence`` (sentences with the numbers
and the kernels or gaps behind them), ``how`` (what to do) and ``estimate`` (how
``saving_ns`` was computed). They are ranked by ``saving_ns`` (ties by id), so the first one
is the biggest lever.

Rules and their savings estimates:

Every saving below except ``tensor-cores`` and ``overlap-copies`` is the savings engine's
row for that fix (:mod:`traceparse.analyses.savings`, mechanisms in
:mod:`traceparse.analyses.mechanisms`): the same number ``summary``, ``whatif --fix`` and
``traceparse fixes`` print.

``cuda-graphs`` (launch-bound; "HIP graphs" on ROCm traces)
    Fires when the engine's ``no_launch_overhead`` saving is at least 5% of the rank's
    window: the host's issuing time of each step's region removed.
``host-sync`` (the GPU drained at synchronising calls)
    Fires when the ``host_sync`` replay (blocking syncs not waiting) saves at least 5%.
``fusion`` (chains of memory-bound kernels)
    Fires when the ``fusion`` replay saves at least 2%.
``pinned-memory`` (pageable copies)
    Fires when the ``pinned_memory`` replay saves at least 1%.
``warm-up`` (one-off warm-up in the first steps)
    Fires when the ``warm_up`` change saves at least 5%.
``overlap-comm`` (exposed NCCL time)
    Fires when a rank's exposed communication is at least 2% of its window and the replay
    saves time. Saving = the savings engine's ``overlap_comm`` figure for that rank (what
    ``whatif --overlap-comm`` prints), never more than its exposed communication.
``tensor-cores`` (GEMMs far under their roof; only with roofline data)
    Fires for GEMM/convolution kernels (class ``gemm`` or ``conv`` of
    :mod:`traceparse.analyses.kclass`, the one kernel classifier)
    that reach less than 30% of the attainable FLOP/s at their arithmetic intensity and take
    at least 2% of the time. Saving = for each such kernel ``time * (1 - pct_of_roof / 50)``:
    the time saved if it reached 50% of its roof (a conservative target for a tensor-core,
    lower-precision kernel).
``overlap-copies`` (exposed memcpy/memset)
    Fires when copies/memsets with nothing else running are at least 10% of a rank's window
    (the rank with the most).
    Saving = that exposed copy time (if every copy overlapped compute on another stream,
    or were avoided by keeping data on the device).
``input-pipeline`` (GPU waiting for input data)
    Fires only with data-loading evidence (the engine has an ``input_pipeline`` row only
    then) when that replay saves at least 10% of the rank's window.

For a torch.profiler trace every fix the engine replays also carries
``saving_unprofiled_ns`` of ``window_unprofiled_ns``: the same replay with the profiler's
own recording cost removed from both sides (:func:`traceparse.analyses.savings.savings`),
what the fix saves in a run without the profiler. Fixes stay ranked by ``saving_ns``
(docs/analyses.md says why).

``occupancy`` (launches with fewer blocks than the GPU has SMs)
    Fires when kernels holding at least 2% of a rank's window
    (:func:`traceparse.analyses.occupancy.underfilled`) were launched with fewer blocks than
    SMs and their time at stake is at least 2% of that window. Saving = the sum over those
    launches of ``(time - shortest kernel) x (1 - blocks / SMs)``, an upper bound; the
    evidence names the kernel, its grid and block, the SM count and the time.
``stream-wait`` (a stream held back by an event wait)
    Fires when gaps caused by ``stream_wait`` (:mod:`traceparse.analyses.streamwait`) total
    at least 10% of the rank's window. Saving = their time, an upper bound.

When the summary's caveat says the GPU's own counters saw work in the trace's idle time
(``untraced_gpu_work``, :func:`traceparse.analyses.metrics.idle_caveat`), the fixes built
on that idle time (:data:`IDLE_TIME_FIXES`) are not offered: the time they would save was
not idle hardware.

The verdict names the part of the attribution that dominates the window. When the payload
has a ``summary`` section (``traceparse summary``), its verdict line is the headline,
verbatim, so the report and the command line say the same thing.
"""

from __future__ import annotations

from typing import Any

from traceparse import units
from traceparse.analyses.savings import FIX_OF
from traceparse.analyses.streamwait import NO_PRODUCER
from traceparse.analyses.summary import VERDICTS
from traceparse.kernelname import short_kernel_name
from traceparse.reports.rec_base import (
    COMM_MIN_FRAC,
    COPY_MIN_FRAC,
    FUSION_MIN_FRAC,
    IDLE_MIN_FRAC,
    LAUNCH_MIN_FRAC,
    PINNED_MIN_FRAC,
    _by_rank,
    _ms,
    _pct,
    _rec,
)
from traceparse.reports.recommend_hw import _occupancy, _tensor_cores
from traceparse.vendor import amd_vendors

#: Each part's label (the summary's own, :data:`traceparse.analyses.summary.VERDICTS`)
#: and how the detail line names it.
_BOUND = {
    "compute_ns": (VERDICTS["compute_ns"][0], "compute kernels"),
    "memory_ns": (VERDICTS["memory_ns"][0], "memcpy/memset with nothing else running"),
    "communication_ns": (VERDICTS["communication_ns"][0], "exposed communication"),
    "launch_overhead_ns": (VERDICTS["launch_overhead_ns"][0], "waiting for kernel launches"),
    "warmup_ns": (VERDICTS["warmup_ns"][0],
                  "warm-up (module loading, compilation, graph capture)"),
    "host_sync_ns": (VERDICTS["host_sync_ns"][0], "the host blocked in a synchronising call"),
    "idle_ns": (VERDICTS["idle_ns"][0], "idle GPU (no work, no launch in flight)"),
}


def verdict(payload: dict[str, Any]) -> dict[str, Any]:
    """Headline of the report: what bounds this run."""
    attr = payload.get("attribution")
    if not attr or not attr["totals"]["window_ns"]:
        summary = payload.get("summary") or {}
        if summary.get("ncu_page"):  # an ncu page alone: verbatim, as `traceparse summary`
            return {"headline": summary["verdict"], "detail": None, "bound": None}
        k = payload.get("kernels", {})
        return {"headline": "No GPU window to attribute." if not k.get("instances") else
                f"{k['instances']:,} kernels, {_ms(k['total_ns'])} of kernel time.",
                "detail": None, "bound": None}
    t = attr["totals"]
    w = t["window_ns"]
    t = {p: t.get(p, 0) for p in (*_BOUND, "window_ns")}
    key = max(_BOUND, key=lambda p: (t[p], p))
    bound, what = _BOUND[key]
    parts = ", ".join(f"{_BOUND[p][1].split(' (')[0]} {_pct(t[p], w):.1f}%"
                      for p in sorted(_BOUND, key=lambda p: (-t[p], p)) if t[p])
    headline = f"This run is {bound}: {_pct(t[key], w):.1f}% of the GPU time is {what}."
    summary = payload.get("summary")
    if summary and summary.get("verdict"):
        headline = str(summary["verdict"])  # verbatim: `traceparse summary` says the same
        # and so does the label: the summary's verdict may name what the largest part
        # hides (stream-wait-bound where the idle GPU had work queued behind an event)
        bound = headline.split(":", 1)[0]
    return {"headline": headline,
            "detail": f"GPU window {_ms(w)} (summed over devices): {parts}.",
            "bound": bound}


def _worst_rank(payload: dict[str, Any], part: str) -> tuple[int, int, int] | None:
    """(rank, part_ns, rank window_ns) of the rank with the most ``part``: multi-rank
    savings are per rank, never a sum over ranks."""
    ranks = _by_rank(payload)
    if not ranks:
        return None
    rank = max(ranks, key=lambda r: (ranks[r].get(part, 0), -r))
    return rank, ranks[rank].get(part, 0), ranks[rank].get("window_ns", 0)


def _engine(payload: dict[str, Any], change: str) -> dict[str, Any] | None:
    """The savings engine's row for ``change`` that headlines quote (``bounds_job``, as
    :func:`traceparse.analyses.savings.best`; rows copied into the payload's summary)."""
    rows = [r for r in payload.get("summary", {}).get("savings", [])
            if r["change"] == change and r.get("bounds_job")]
    return rows[0] if rows else None


def graphs_word(payload: dict[str, Any]) -> str:
    """``HIP graphs`` where HIP calls were recorded or the devices are AMD's (the CLI's
    rule, :mod:`traceparse.vendor`), else ``CUDA graphs``."""
    hip = payload.get("evidence", {}).get("hip", False) or amd_vendors(
        d.get("vendor") for d in payload.get("devices", []))
    return "HIP graphs" if hip else "CUDA graphs"


def _launch(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "no_launch_overhead")
    if top is None:
        return []
    graphs = graphs_word(payload)
    r = top["rank"]
    # the attribution's launch overhead (the figure the attribution table shows), and the
    # engine's bound: all the time the rank's GPU was not busy, the most a graph gives back
    lo = _by_rank(payload).get(r, {}).get("launch_overhead_ns", 0)
    ev = [f"Rank {r}: launch overhead {_ms(lo)} = "
          f"{_pct(lo, top['measured_ns']):.1f}% of its {_ms(top['measured_ns'])} "
          "window: the GPU was idle while the host was issuing the next kernel (in a "
          "launch call, or in the framework ops and Python that issue it; not blocked in "
          "a synchronising call: that is host sync). In all, its GPU was not busy for "
          f"{_ms(top['bound_ns'])}, the most a graph can give back.",
          f"Replaying rank {r} with its issuing time removed (whatif --fix cuda-graphs) "
          "shortens "
          f"its window to {_ms(top['predicted_ns'])}: {_ms(top['saving_ns'])} saved.",
          *_gap_evidence(payload, ("issuing",), r, 2)]
    if top["saving_ns"] > lo:
        ev.insert(2, f"Rank {r}: the replay saves more than the launch overhead because a "
                  "graph removes all of its region's host issuing (the capture note gives "
                  "it), also what ran while the GPU was busy, and its kernels' "
                  "launch-to-start latency: later host work (synchronising calls, its own "
                  "CPU work) comes sooner, and the GPU's waits for it shrink.")
    if top.get("note"):
        ev.append(f"Capture: {top['note']}.")
    la = payload.get("launches")
    if la and la.get("linked"):
        own = la["linked"] - la.get("graph_kernels", 0)
        if own:
            ev.append(f"{la['kernels_shorter_than_launch']:,} of {own:,} kernels ran "
                      "shorter than their own launch call.")
    hip = graphs.startswith("HIP")
    how = (f"Capture the repeated step with {graphs} (torch.cuda.graphs / torch.compile "
           "mode='reduce-overhead'" + (", which use HIP graphs on ROCm" if hip else "")
           + ") so one graph launch replaces many kernel launches; also remove host work "
           "between launches.")
    return [_rec("cuda-graphs", f"Launch-bound: capture the step in {graphs[:-1]}",
                 top["saving_ns"], top["measured_ns"], ev, how,
                 f"whatif --fix cuda-graphs on rank {r}: measured window minus the replay "
                 "without launch cost (at most the rank's launch overhead).")]


#: The engine changes whose fix fires on their saving, with the share of the rank's window
#: each needs (overlap-comm fires on the exposed communication instead: :func:`_comm`).
_MIN_OF = {"no_launch_overhead": LAUNCH_MIN_FRAC, "host_sync": LAUNCH_MIN_FRAC,
           "warm_up": LAUNCH_MIN_FRAC, "fusion": FUSION_MIN_FRAC,
           "pinned_memory": PINNED_MIN_FRAC, "input_pipeline": IDLE_MIN_FRAC}


def _profiled_fires(top: dict[str, Any], change: str) -> bool:
    """Whether the engine row ``top`` of ``change`` saves anything at all and at least its
    :data:`_MIN_OF` share of its rank's window."""
    return top["saving_ns"] > 0 and top["saving_ns"] >= _MIN_OF[change] * top["measured_ns"]


def _engine_rec(payload: dict[str, Any], change: str) -> dict[str, Any] | None:
    """The engine's row for ``change`` when it fires (:func:`_profiled_fires`) and, for a
    torch.profiler trace, also fires without the profiler (:func:`_unprofiled_fires`)."""
    top = _engine(payload, change)
    if top is None or not _profiled_fires(top, change):
        return None
    return top if _unprofiled_fires(top, _MIN_OF[change]) else None


def _unprofiled_fires(top: dict[str, Any], min_frac: float) -> bool:
    """Whether the engine row ``top`` also saves at least ``min_frac`` of its profiler-free
    window without the profiler (true where the trace has no profiler-free figures). A fix
    whose saving under the profiler is the profiler's own recording cost is no fix:
    ``kineto__resnet50_worker0`` (2021, ~21 us recorded per op) read "CUDA graphs: 382 ms
    of 996 ms" first, 1.17 ms of 615 ms without the profiler (docs/analyses.md)."""
    s, w = top.get("saving_unprofiled_ns"), top.get("window_unprofiled_ns")
    return s is None or not w or s >= min_frac * w


def _gap_evidence(payload: dict[str, Any], causes: tuple[str, ...], rank: int,
                  n: int = 3) -> list[str]:
    """The largest gaps of ``rank`` with one of ``causes``, naming the covering call or
    range (a fix's saving is one rank's: a gap of another rank is no evidence for it),
    named "on rank R" when the trace has several. Read from the payload's ``evidence_rows``
    (each rank's largest gaps of each cause), else its gap table."""
    gaps = payload.get("gaps", {})
    rows = gaps.get("evidence_rows", gaps.get("table", {}).get("rows", []))
    several = len({g.get("rank") for g in rows}) > 1
    out: list[str] = []
    for g in sorted(rows, key=lambda g: -int(g["dur_ns"])):
        if g.get("rank") != rank or g.get("cause") not in causes or len(out) == n:
            continue
        thread = g.get("cause_thread_id")
        where = f" on rank {g['rank']}" if several else ""
        out.append(f"Gap of {_ms(g['dur_ns'])}{where} ({g['cause']}): {g.get('cause_name')}"
                   + (f" (thread {thread})" if thread is not None else "")
                   + (f"; {g['cause_detail']}" if g.get("cause_detail") else "") + ".")
    return out


def _replayed(top: dict[str, Any], flag: str) -> str:
    return (f"Replaying rank {top['rank']} with the fix (whatif --fix {flag}) shortens its "
            f"window from {_ms(top['measured_ns'])} to {_ms(top['predicted_ns'])}: "
            f"{_ms(top['saving_ns'])} saved." + (f" Mechanism: {top['note']}." if
                                                  top.get("note") else ""))


def _sync_ops(payload: dict[str, Any], n: int = 3) -> list[str]:
    """Where the blocking calls came from (:func:`traceparse.analyses.host_sync.
    host_sync_by_op`): the framework ops around them, when the trace recorded any."""
    ops = (payload.get("gaps") or {}).get("sync_ops") or []
    if not any(r["op"] for r in ops):
        return []
    parts = [(f"{r['op']}: " if r["op"] else "no op recorded around ")
             + f"{units.plural(r['calls'], r['call'] + ' call')}, {_ms(r['host_sync_ns'])}"
             for r in ops[:n]]
    return ["The blocking calls by the framework op that made them (outermost op on the "
            "calling thread), with the GPU's host-sync time while in them: "
            + "; ".join(parts) + "."]


def _beyond_drain(payload: dict[str, Any], top: dict[str, Any]) -> list[str]:
    """Why removing the syncs saves more than the attribution's host sync (the GPU's drain
    inside the calls), when it does: the rank's other non-busy parts the host, running
    ahead, hides."""
    r = top["rank"]
    parts = _by_rank(payload).get(r, {})
    hs = parts.get("host_sync_ns", 0)
    if top["saving_ns"] <= hs:
        return []
    rest = [f"{label} {_ms(parts[k])}" for k, label in (
        ("launch_overhead_ns", "launch overhead"), ("idle_ns", "idle"),
        ("warmup_ns", "warm-up")) if parts.get(k)]
    return [f"Rank {r}: the GPU drained for {_ms(hs)} inside the blocking calls (the "
            f"attribution's host sync); the rest of the {_ms(top['saving_ns'])} is what "
            "followed them: a sync leaves the GPU's queue empty, so the GPU then waited for "
            "whatever the host did before its next launches"
            + (f" ({', '.join(rest)} on this rank)" if rest else "")
            + ". Without the syncs the host runs ahead of the GPU in the replay and those "
            f"waits are hidden; in all its GPU was not busy for {_ms(top['bound_ns'])}, "
            "the most removing the syncs can give back."]


def _host_sync(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "host_sync")
    if top is None:
        return []
    ev = [_replayed(top, "host-sync"), *_beyond_drain(payload, top), *_sync_ops(payload),
          *_gap_evidence(payload, ("host_sync",), top["rank"])]
    return [_rec("host-sync", "GPU drained at synchronising calls: remove the syncs",
                 top["saving_ns"], top["measured_ns"], ev,
                 "Remove implicit synchronisations: .item()/.cpu()/print of GPU tensors, "
                 "copies to pageable memory (pin the buffer and use non_blocking=True), "
                 "cudaMalloc/cudaFree in the loop (use the caching allocator), explicit "
                 "synchronize calls; keep values on the device so the host queues ahead.",
                 "whatif --fix host-sync: the replay with every blocking sync not waiting "
                 "(the host queues the next work while the GPU runs).")]


def _fusion(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "fusion")
    if top is None:
        return []
    tiny = payload["evidence"]["tiny_memory_kernels"]
    ev = [_replayed(top, "fusion")]
    if tiny.get("top"):
        ev.append("Most frequent memory-bound kernels: " + "; ".join(
            f"{short_kernel_name(r['name'])} x{r['count']:,}" for r in tiny["top"]) + ".")
    return [_rec("fusion", "Chains of elementwise kernels: fuse them", top["saving_ns"],
                 top["measured_ns"], ev,
                 "Fuse chains of elementwise/normalisation kernels (torch.compile, a fused "
                 "optimizer, custom Triton kernels) so intermediates stay in registers and "
                 "one launch replaces many.",
                 "whatif --fix fusion: each chain replayed as one kernel that moves the "
                 "chain's distinct bytes at its memory-bound kernels' rate (op shapes; "
                 "without them, as long as its longest kernel), without the issuing time "
                 "between its launches.")]


def _pinned(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "pinned_memory")
    if top is None:
        return []
    pg = payload["evidence"]["pageable_copies"]["pageable"]
    ev = [f"{pg['count']:,} host<->device copies use pageable memory: {pg['bytes']:,} bytes "
          f"in {_ms(pg['total_ns'])}" + (f" ({pg['gbps']:.2f} GB/s)." if pg["gbps"] else "."),
          _replayed(top, "pinned-memory")]
    return [_rec("pinned-memory", "Pageable host memory in copies: pin it", top["saving_ns"],
                 top["measured_ns"], ev,
                 "Allocate host buffers pinned (DataLoader(pin_memory=True), "
                 "cudaHostAlloc / tensor.pin_memory()) and copy with non_blocking=True so "
                 "copies run at full bandwidth and overlap compute.",
                 "whatif --fix pinned-memory: pageable copies replayed at the pinned rate "
                 "and without blocking the host.")]


def _warm(payload: dict[str, Any]) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "warm_up")
    if top is None:
        return []
    ev = [f"Rank {top['rank']}: {top.get('note') or 'the first steps'} cost "
          f"{_ms(top['saving_ns'])} more than steady state.",
          *_gap_evidence(payload, ("warmup",), top["rank"])]
    return [_rec("warm-up", "Warm-up in the measured steps: warm up first", top["saving_ns"],
                 top["measured_ns"], ev,
                 "Compile, autotune and load modules before the loop you measure (run a "
                 "few warm-up iterations; torch.compile caches, cudnn.benchmark once; "
                 "CUDA_MODULE_LOADING=EAGER when lazy loading shows), or exclude them.",
                 "whatif --fix warm-up: the first steps' wall time above the steady-state "
                 "median step.")]


def _comm(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine(payload, "overlap_comm")
    if top is None or top["saving_ns"] <= 0 \
            or top["bound_ns"] < COMM_MIN_FRAC * top["measured_ns"] \
            or not _unprofiled_fires(top, COMM_MIN_FRAC):
        return []
    r = top["rank"]
    exposed = _by_rank(payload).get(r, {}).get("communication_ns", top["bound_ns"])
    hidden = _by_rank(payload).get(r, {}).get("overlapped_comm_ns", 0)
    ev = [f"Rank {r}: exposed communication {_ms(exposed)} = "
          f"{_pct(exposed, top['measured_ns']):.1f}% of its window; {_ms(hidden)} of "
          f"communication was already hidden under compute "
          f"({_pct(hidden, hidden + exposed):.1f}% overlap).",
          f"Replaying rank {r} with communication off the critical path (whatif "
          f"--overlap-comm) shortens its window to {_ms(top['predicted_ns'])}."]
    return [_rec("overlap-comm", "Exposed NCCL time: overlap communication with compute",
                 top["saving_ns"], top["measured_ns"], ev,
                 "Overlap collectives with compute (DDP bucketing / FSDP prefetch, async "
                 "collectives on a separate stream), shrink them (gradient compression, "
                 "bigger buckets) or fix rank imbalance that makes ranks wait.",
                 f"whatif --overlap-comm on rank {r}: measured window minus the replay (at "
                 "most the rank's exposed communication).")]


def _copies(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    worst = _worst_rank(payload, "memory_ns")
    if worst is None or worst[1] < COPY_MIN_FRAC * worst[2]:
        return []
    rank, mem, w = worst
    # overlapped, a copy runs under kernels: it can hide at most the rank's kernel time
    parts = _by_rank(payload).get(rank, {})
    beside = parts.get("compute_ns", 0) + parts.get("communication_ns", 0)
    saving = min(mem, beside)
    if saving < COPY_MIN_FRAC * w:
        return []
    ev = [f"Rank {rank}: copies/memsets ran with no kernel alongside for {_ms(mem)} = "
          f"{_pct(mem, w):.1f}% of its window.",
          f"Overlapped with compute they hide behind its kernels, {_ms(beside)} on rank "
          f"{rank} (compute and communication): at most {_ms(saving)} saved"
          + (f"; the other {_ms(mem - saving)} of copies stays unless they get faster "
             "(pinned memory) or are avoided (tensors kept on the device), and the trace "
             "cannot tell which copies are avoidable." if mem > saving else ".")]
    pc = payload["evidence"]["pageable_copies"]
    moved = pc["pageable"]["bytes"] + pc["pinned"]["bytes"]
    if moved:
        ev.append(f"Host<->device traffic: {moved:,} bytes ({pc['pinned']['count']:,} pinned, "
                  f"{pc['pageable']['count']:,} pageable copies).")
    return [_rec("overlap-copies", "Exposed data transfers: overlap or avoid them", saving, w,
                 ev,
                 "Issue copies on their own stream with non_blocking=True from pinned memory "
                 "so they overlap compute (prefetch the next batch), and keep tensors on the "
                 "device instead of round-tripping them.",
                 "the copy/memset time during which no kernel ran, at most the rank's kernel "
                 "time the copies could run under.")]


def _stream_wait(payload: dict[str, Any]) -> list[dict[str, Any]]:
    gaps = [g for g in payload.get("gaps", {}).get("table", {}).get("rows", [])
            if g.get("cause") == "stream_wait"]
    total = sum(int(c.get("total_ns", 0)) for c in payload.get("gaps", {}).get("by_cause", [])
                if c.get("cause") == "stream_wait")
    # a wait on a producer not in the trace saves nothing it shows (UNRECORDED_PRODUCER)
    unrecorded = int(payload.get("gaps", {}).get("stream_wait_unrecorded_ns", 0))
    total -= unrecorded
    gaps = [g for g in gaps if NO_PRODUCER not in str(g.get("cause_name"))]
    if not gaps or total <= 0:
        return []
    rank = int(gaps[0]["rank"])
    w = _by_rank(payload).get(rank, {}).get("window_ns", 0)
    if total < IDLE_MIN_FRAC * w:
        return []
    ev = [f"Gap of {_ms(g['dur_ns'])} on rank {g['rank']}: {g['cause_name']}." for g in gaps[:3]]
    ev.append("The work had been issued (its launch call had returned) but its stream waited "
              "on an event: the host was not the cause.")
    if unrecorded:
        ev.append(f"{_ms(unrecorded)} more of stream waits are not counted: their event's "
                  "producer is not in this trace, so the GPU most likely ran it then.")
    return [_rec("stream-wait", "GPU idle while a stream waited on an event: find its "
                 "producer", total, w, ev,
                 "Find what records the event the stream waits on: if it is work on another "
                 "stream, start that work earlier or split it so the waiting stream can "
                 "overlap it; if the producer is not in this trace (another process, or work "
                 "issued before the capture began), capture it too before changing anything.",
                 "the time of the gaps a stream-wait explains (an upper bound: removing the "
                 "wait may only move the producer's time).")]


def _idle(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine_rec(payload, "input_pipeline")
    if top is None:  # no data-loading evidence, or nothing to hide
        return []
    ev = [_replayed(top, "input-pipeline"), *_gap_evidence(payload, ("input_pipeline",),
                                                                 top["rank"])]
    return [_rec("input-pipeline", "GPU waiting for input data: prepare it ahead",
                 top["saving_ns"], top["measured_ns"], ev,
                 "Move data preparation off the launching thread: DataLoader workers "
                 "(num_workers), prefetching (prefetch_factor), pinned memory and "
                 "non_blocking copies, or preprocessing offline.",
                 "whatif --fix input-pipeline: the GPU idle while the launching thread was "
                 "in data-loading ranges removed from the host.")]


#: Fixes whose saving is time the trace shows the GPU idle (launch overhead, host sync, idle,
#: stream waits): dropped when the summary's caveat says the GPU ran untraced work then.
IDLE_TIME_FIXES = ("cuda-graphs", "host-sync", "input-pipeline", "stream-wait")


#: Fix id -> the savings engine's change it quotes.
ENGINE_CHANGE = {fix: change for change, fix in FIX_OF.items()}


def _unprofiled(payload: dict[str, Any], r: dict[str, Any]) -> None:
    """Add ``saving_unprofiled_ns`` / ``window_unprofiled_ns`` (and their percentage): the
    same engine row's profiler-free replay (torch.profiler traces; else None). What the
    fix saves without the profiler's own cost, never a fix for that cost."""
    change = ENGINE_CHANGE.get(r["id"])
    top = _engine(payload, change) if change else None
    s, w = (top.get("saving_unprofiled_ns"), top.get("window_unprofiled_ns")) if top else (
        None, None)
    if s is None or not w:
        s = w = None
    r["saving_unprofiled_ns"], r["window_unprofiled_ns"] = s, w
    r["saving_unprofiled_pct"] = _pct(s, w) if s is not None and w else None


def recommend(payload: dict[str, Any]) -> dict[str, Any]:
    """``{"verdict": {...}, "items": [ranked recommendations]}`` for ``payload``."""
    items: list[dict[str, Any]] = []
    attr = payload.get("attribution")
    if attr and attr["totals"]["window_ns"]:
        t, w = attr["totals"], attr["totals"]["window_ns"]
        items += _launch(payload, t, w)
        items += _host_sync(payload, t, w)
        items += _fusion(payload, w)
        items += _pinned(payload, w)
        items += _comm(payload, t, w)
        items += _copies(payload, t, w)
        items += _idle(payload, t, w)
        items += _stream_wait(payload)
        items += _occupancy(payload)
        items += _warm(payload)
    items += _tensor_cores(payload, attr["totals"]["window_ns"] if attr else 0)
    withheld: list[str] = []
    if payload.get("summary", {}).get("untraced_gpu_work"):
        # the GPU's own counters say it was busy in the trace's idle time: no fix whose
        # saving is that idle time
        withheld = sorted(r["id"] for r in items if r["id"] in IDLE_TIME_FIXES)
        items = [r for r in items if r["id"] not in IDLE_TIME_FIXES]
    items.sort(key=lambda r: (-r["saving_ns"], r["id"]))
    for i, r in enumerate(items, 1):
        r["rank"] = i
        _unprofiled(payload, r)
        _job_bound(payload, r)
    return {"verdict": verdict(payload), "items": items, "withheld": withheld,
            "profiler_only": profiler_only(payload)}


def profiler_only(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The fixes withheld because they save enough only under the profiler
    (:func:`_unprofiled_fires`): ``id, rank, min_frac`` (the share it needs),
    ``saving_ns, window_ns, saving_unprofiled_ns, window_unprofiled_ns`` of the engine row
    each would quote."""
    out = []
    for change, frac in _MIN_OF.items():
        top = _engine(payload, change)
        if top is None or not _profiled_fires(top, change) or _unprofiled_fires(top, frac):
            continue
        out.append({"id": FIX_OF[change], "rank": top["rank"], "min_frac": frac,
                    "saving_ns": top["saving_ns"], "window_ns": top["measured_ns"],
                    "saving_unprofiled_ns": top["saving_unprofiled_ns"],
                    "window_unprofiled_ns": top["window_unprofiled_ns"]})
    return sorted(out, key=lambda r: (-r["saving_ns"], r["id"]))


def profiler_only_note(rows: list[dict[str, Any]]) -> str:
    """One sentence naming the fixes :func:`profiler_only` withheld, with both figures, and
    where the low end of the profiler's per-op estimate would still offer one
    (``saving_low_ns``), that figure too."""
    def low(r: dict[str, Any]) -> str:
        s, w = r.get("saving_low_ns"), r.get("window_low_ns")
        if s is None or not w or s < r["min_frac"] * w:
            return ""
        return (f" ({_ms(s)} of {_ms(w)} at the low end of the profiler's per-op estimate: "
                "measure it without the profiler before relying on either)")

    each = "; ".join(
        f"{r['id']} would save {_ms(r['saving_ns'])} of {_ms(r['window_ns'])} under the "
        f"profiler but {_ms(r['saving_unprofiled_ns'])} of {_ms(r['window_unprofiled_ns'])} "
        f"without it{low(r)}" for r in rows)
    return (f"withheld, as at the central estimate of the profiler's per-op cost the saving "
            f"is its own recording: {each} (removing the profiler is never a fix)")


def _job_bound(payload: dict[str, Any], r: dict[str, Any]) -> None:
    """Say why a fix quotes its rank where another alone would save more (the ranks wait
    in collectives: ``savings.coupled_ranks``, ``savings.best``)."""
    change = ENGINE_CHANGE.get(r["id"])
    top = _engine(payload, change) if change else None
    rows = [x for x in payload.get("summary", {}).get("savings", []) if x["change"] == change]
    most = max(rows, key=lambda x: (x["saving_ns"], -x["rank"])) if rows else None
    if top is not None and most is not None and most["saving_ns"] > top["saving_ns"]:
        r["evidence"].append(
            f"The ranks wait for one another in collectives, so the job is only as fast as "
            f"its slowest rank after the fix: rank {top['rank']} (replayed "
            f"{_ms(top['predicted_ns'])}) bounds it, and this is its saving; rank "
            f"{most['rank']} alone would save {_ms(most['saving_ns'])}.")
