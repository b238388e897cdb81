"""The verdict and ranked recommendations of the report, from the payload's numbers.

Every recommendation carries: ``id``, ``title``, ``saving_ns`` (the GPU wall time the fix
could recover **on one rank**: the rank where it saves most; never a sum over ranks),
``saving_pct`` (of that rank's window; of the summed device windows for ``tensor-cores``,
whose roofline points carry no rank), ``evidence`` (sentences with the numbers
and the kernels or gaps behind them), ``how`` (what to do) and ``estimate`` (how
``saving_ns`` was computed). They are ranked by ``saving_ns`` (ties by id), so the first one
is the biggest lever.

Rules and their savings estimates:

``cuda-graphs`` (launch-bound; "HIP graphs" on ROCm traces)
    Fires when a rank's launch overhead is at least 5% of its window and the replay saves
    time. Saving = the savings engine's figure (:mod:`traceparse.analyses.savings`): the
    rank's window minus its replay without launch cost, exactly what ``whatif
    --no-launch-overhead`` prints for that rank, and never more than its launch overhead.
``host-sync`` (host blocked in synchronising calls)
    Fires when a rank's host-sync time is at least 5% of its window. Saving = that time (an
    upper bound), the covering calls named from the gaps.
``fusion`` (many tiny memory-bound kernels)
    Fires when at least 100 kernels shorter than 10 µs whose names mark them as
    memory-bound elementwise/reduction/copy work
    (:data:`traceparse.reports.sections.MEMORY_BOUND_RE`) ran
    and they
    take at least 2% of the window. Saving = half their total time: fusing chains of
    elementwise kernels removes the intermediate global-memory write + read of each fused
    step (roughly half of an elementwise kernel's traffic) and their launches. A rough,
    documented rule of thumb, not a measurement.
``pinned-memory`` (pageable copies)
    Fires when host<->device copies touch pageable memory and the saving is at least 1% of
    the window. Saving = pageable copy time minus
    the time the same bytes would take at the bandwidth this trace's pinned copies reached
    (if the trace has pinned copies of its own); otherwise half the pageable copy time
    (pinned transfers typically reach about twice the pageable bandwidth, and can overlap
    compute, which pageable ones cannot).
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
``input-pipeline`` (host-bound idle)
    Fires when idle time, less the idle time of gaps caused by a stream wait or warm-up
    (neither is the host's: :data:`NOT_HOST_IDLE`), is at least 10% of a rank's window (the
    rank with the most). Data-loader advice only when a gap's cause names a data loader
    (:data:`INPUT_RE`). Saving = that idle time (an upper bound: the GPU had nothing to do,
    no launch was in flight, no warm-up ran and the host was not blocked, which points at
    host work such as data loading or preprocessing).

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
from traceparse.vendor import amd_vendors

#: Thresholds (fractions of the summed window) at which each rule fires.
LAUNCH_MIN_FRAC = 0.05
FUSION_MIN_FRAC = 0.02
FUSION_MIN_COUNT = 100
COMM_MIN_FRAC = 0.02
IDLE_MIN_FRAC = 0.10
PINNED_MIN_FRAC = 0.01
COPY_MIN_FRAC = 0.10

_BOUND = {
    "compute_ns": ("compute-bound", "compute kernels"),
    "memory_ns": ("memory-transfer-bound", "memcpy/memset with nothing else running"),
    "communication_ns": ("communication-bound", "exposed communication"),
    "launch_overhead_ns": ("launch-bound", "waiting for kernel launches"),
    "warmup_ns": ("warm-up-dominated", "warm-up (module loading, compilation)"),
    "host_sync_ns": ("host-sync-bound", "the host blocked in a synchronising call"),
    "idle_ns": ("host-bound", "idle GPU (no work, no launch in flight)"),
}


def _ms(ns: float) -> str:
    """A duration in human units (ns, µs, ms, s), as the CLI prints it."""
    return units.duration(round(ns))


def _short(name: str, n: int = 70) -> str:
    """A kernel name cut to its base (no parameter list) and at most ``n`` characters.

    The parameter list is the first ``(`` outside template brackets that does not open
    ``(anonymous namespace)``: ``void at::native::(anonymous namespace)::k<float>(long)``
    -> ``at::native::(anonymous namespace)::k<float>``.
    """
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and not name.startswith("(anonymous namespace)", i):
            cut = i
            break
    base = name[:cut].removeprefix("void ").strip() or name
    return base if len(base) <= n else base[: n - 3] + "..."


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def verdict(payload: dict[str, Any]) -> dict[str, Any]:
    """Headline of the report: what bounds this run."""
    attr = payload.get("attribution")
    if not attr or not attr["totals"]["window_ns"]:
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
    return {"headline": headline,
            "detail": f"GPU window {_ms(w)} (summed over devices): {parts}.",
            "bound": bound}


def _rec(rid: str, title: str, saving: float, window: int, evidence: list[str], how: str,
         estimate: str) -> dict[str, Any]:
    return {"id": rid, "title": title, "saving_ns": int(saving),
            "saving_pct": _pct(saving, window), "evidence": evidence, "how": how,
            "estimate": estimate}


def _by_rank(payload: dict[str, Any]) -> dict[int, dict[str, int]]:
    """Attribution parts and window summed per rank (over its devices)."""
    out: dict[int, dict[str, int]] = {}
    for r in payload.get("attribution", {}).get("rows", []):
        d = out.setdefault(int(r["rank"]), {})
        for k, v in r.items():
            if k.endswith("_ns") and isinstance(v, int):
                d[k] = d.get(k, 0) + v
    return out


def _worst_rank(payload: dict[str, Any], part: str) -> tuple[int, int, int] | None:
    """(rank, part_ns, rank window_ns) of the rank with the most ``part``: multi-rank
    savings are per rank, never a sum over ranks."""
    ranks = _by_rank(payload)
    if not ranks:
        return None
    rank = max(ranks, key=lambda r: (ranks[r].get(part, 0), -r))
    return rank, ranks[rank].get(part, 0), ranks[rank].get("window_ns", 0)


def _engine(payload: dict[str, Any], change: str) -> dict[str, Any] | None:
    """The savings engine's row (:func:`traceparse.analyses.savings.savings`, copied into
    the payload's summary) with the largest saving for ``change``."""
    rows = [r for r in payload.get("summary", {}).get("savings", []) if r["change"] == change]
    return max(rows, key=lambda r: (r["saving_ns"], -r["rank"])) if rows else None


def _launch(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine(payload, "no_launch_overhead")
    if top is None or top["saving_ns"] <= 0 \
            or top["bound_ns"] < LAUNCH_MIN_FRAC * top["measured_ns"]:
        return []
    # HIP calls recorded, or AMD devices (the CLI's rule, traceparse.vendor)
    hip = payload.get("evidence", {}).get("hip", False) or amd_vendors(
        d.get("vendor") for d in payload.get("devices", []))
    graphs = "HIP graphs" if hip else "CUDA graphs"
    r = top["rank"]
    ev = [f"Rank {r}: launch overhead {_ms(top['bound_ns'])} = "
          f"{_pct(top['bound_ns'], top['measured_ns']):.1f}% of its {_ms(top['measured_ns'])} "
          "window: the GPU was idle while the host was inside a launch call for the next "
          "kernel (not blocked in a synchronising call: that is host sync).",
          f"Replaying rank {r} without launch cost (whatif --no-launch-overhead) shortens "
          f"its window to {_ms(top['predicted_ns'])}: {_ms(top['saving_ns'])} saved."]
    la = payload.get("launches")
    if la and la.get("linked"):
        ev.append(f"{la['kernels_shorter_than_launch']:,} of {la['linked']:,} kernels ran "
                  "shorter than their own launch call.")
    how = (f"Capture the repeated step with {graphs} (torch.cuda.graphs / torch.compile "
           "mode='reduce-overhead'" + (", which use HIP graphs on ROCm" if hip else "")
           + ") so one graph launch replaces many kernel launches; also remove host work "
           "between launches.")
    return [_rec("cuda-graphs", f"Launch-bound: capture the step in {graphs[:-1]}",
                 top["saving_ns"], top["measured_ns"], ev, how,
                 f"whatif --no-launch-overhead on rank {r}: measured window minus the replay "
                 "without launch cost (at most the rank's launch overhead).")]


def _host_sync(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    worst = _worst_rank(payload, "host_sync_ns")
    if worst is None or worst[1] < LAUNCH_MIN_FRAC * worst[2]:
        return []
    rank, sync, rw = worst
    ev = [f"Rank {rank}: the GPU sat idle for {_ms(sync)} = {_pct(sync, rw):.1f}% of its window "
          "while the host was blocked in a call that waits for the GPU."]
    gaps = [g for g in payload.get("gaps", {}).get("table", {}).get("rows", [])
            if g.get("cause") == "host_sync"][:3]
    for g in gaps:
        thread = g.get("cause_thread_id")
        ev.append(f"Gap of {_ms(g['dur_ns'])} covered by {g['cause_name']}"
                  + (f" (thread {thread})." if thread is not None else "."))
    return [_rec("host-sync", "Host blocked in synchronising calls: remove the syncs",
                 sync, rw, ev,
                 "Remove implicit synchronisations: .item()/.cpu()/print of GPU tensors, "
                 "copies to pageable memory (pin the buffer and use non_blocking=True), "
                 "cudaMalloc/cudaFree in the loop (use the caching allocator), explicit "
                 "synchronize calls; overlap the remaining ones with queued work.",
                 "the host-sync time of that rank (an upper bound: the GPU idle while the "
                 "host was blocked).")]


def _fusion(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    tiny = dict(payload["evidence"]["tiny_memory_kernels"])
    ranks = _by_rank(payload)
    if len(ranks) > 1 and tiny.get("by_rank"):  # per rank: the rank with the most
        top = tiny["by_rank"][0]
        tiny.update(count=top["count"], total_ns=top["total_ns"])
        w = ranks.get(int(top["rank"]), {}).get("window_ns", w)
    if tiny["count"] < FUSION_MIN_COUNT or tiny["total_ns"] < FUSION_MIN_FRAC * w:
        return []
    names = "; ".join(f"{_short(r['name'])} x{r['count']:,}" for r in tiny["top"])
    ev = [f"{tiny['count']:,} memory-bound kernels shorter than {tiny['max_ns'] / 1e3:g} µs "
          f"take {_ms(tiny['total_ns'])} ({_pct(tiny['total_ns'], w):.1f}% of the window).",
          f"Most frequent: {names}."]
    return [_rec("fusion", "Many tiny memory-bound kernels: fuse them",
                 tiny["total_ns"] / 2, w, ev,
                 "Fuse chains of elementwise/normalisation kernels (torch.compile, a fused "
                 "optimizer, custom Triton kernels) so intermediates stay in registers.",
                 "half the total time of these kernels (fusion removes about half of an "
                 "elementwise chain's memory traffic plus the launches).")]


def _pinned(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    pc = payload["evidence"]["pageable_copies"]
    pg, pn = pc["pageable"], pc["pinned"]
    ranks = _by_rank(payload)
    if len(ranks) > 1 and pc.get("pageable_by_rank"):  # per rank: the rank with the most
        pg = pc["pageable_by_rank"][0]
        w = ranks.get(int(pg["rank"]), {}).get("window_ns", w)
    if not pg["count"] or not pg["total_ns"]:
        return []
    if pn["gbps"]:
        saving = max(pg["total_ns"] - pg["bytes"] / pn["gbps"], 0.0)
        est = (f"pageable copy time minus the time at the {pn['gbps']:.2f} GB/s this trace's "
               "pinned copies reached.")
    else:
        saving = pg["total_ns"] / 2
        est = ("half the pageable copy time (pinned copies typically reach about twice the "
               "bandwidth; this trace has no pinned copy to measure).")
    if saving < PINNED_MIN_FRAC * w:
        return []
    ev = [f"{pg['count']:,} host<->device copies use pageable memory: {pg['bytes']:,} bytes "
          f"in {_ms(pg['total_ns'])}"
          + (f" ({pg['gbps']:.2f} GB/s)." if pg["gbps"] else ".")]
    if pn["gbps"]:
        ev.append(f"Pinned copies in the same trace reached {pn['gbps']:.2f} GB/s.")
    return [_rec("pinned-memory", "Pageable host memory in copies: pin it", saving, w, ev,
                 "Allocate host buffers pinned (DataLoader(pin_memory=True), "
                 "cudaHostAlloc / tensor.pin_memory()) and copy with non_blocking=True so "
                 "copies run at full bandwidth and overlap compute.", est)]


def _comm(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    top = _engine(payload, "overlap_comm")
    if top is None or top["saving_ns"] <= 0 \
            or top["bound_ns"] < COMM_MIN_FRAC * top["measured_ns"]:
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
    ev = [f"Rank {rank}: copies/memsets ran with no kernel alongside for {_ms(mem)} = "
          f"{_pct(mem, w):.1f}% of its window."]
    pc = payload["evidence"]["pageable_copies"]
    moved = pc["pageable"]["bytes"] + pc["pinned"]["bytes"]
    if moved:
        ev.append(f"Host<->device traffic: {moved:,} bytes ({pc['pinned']['count']:,} pinned, "
                  f"{pc['pageable']['count']:,} pageable copies).")
    return [_rec("overlap-copies", "Exposed data transfers: overlap or avoid them", mem, w, ev,
                 "Issue copies on their own stream with non_blocking=True from pinned memory "
                 "so they overlap compute (prefetch the next batch), and keep tensors on the "
                 "device instead of round-tripping them.",
                 "the copy/memset time during which no kernel ran.")]


ROOF_MAX_PCT = 30.0
ROOF_TARGET_PCT = 50.0


def _tensor_cores(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    from traceparse.analyses.kclass import class_of

    roof = payload.get("roofline")
    if not roof:
        return []
    slow = [p for p in roof["points"] if p.get("pct_of_roof") is not None
            and p["pct_of_roof"] < ROOF_MAX_PCT and class_of(p["kernel_name"]) in ("gemm", "conv")]
    total = sum(p["time_ns"] for p in roof["points"] if p.get("time_ns"))
    base = w or total
    saving = sum(p["time_ns"] * (1 - p["pct_of_roof"] / ROOF_TARGET_PCT) for p in slow)
    if not slow or saving < FUSION_MIN_FRAC * base:
        return []
    ev = [f"{_short(p['kernel_name'])}: {p['pct_of_roof']:.1f}% of its roof "
          f"({p.get('precision') or '?'}), {_ms(p['time_ns'])}"
          for p in sorted(slow, key=lambda p: -p["time_ns"])[:3]]
    return [_rec("tensor-cores", "GEMMs far under their roof: use tensor cores / lower "
                 "precision", saving, base, ev,
                 "Run GEMMs in BF16/FP16 or TF32 (torch.backends.cuda.matmul.allow_tf32, "
                 "autocast) with tensor-core friendly shapes (multiples of 8/16), or pick a "
                 "better kernel (cuBLASLt heuristics, CUTLASS).",
                 "for each such kernel, time x (1 - % of roof / 50): the time saved at 50% "
                 "of its roof.")]


#: Gap causes whose idle time no host-side "feed it faster" change removes: a stream held
#: back by an event wait, and one-off warm-up.
NOT_HOST_IDLE = ("stream_wait", "warmup")
#: Host activity that marks an input pipeline (data loading) in a gap's cause.
INPUT_RE = r"(?i)dataloader|data_loader|__next__|collate|_next_data|fetch|prefetch|dataset"


def _explained_idle(payload: dict[str, Any]) -> int:
    """Idle time of the gaps whose cause is in :data:`NOT_HOST_IDLE` (summed over ranks)."""
    return sum(int(c.get("idle_ns", 0)) for c in payload.get("gaps", {}).get("by_cause", [])
               if c.get("cause") in NOT_HOST_IDLE)


def _stream_wait(payload: dict[str, Any]) -> list[dict[str, Any]]:
    gaps = [g for g in payload.get("gaps", {}).get("table", {}).get("rows", [])
            if g.get("cause") == "stream_wait"]
    total = sum(int(c.get("total_ns", 0)) for c in payload.get("gaps", {}).get("by_cause", [])
                if c.get("cause") == "stream_wait")
    if not gaps or not total:
        return []
    rank = int(gaps[0]["rank"])
    w = _by_rank(payload).get(rank, {}).get("window_ns", 0)
    if total < IDLE_MIN_FRAC * w:
        return []
    ev = [f"Gap of {_ms(g['dur_ns'])} on rank {g['rank']}: {g['cause_name']}." for g in gaps[:3]]
    ev.append("The work had been issued (its launch call had returned) but its stream waited "
              "on an event: the host was not the cause.")
    return [_rec("stream-wait", "GPU idle while a stream waited on an event: find its "
                 "producer", total, w, ev,
                 "Find what records the event the stream waits on: if it is work on another "
                 "stream, start that work earlier or split it so the waiting stream can "
                 "overlap it; if the producer is not in this trace (another process, or work "
                 "issued before the capture began), capture it too before changing anything.",
                 "the time of the gaps a stream-wait explains (an upper bound: removing the "
                 "wait may only move the producer's time).")]


def _idle(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    worst = _worst_rank(payload, "idle_ns")
    if worst is None:
        return []
    rank, idle, w = worst
    idle = max(idle - _explained_idle(payload), 0)  # stream waits and warm-up: not the host
    if idle < IDLE_MIN_FRAC * w:
        return []
    ev = [f"Rank {rank}: the GPU was idle with no launch in flight, no warm-up and the host "
          f"not blocked for {_ms(idle)} = {_pct(idle, w):.1f}% of its window."]
    gaps = payload.get("gaps", {}).get("table", {}).get("rows", [])
    if gaps:
        g = gaps[0]
        ev.append(f"Longest gap: {_ms(g.get('dur_ns', 0))}"
                  + (f", cause: {g['cause']}" if g.get("cause") else "")
                  + (f" ({g['cause_name']})" if g.get("cause_name") else "") + ".")
        for c in payload["gaps"].get("by_cause", [])[:3]:
            ev.append(f"Gaps caused by {c['cause']}: {c['count']:,} totalling "
                      f"{_ms(c['total_ns'])}.")
    import re

    named = " ".join(str(g.get("cause_name") or "") for g in gaps[:10])
    how = ("Look at what the host does in the gaps (named above) and move it off the path "
           "between launches: precompute or cache it, overlap it with queued GPU work, "
           "batch more work per launch.")
    if re.search(INPUT_RE, named):  # the gaps name a data loader: say so
        how = ("The gaps are in data loading: more DataLoader workers, prefetching, pinned "
               "memory with asynchronous copies.")
    return [_rec("input-pipeline", "GPU idle waiting for the host: feed it faster", idle, w,
                 ev, how, "the idle time (nothing ran and no launch was in flight) minus the "
                 "idle time of gaps a stream wait or warm-up explains.")]


OCC_MIN_FRAC = 0.02
#: Fixes whose saving is time the trace shows the GPU idle (launch overhead, host sync, idle,
#: stream waits): dropped when the summary's caveat says the GPU ran untraced work then.
IDLE_TIME_FIXES = ("cuda-graphs", "host-sync", "input-pipeline", "stream-wait")


def _occupancy(payload: dict[str, Any]) -> list[dict[str, Any]]:
    occ = payload.get("evidence", {}).get("underfilled_launches") or []
    if not occ:
        return []
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for r in occ:
        by_rank.setdefault(int(r["rank"]), []).append(r)
    rank = max(by_rank, key=lambda k: (sum(r["at_stake_ns"] for r in by_rank[k]), -k))
    kern = sorted(by_rank[rank], key=lambda r: -r["at_stake_ns"])
    stake = sum(r["at_stake_ns"] for r in kern)
    w = _by_rank(payload).get(rank, {}).get("window_ns") or kern[0]["window_ns"]
    if stake < OCC_MIN_FRAC * w:
        return []
    ev = [f"{_short(r['name'])}: {r['underfilled_launches']:,} of {r['launches']:,} launches "
          f"with grid {r['grid']} ({r['blocks']:,} blocks) and block {r['block']} on a GPU "
          f"with {r['sm_count']} SMs: at most {100 * r['sm_fill']:.1f}% of the SMs busy; "
          f"{_ms(r['time_ns'])} = {r['share_pct']:.1f}% of the window, "
          f"{_ms(r['at_stake_ns'])} at stake." for r in kern[:3]]
    return [_rec("occupancy", "Launches too small to fill the GPU: give them more blocks",
                 stake, w, ev,
                 "Launch at least one block per SM (better, a few per SM): split the work "
                 "over more blocks (grid-stride loops, split-K / stream-K for GEMMs, batching "
                 "independent small launches into one), and use blocks of at least one warp "
                 "(32 threads; 64 on AMD).",
                 "for each under-filled launch, (time - the device's shortest kernel) x "
                 "(1 - blocks / SMs): the share the idle SMs would have taken had the same "
                 "work been spread over all of them (an upper bound).")]


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
    items += _tensor_cores(payload, attr["totals"]["window_ns"] if attr else 0)
    withheld: list[str] = []
    if payload.get("summary", {}).get("untraced_gpu_work"):
        # the GPU's own counters say it was busy in the trace's idle time: no fix whose
        # saving is that idle time
        withheld = sorted(r["id"] for r in items if r["id"] in IDLE_TIME_FIXES)
        items = [r for r in items if r["id"] not in IDLE_TIME_FIXES]
    items.sort(key=lambda r: (-r["saving_ns"], r["id"]))
    return {"verdict": verdict(payload), "items": items, "withheld": withheld}
