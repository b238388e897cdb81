"""The rules of the conclusions audit (test_conclusions_audit.py): each payload conclusion
(the verdict, the largest gaps, fix 1) checked against a trace's raw events as
``audit_raw.py`` reads them, independently of traceparse. Each ``audit_*`` returns the
problems it found, one line each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from audit_raw import (
    Raw,
    _clip,
    _intersect,
    _length,
    _union,
)

#: Gaps audited per trace (largest first, as the report lists them).
TOP_GAPS = 5
#: Tolerance on shares (percentage points) and times (the payload rounds percentages to
#: 0.1; Kineto times pass through floats in the stdlib json module).
PTS = 0.11
TOL_NS = 2_000
COVER = 0.5


@dataclass
class Device:
    """One (rank, device) of the payload, with its raw activity."""

    pids: set[int] | None  # None: every process (Kineto files: one process per file)
    window: tuple[int, int]
    busy: dict[str, list[tuple[int, int]]]  # kernel / copy / all -> union


def _devices(raw: Raw, payload: dict[str, Any], rank_pids: dict[int, set[int]]
             ) -> dict[tuple[int, int], Device]:
    """Every (rank, device) the payload's attribution has, with its raw window and busy
    unions (nsys: the rank's processes; Kineto: the file is one rank)."""
    out = {}
    for row in payload.get("attribution", {}).get("rows", []):
        rank, dev = int(row["rank"]), int(row["device_id"])
        pids = rank_pids.get(rank) if len(rank_pids) > 1 else None
        acts = [g for g in raw.gpu if g[1] == dev and (pids is None or g[0] in pids)]
        if not acts:
            continue
        win = (min(g[3] for g in acts), max(g[4] for g in acts))
        busy = {"kernel": _union([(g[3], g[4]) for g in acts if g[5] == "kernel"]),
                "copy": _union([(g[3], g[4]) for g in acts if g[5] != "kernel"]),
                "all": _union([(g[3], g[4]) for g in acts])}
        out[(rank, dev)] = Device(pids, win, busy)
    return out


_BUSY_LABELS = {"compute-bound": "kernel", "communication-bound": "kernel",
                "memory-copy-bound": "copy"}
_IDLE_LABELS = ("launch-bound", "warm-up-dominated", "host-sync-bound", "idle-bound",
                "stream-wait-bound")


def audit_verdict(raw: Raw, payload: dict[str, Any], devs: dict[tuple[int, int], Device]
                  ) -> list[str]:
    line = payload.get("summary", {}).get("verdict") or ""
    m = re.match(r"^([\w-]+): ([\d.]+)% of the window", line)
    if not m or not devs:
        return [] if not devs else [f"verdict not parsed: {line!r}"]
    label, share = m.group(1), float(m.group(2))
    window = sum(d.window[1] - d.window[0] for d in devs.values())
    idle = window - sum(_length(d.busy["all"]) for d in devs.values())
    out = []
    # the payload's window is the file's: the same first-to-last activity span per device
    got_w = int(payload["attribution"]["totals"]["window_ns"])
    if abs(got_w - window) > TOL_NS * max(1, len(devs)):
        out.append(f"window {got_w} ns but the file's activity spans {window} ns")
    if label in _BUSY_LABELS:
        have = 100.0 * sum(_length(d.busy[_BUSY_LABELS[label]]) for d in devs.values()) / window
        if share > have + PTS:
            out.append(f"verdict {label} {share}% but the file's {_BUSY_LABELS[label]} "
                       f"activity covers {have:.2f}% of the window")
    elif label in _IDLE_LABELS:
        if share > 100.0 * idle / window + PTS:
            out.append(f"verdict {label} {share}% but the GPU is idle for "
                       f"{100.0 * idle / window:.2f}% of the window")
        if label == "host-sync-bound":
            inside = 0
            for d in devs.values():
                calls = _union([(c[3], c[4]) for c in raw.calls
                                if d.pids is None or c[0] in d.pids])
                free = _gaps_of(d)
                inside += _intersect(free, _clip(calls, *d.window))
            if share > 100.0 * inside / window + PTS:
                out.append(f"verdict host-sync {share}% but host calls cover only "
                           f"{100.0 * inside / window:.2f}% of the window while the GPU idles")
    else:
        out.append(f"unknown verdict label {label!r}")
    return out


def _gaps_of(d: Device) -> list[tuple[int, int]]:
    """The device's idle stretches inside its window (the complement of its busy union)."""
    free, t = [], d.window[0]
    for s, e in d.busy["all"]:
        if s > t:
            free.append((t, s))
        t = max(t, e)
    return free


def _base(name: str) -> str:
    """A cause name as the file spells it: ``first op [shapes]`` -> ``op``; a sampled frame
    without its share; a profiler range without ``(dynamo_timed)``-style suffixes kept."""
    name = re.sub(r"^first ", "", name)
    name = re.sub(r" \[\[.*$", "", name)
    name = re.sub(r": [\d.]+ (ns|µs|ms|s), median .*$", "", name)
    return re.sub(r" \(\d+% of the gap\)$", "", name)


def _named(rows: list[tuple[int, int, str, int, int]], name: str, tid: int | None,
           start: int | None, end: int | None, pids: set[int] | None
           ) -> list[tuple[int, int, str, int, int]]:
    base = _base(name)
    hits = [r for r in rows if (r[2] == name or r[2] == base or r[2].startswith(base))
            and (pids is None or r[0] in pids) and (tid is None or r[1] == tid)]
    if start is not None and end is not None:
        hits = [r for r in hits if abs(r[3] - start) <= TOL_NS and abs(r[4] - end) <= TOL_NS]
    return hits


def audit_gaps(raw: Raw, payload: dict[str, Any], devs: dict[tuple[int, int], Device]
               ) -> list[str]:
    out = []
    host = raw.calls + raw.ranges
    for g in payload.get("gaps", {}).get("table", {}).get("rows", [])[:TOP_GAPS]:
        key = (int(g["rank"]), int(g["device_id"]))
        d = devs.get(key)
        gs, ge, cause = int(g["start_ns"]), int(g["end_ns"]), g["cause"]
        tag = f"gap [{gs}, {ge}) {key} {cause} {g.get('cause_name')!r}"
        if d is None:
            out.append(f"{tag}: no such device in the file")
            continue
        ran = _intersect([(gs, ge)], d.busy["all"])
        if ran > TOL_NS:
            out.append(f"{tag}: the device ran activity for {ran} ns inside the gap")
        length = ge - gs
        name = g.get("cause_name")
        if cause == "unknown":
            cover = [c for c in raw.calls if (d.pids is None or c[0] in d.pids)
                     and min(c[4], ge) - max(c[3], gs) >= COVER * length]
            if cover:
                out.append(f"{tag}: but {cover[0][2]} covers half of it")
            continue
        if cause == "stream_wait":
            out += _audit_stream_wait(raw, g, d, tag)
            continue
        if name is None:
            out.append(f"{tag}: no call or range named")
            continue
        if cause == "cpu_busy":
            share = re.search(r"\((\d+)% of the gap\)$", name)
            ok = (d.pids is None or any(p in d.pids for p, _ in raw.sampled)) and raw.sampled
            if not ok or not share or int(share.group(1)) <= 0:
                out.append(f"{tag}: no CPU samples of the thread in the file")
            continue
        if name == "unrecorded dispatch":  # no call or range to name: check the claim
            out += _audit_unrecorded(raw, g, gs, ge, 0, tag)
            continue
        hits = _named(host, name, g.get("cause_thread_id"), g.get("cause_start_ns"),
                      g.get("cause_end_ns"), d.pids)
        if not hits:
            out.append(f"{tag}: the file has no call or range {name!r} on thread "
                       f"{g.get('cause_thread_id')} at [{g.get('cause_start_ns')}, "
                       f"{g.get('cause_end_ns')})")
            continue
        s, e = hits[0][3], hits[0][4]
        cov = min(e, ge) - max(s, gs)
        detail = g.get("cause_detail") or ""
        tid = g.get("cause_thread_id")
        if cause == "issuing" and _OS_WAIT_RE.match(name) and not any(
                c[1] == tid and c[3] < ge and c[4] > gs for c in raw.calls):
            # a thread that waited in the OS through the gap and made no CUDA call in it
            # issued nothing: another thread launched the work that ended the gap
            out.append(f"{tag}: thread {tid} waited and made no CUDA call during the gap")
        if cov <= 0:
            out.append(f"{tag}: the named call [{s}, {e}) does not overlap the gap")
        elif detail.startswith("first CUDA call in the gap"):
            if not gs - TOL_NS <= s < ge:
                out.append(f"{tag}: the first call in the gap starts at {s}, outside it")
        elif detail.startswith("the GPU drained while the host waited"):
            if not s <= gs + TOL_NS:
                out.append(f"{tag}: the sync starts at {s}, after the gap began")
        elif detail.startswith("unrecorded dispatch"):
            out += _audit_unrecorded(raw, g, gs, ge, cov, tag)
        elif detail.startswith("issued by this thread"):
            out += _audit_issued_by(raw, g, gs, ge, cov, tag)
        elif cov < COVER * length - TOL_NS:
            out.append(f"{tag}: the named call covers {cov} ns = {100 * cov / length:.1f}% "
                       "of the gap, less than half")
    return out


_OS_WAIT_RE = re.compile(r"^(pthread_cond_(timed)?wait|pthread_mutex_lock|futex|poll|ppoll|"
                         r"epoll_wait|select|sem_(timed)?wait|nanosleep|usleep|sleep)")


def _thread_unrecorded(raw: Raw, tid: Any, gs: int, ge: int) -> int:
    """The time of ``[gs, ge)`` in no recorded range of thread ``tid`` (ProfilerStep aside)."""
    mine = [(r[3], r[4]) for r in raw.ranges
            if r[1] == tid and not r[2].startswith("ProfilerStep#")]
    return (ge - gs) - _intersect([(gs, ge)], _union(mine))


def _audit_issued_by(raw: Raw, g: dict[str, Any], gs: int, ge: int, cov: int, tag: str
                     ) -> list[str]:
    """An issuing gap named on the thread that issued the work ending it, in a trace that
    records no framework ops: the named call plus that thread's time in no recorded range
    cover half the gap, and the thread made a CUDA call inside the gap (the launch of what
    ends it)."""
    tid = g.get("cause_thread_id")
    unrec = _thread_unrecorded(raw, tid, gs, ge)
    out = []
    if cov + unrec < COVER * (ge - gs) - TOL_NS:
        out.append(f"{tag}: the named call ({cov} ns) and the thread's unrecorded time "
                   f"({unrec} ns) cover less than half the gap")
    if not any(c[1] == tid and gs <= c[3] < ge for c in raw.calls):
        out.append(f"{tag}: thread {tid} made no CUDA call inside the gap")
    return out


def _audit_unrecorded(raw: Raw, g: dict[str, Any], gs: int, ge: int, cov: int, tag: str
                      ) -> list[str]:
    """An issuing gap named as unrecorded dispatch: the named op plus the time on its thread
    in no recorded range (ProfilerStep aside) cover at least half the gap, inside one
    ProfilerStep, with CUDA calls of that thread before and after it in that step."""
    tid = g.get("cause_thread_id")
    unrec = _thread_unrecorded(raw, tid, gs, ge)
    out = []
    if cov + unrec < COVER * (ge - gs) - TOL_NS:
        out.append(f"{tag}: the named op ({cov} ns) and the unrecorded time ({unrec} ns) "
                   "cover less than half the gap")
    steps = [r for r in raw.ranges if r[2].startswith("ProfilerStep#")
             and 2 * (min(r[4], ge) - max(r[3], gs)) >= ge - gs]
    if not steps:
        return [*out, f"{tag}: no ProfilerStep holds the gap"]
    s0, s1 = steps[0][3], steps[0][4]
    calls = [c for c in raw.calls if c[1] == tid and s0 <= c[3] < s1]
    if not any(c[4] <= ge for c in calls) or not any(c[3] >= gs for c in calls):
        out.append(f"{tag}: thread {tid} has no CUDA call before and after it in its step")
    return out


def _is(act: tuple[Any, ...], held: str) -> bool:
    """The GPU activity ``act`` is the one named ``held``: a kernel by (part of) its name,
    a copy or memset by its kind (the tool names them ``[CUDA memcpy ...]``)."""
    if held.startswith("[CUDA memcpy") or held.startswith("Memcpy"):
        return bool(act[5] == "memcpy")
    if held.startswith("[CUDA memset") or held.startswith("Memset"):
        return bool(act[5] == "memset")
    return held in act[6]


_WAIT_RE = re.compile(r"^(cuda|cu|hip)StreamWaitEvent")


def _audit_stream_wait(raw: Raw, g: dict[str, Any], d: Device, tag: str) -> list[str]:
    name = g.get("cause_name") or ""
    m = re.match(r"^(\S+) on stream (\d+): held (.+?) back", name)
    if not m:
        return [f"{tag}: stream-wait cause without wait call, stream and held activity"]
    call, stream, held = m.group(1), int(m.group(2)), m.group(3)
    gs, ge = int(g["start_ns"]), int(g["end_ns"])
    out = []
    waits = [c for c in raw.calls if c[2] == call and _WAIT_RE.match(c[2])
             and (d.pids is None or c[0] in d.pids) and c[3] < ge]
    if not waits:
        out.append(f"{tag}: no {call} call before the gap ends")
    recs = [w for w in raw.waits if (d.pids is None or w[0] in d.pids)]
    if recs:  # the file's synchronization records say which stream waited on which event
        if "from the CUPTI synchronization record" not in name:
            out.append(f"{tag}: the file records the waiting streams, the cause infers them")
        ev = re.search(r"; event (\d+) \(", name)
        if not any(w[1] == stream and w[3] < ge and (ev is None or w[2] == int(ev.group(1)))
                   for w in recs):
            out.append(f"{tag}: no synchronization record of a wait on stream {stream}"
                       + (f" for event {ev.group(1)}" if ev else "") + " before the gap ends")
    acts = [a for a in raw.gpu if a[2] == stream and _is(a, held) and a[4] > gs
            and (d.pids is None or a[0] in d.pids)]
    if not acts:
        out.append(f"{tag}: no activity {held!r} on stream {stream} after the gap began")
    elif min(a[3] for a in acts) < ge - TOL_NS:
        out.append(f"{tag}: {held!r} on stream {stream} started before the gap ended")
    return out


def _window(payload: dict[str, Any], rank: int) -> int:
    return sum(int(r["window_ns"]) for r in payload["attribution"]["rows"]
               if int(r["rank"]) == rank)


#: Calls that may block the host (the replay's sync candidates by name: synchronize, a
#: copy or free that waits, a wait or query loop); a superset is enough for an upper bound.
_BLOCKING_CALL = re.compile(r"(?i)synchron|memcpy|memset|wait|malloc|free|query")
_IDLE_FIXES = ("cuda-graphs", "host-sync", "input-pipeline", "stream-wait", "warm-up")


def audit_fix(raw: Raw, payload: dict[str, Any], devs: dict[tuple[int, int], Device]
              ) -> list[str]:
    items = payload.get("recommendations", {}).get("items", [])
    if not items or not devs:
        return []
    fix = items[0]
    out, fid, saving = [], fix["id"], int(fix["saving_ns"])
    tag = f"fix 1 {fid} ({saving} ns)"
    rank_of = {k[0] for k in devs}
    w = int(fix["window_ns"])
    if saving > w:
        out.append(f"{tag}: saves more than its window {w} ns")
    # the rank the fix is about: the one whose window the payload gives it
    rank = next((r for r in sorted(rank_of) if _window(payload, r) == w), None)
    mine = [d for k, d in devs.items() if rank is None or k[0] == rank]
    idle = sum(d.window[1] - d.window[0] - _length(d.busy["all"]) for d in mine)
    if fid in _IDLE_FIXES and fid != "warm-up" and saving > idle + TOL_NS:
        out.append(f"{tag}: saves more than the GPU's idle time {idle} ns on its rank")
    if fid == "stream-wait":
        sw = sum(int(g["dur_ns"]) for g in payload["gaps"]["table"]["rows"]
                 if g["cause"] == "stream_wait")
        tot = sum(int(c["total_ns"]) for c in payload["gaps"].get("by_cause", [])
                  if c["cause"] == "stream_wait")
        if saving > max(sw, tot) + TOL_NS:
            out.append(f"{tag}: saves more than its stream-wait gaps ({tot} ns)")
    if fid == "host-sync":
        # the host can get ahead of the GPU by at most the time it waited in blocking calls
        pids = set().union(*(d.pids for d in mine if d.pids)) or None
        waits = sum(c[4] - c[3] for c in raw.calls
                    if (pids is None or c[0] in pids) and _BLOCKING_CALL.search(c[2]))
        if saving > waits + TOL_NS:
            out.append(f"{tag}: saves more than the {waits} ns its rank's host spent in "
                       "blocking calls")
    if fid == "overlap-copies":
        copies = sum(_length(d.busy["copy"]) for d in mine)
        if saving > copies + TOL_NS:
            out.append(f"{tag}: saves more than the copies' time {copies} ns")
        # overlapped, copies hide under kernels: no more than the kernels' time
        kern = sum(_length(d.busy["kernel"]) for d in mine)
        if saving > kern + TOL_NS:
            out.append(f"{tag}: overlapping saves more than the {kern} ns of kernels the "
                       "copies could hide under")
    kernels = [g for g in raw.gpu if g[5] == "kernel"]
    # a gap quoted as evidence is the fix's rank's: another rank's gap says nothing of it
    said = [int(m.group(1)) for ev in fix.get("evidence", [])
            if (m := re.match(r"^(?:Replaying rank|Rank) (\d+)\b", ev))]
    for ev in fix.get("evidence", []):
        m = re.match(r"^Gap of .+? on rank (\d+) \(", ev)
        if m and said and int(m.group(1)) != said[0]:
            out.append(f"{tag}: evidence quotes a gap of rank {m.group(1)} for a saving of "
                       f"rank {said[0]}")
    for ev in fix.get("evidence", []):
        out += _audit_evidence(raw, kernels, fid, ev, saving, tag)
    return out + _audit_launch_figure(payload, items)


def _audit_launch_figure(payload: dict[str, Any], items: list[dict[str, Any]]) -> list[str]:
    """A figure named "launch overhead" in a fix's evidence is the attribution's (one
    computation, two places): the cuda-graphs evidence once quoted the engine's bound, all
    the time the GPU was not busy, under that name."""
    from traceparse.reports.recommend import _ms

    out = []
    for fix in items:
        for ev in fix.get("evidence", []):
            m = re.match(r"^Rank (\d+): launch overhead (.+?) = ", ev)
            if not m:
                continue
            rank = int(m.group(1))
            lo = sum(int(r["launch_overhead_ns"]) for r in payload["attribution"]["rows"]
                     if int(r["rank"]) == rank)
            if m.group(2) != _ms(lo):
                out.append(f"{fix['id']}: evidence says launch overhead {m.group(2)} on rank "
                           f"{rank}, the attribution {_ms(lo)}")
    return out


def _kernel_hits(kernels: list[Any], short: str) -> list[Any]:
    stem = short.removesuffix("...").removesuffix("…")  # the tool cuts long names
    return [k for k in kernels if stem in k[6].removeprefix("void ")]


def _audit_evidence(raw: Raw, kernels: list[Any], fid: str, ev: str, saving: int, tag: str
                    ) -> list[str]:
    out = []
    one = re.match(r"^(.+?): ([\d,]+) of ([\d,]+) launches with grid (\S+) \(([\d,]+) "
                   r"blocks\) and block (\S+) on a GPU with (\d+) SMs", ev)
    many = re.match(r"^(.+?): ([\d,]+) of ([\d,]+) launches with ([\d,]+) to ([\d,]+) blocks "
                    r"in \d+ configurations \(most time: grid (\S+), [\d,]+ blocks, block "
                    r"(\S+)\) on a GPU with (\d+) SMs", ev)
    if fid == "occupancy" and (one or many):
        m = one or many
        assert m is not None
        name, n = m.group(1), int(m.group(2).replace(",", ""))
        sms = int(m.group(7) if one else m.group(8))
        grid, block = (m.group(4), m.group(6)) if one else (m.group(6), m.group(7))
        hits = [k for k in _kernel_hits(kernels, name) if k[7] is not None and k[7] < sms]
        if one:
            hits = [k for k in hits if k[8] == grid and k[9] == block]
        if len(hits) < n:
            out.append(f"{tag}: the file has {len(hits)} launches of {name!r} with fewer "
                       f"blocks than {sms} SMs" + (f" and grid {grid}, block {block}" if one
                                                   else "") + f"; the evidence says {n}")
        if not any(k[8] == grid and k[9] == block for k in hits):
            out.append(f"{tag}: no launch of {name!r} with grid {grid} and block {block}")
        if many and hits and max(k[7] for k in hits) != int(m.group(5).replace(",", "")):
            out.append(f"{tag}: the most blocks of {name!r} under {sms} SMs is "
                       f"{max(k[7] for k in hits)}, not {m.group(5)}")
        small = sum(k[4] - k[3] for k in kernels if k[7] is not None and k[7] < sms)
        if saving > small + TOL_NS:
            out.append(f"{tag}: saves more than the time of every launch with fewer blocks "
                       f"than SMs ({small} ns)")
    if fid == "fusion" and ev.startswith("Most frequent memory-bound kernels: "):
        for part in ev.removeprefix("Most frequent memory-bound kernels: ").rstrip(".") \
                .split("; "):
            short = re.sub(r" x[\d,]+$", "", part)
            if not _kernel_hits(kernels, short):
                out.append(f"{tag}: evidence kernel {short!r} not in the file")
    if fid == "tensor-cores":
        short = ev.split(": ")[0]
        if not _kernel_hits(kernels, short):
            out.append(f"{tag}: evidence kernel {short!r} not in the file")
    g = re.match(r"^Gap of .+? \((\w+)\): (.+?)(?: \(thread (\d+)\))?(?:;.*)?\.$", ev)
    if g and g.group(1) != "cpu_busy":
        name = g.group(2)
        tid = int(g.group(3)) if g.group(3) else None
        if g.group(1) == "stream_wait":
            name = name.split(" on stream ")[0]
        if not _named(raw.calls + raw.ranges, name, tid, None, None, None):
            out.append(f"{tag}: evidence names {name!r} (thread {tid}), not in the file")
    sw = re.match(r"^Gap of .+? on rank \d+: (\S+) on stream (\d+): held (.+?) back", ev)
    if sw:
        if not any(c[2] == sw.group(1) for c in raw.calls):
            out.append(f"{tag}: evidence names {sw.group(1)!r}, not in the file")
        if not any(a[2] == int(sw.group(2)) and _is(a, sw.group(3)) for a in raw.gpu):
            out.append(f"{tag}: evidence holds {sw.group(3)!r} on stream {sw.group(2)}, "
                       "not in the file")
    return out
