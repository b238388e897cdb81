"""The verdict and ranked recommendations of the report, from the payload's numbers.

Every recommendation carries: ``id``, ``title``, ``saving_ns`` (an *upper bound* on the GPU
wall time the fix could recover, summed over devices), ``saving_pct`` (of the summed device
windows), ``evidence`` (sentences with the numbers and the kernels or gaps behind them),
``how`` (what to do) and ``estimate`` (how ``saving_ns`` was computed). They are ranked by
``saving_ns`` (ties by id), so the first one is the biggest lever.

Rules and their savings estimates:

``cuda-graphs`` (launch-bound)
    Fires when attribution's launch overhead is at least 5% of the window. Saving = the
    launch overhead time itself: the GPU sat idle while the host was inside a launch call for
    work that had not started. CUDA graphs replace per-kernel launches by one graph launch,
    so at most this time comes back.
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
    Fires when exposed communication is at least 2% of the window. Saving = the exposed
    communication time (if all of it were hidden under compute).
``tensor-cores`` (GEMMs far under their roof; only with roofline data)
    Fires for GEMM/convolution kernels (names matching :data:`traceparse.reports.sections.GEMM_RE`)
    that reach less than 30% of the attainable FLOP/s at their arithmetic intensity and take
    at least 2% of the time. Saving = for each such kernel ``time * (1 - pct_of_roof / 50)``:
    the time saved if it reached 50% of its roof (a conservative target for a tensor-core,
    lower-precision kernel).
``overlap-copies`` (exposed memcpy/memset)
    Fires when copies/memsets with nothing else running are at least 10% of the window.
    Saving = that exposed copy time (if every copy overlapped compute on another stream,
    or were avoided by keeping data on the device).
``input-pipeline`` (host-bound idle)
    Fires when idle time is at least 10% of the window. Saving = the idle time (an upper
    bound: the GPU had nothing to do and no launch was in flight, which points at host
    work such as data loading, preprocessing or synchronisation).

The verdict names the part of the attribution that dominates the window. When the payload
has a ``summary`` section (``traceparse summary``), its verdict line is the headline,
verbatim, so the report and the command line say the same thing.
"""

from __future__ import annotations

from typing import Any

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
    return f"{ns / 1e6:,.3f} ms"


def _short(name: str, n: int = 70) -> str:
    """A kernel name cut to its base (no parameter list) and at most ``n`` characters."""
    base = name.split("(")[0].removeprefix("void ").strip() or name
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


def _launch(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    lo = t["launch_overhead_ns"]
    if lo < LAUNCH_MIN_FRAC * w:
        return []
    ev = [f"Launch overhead {_ms(lo)} = {_pct(lo, w):.1f}% of the GPU window: the GPU was idle "
          "while the host was still inside a launch call for the next kernel."]
    la = payload.get("launches")
    if la and la.get("linked"):
        ev.append(f"{la['kernels_shorter_than_launch']:,} of {la['linked']:,} kernels ran "
                  "shorter than their own launch call; CUDA graphs could recover about "
                  f"{_ms(la['graph_recoverable_ns'])} of launch gaps on "
                  f"{la['launch_bound_kernels']:,} launch-bound kernels.")
    k = payload.get("kernels")
    if k and k.get("instances"):
        ev.append(f"{k['instances']:,} kernel launches, average kernel "
                  f"{k['total_ns'] / k['instances'] / 1e3:,.2f} µs.")
    return [_rec("cuda-graphs", "Launch-bound: capture the step in a CUDA graph", lo, w, ev,
                 "Capture the repeated step with CUDA graphs (torch.cuda.graphs / "
                 "torch.compile mode='reduce-overhead') so one graph launch replaces many "
                 "kernel launches; also remove host work between launches.",
                 "the launch overhead time (GPU idle while a launch call was in flight).")]


def _fusion(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    tiny = payload["evidence"]["tiny_memory_kernels"]
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
    exposed = t["communication_ns"]
    if exposed < COMM_MIN_FRAC * w:
        return []
    hidden = t["overlapped_comm_ns"]
    ev = [f"Exposed communication {_ms(exposed)} = {_pct(exposed, w):.1f}% of the window; "
          f"{_ms(hidden)} of communication was already hidden under compute "
          f"({_pct(hidden, hidden + exposed):.1f}% overlap)."]
    return [_rec("overlap-comm", "Exposed NCCL time: overlap communication with compute",
                 exposed, w, ev,
                 "Overlap collectives with compute (DDP bucketing / FSDP prefetch, async "
                 "collectives on a separate stream), shrink them (gradient compression, "
                 "bigger buckets) or fix rank imbalance that makes ranks wait.",
                 "the exposed communication time (if all of it were hidden under compute).")]


def _copies(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    mem = t["memory_ns"]
    if mem < COPY_MIN_FRAC * w:
        return []
    ev = [f"Copies/memsets ran with no kernel alongside for {_ms(mem)} = "
          f"{_pct(mem, w):.1f}% of the window."]
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
    import re

    from traceparse.reports.sections import GEMM_RE

    roof = payload.get("roofline")
    if not roof:
        return []
    slow = [p for p in roof["points"] if p.get("pct_of_roof") is not None
            and p["pct_of_roof"] < ROOF_MAX_PCT and re.search(GEMM_RE, p["kernel_name"])]
    total = sum(p["time_ns"] for p in roof["points"] if p.get("time_ns"))
    base = w or total
    saving = sum(p["time_ns"] * (1 - p["pct_of_roof"] / ROOF_TARGET_PCT) for p in slow)
    if not slow or saving < FUSION_MIN_FRAC * base:
        return []
    ev = [f"{_short(p['kernel_name'])}: {p['pct_of_roof']:.1f}% of its roof "
          f"({p.get('precision') or '?'}), {p['time_ns'] / 1e3:,.1f} µs"
          for p in sorted(slow, key=lambda p: -p["time_ns"])[:3]]
    return [_rec("tensor-cores", "GEMMs far under their roof: use tensor cores / lower "
                 "precision", saving, base, ev,
                 "Run GEMMs in BF16/FP16 or TF32 (torch.backends.cuda.matmul.allow_tf32, "
                 "autocast) with tensor-core friendly shapes (multiples of 8/16), or pick a "
                 "better kernel (cuBLASLt heuristics, CUTLASS).",
                 "for each such kernel, time x (1 - % of roof / 50): the time saved at 50% "
                 "of its roof.")]


def _idle(payload: dict[str, Any], t: dict[str, int], w: int) -> list[dict[str, Any]]:
    idle = t["idle_ns"]
    if idle < IDLE_MIN_FRAC * w:
        return []
    ev = [f"The GPU was idle with no launch in flight for {_ms(idle)} = "
          f"{_pct(idle, w):.1f}% of the window."]
    gaps = payload.get("gaps", {}).get("table", {}).get("rows", [])
    if gaps:
        g = gaps[0]
        ev.append(f"Longest gap: {g.get('dur_ns', 0) / 1e3:,.1f} µs"
                  + (f", cause: {g['cause']}" if g.get("cause") else "")
                  + (f" ({g['cause_name']})" if g.get("cause_name") else "") + ".")
        for c in payload["gaps"].get("by_cause", [])[:3]:
            ev.append(f"Gaps caused by {c['cause']}: {c['count']:,} totalling "
                      f"{_ms(c['total_ns'])}.")
    return [_rec("input-pipeline", "GPU idle waiting for the host: feed it faster", idle, w,
                 ev, "Look at what the host does in the gaps (data loading, preprocessing, "
                 ".item()/synchronize calls): more DataLoader workers, prefetching, "
                 "asynchronous copies, removing host synchronisations.",
                 "the idle time (nothing ran and no launch was in flight).")]


def recommend(payload: dict[str, Any]) -> dict[str, Any]:
    """``{"verdict": {...}, "items": [ranked recommendations]}`` for ``payload``."""
    items: list[dict[str, Any]] = []
    attr = payload.get("attribution")
    if attr and attr["totals"]["window_ns"]:
        t, w = attr["totals"], attr["totals"]["window_ns"]
        items += _launch(payload, t, w)
        items += _fusion(payload, w)
        items += _pinned(payload, w)
        items += _comm(payload, t, w)
        items += _copies(payload, t, w)
        items += _idle(payload, t, w)
    items += _tensor_cores(payload, attr["totals"]["window_ns"] if attr else 0)
    items.sort(key=lambda r: (-r["saving_ns"], r["id"]))
    return {"verdict": verdict(payload), "items": items}
