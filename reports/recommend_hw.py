"""The fix rules read off the kernels themselves (:mod:`traceparse.reports.recommend`):
GEMMs far under their roofline (``tensor-cores``) and launches with fewer blocks than the
GPU has SMs (``occupancy``)."""

from __future__ import annotations

from typing import Any

from traceparse.kernelname import short_kernel_name
from traceparse.reports.rec_base import FUSION_MIN_FRAC, _by_rank, _ms, _rec
from traceparse.roofline.model import BLIND_NOTE, BLIND_ZERO

ROOF_MAX_PCT = 30.0
ROOF_TARGET_PCT = 50.0


def _lower_bound(p: dict[str, Any]) -> bool:
    """True when a point's FLOPs are only a lower bound: its ncu page has no tensor-core
    counter (a ``SpeedOfLight_RooflineChart`` page), so tensor work would be unseen and
    "far under its roof" is not known."""
    note = str(p.get("note") or "")
    return BLIND_NOTE in note or BLIND_ZERO in note


def _tensor_cores(payload: dict[str, Any], w: int) -> list[dict[str, Any]]:
    """GEMMs and convolutions under ``ROOF_MAX_PCT`` of their roof. A point counts only with
    its kernel time (an ncu roofline page without durations prices nothing) and with all of
    its FLOPs counted (:func:`_lower_bound`)."""
    from traceparse.analyses.kclass import class_of

    roof = payload.get("roofline")
    if not roof:
        return []
    slow = [p for p in roof["points"] if p.get("pct_of_roof") is not None and p.get("time_ns")
            and not _lower_bound(p) and p["pct_of_roof"] < ROOF_MAX_PCT
            and class_of(p["kernel_name"]) in ("gemm", "conv")]
    total = sum(p["time_ns"] for p in roof["points"] if p.get("time_ns"))
    base = w or total
    saving = sum(p["time_ns"] * (1 - p["pct_of_roof"] / ROOF_TARGET_PCT) for p in slow)
    if not slow or saving < FUSION_MIN_FRAC * base:
        return []
    ev = [f"{short_kernel_name(p['kernel_name'])}: {p['pct_of_roof']:.1f}% of its roof "
          f"({p.get('precision') or '?'}), {_ms(p['time_ns'])}"
          for p in sorted(slow, key=lambda p: -p["time_ns"])[:3]]
    return [_rec("tensor-cores", "GEMMs far under their roof: use tensor cores / lower "
                 "precision", saving, base, ev,
                 "Run GEMMs in BF16/FP16 or TF32 (torch.backends.cuda.matmul.allow_tf32, "
                 "autocast) with tensor-core friendly shapes (multiples of 8/16), or pick a "
                 "better kernel (cuBLASLt heuristics, CUTLASS).",
                 "for each such kernel, time x (1 - % of roof / 50): the time saved at 50% "
                 "of its roof.")]


OCC_MIN_FRAC = 0.02


def _launch_config(r: dict[str, Any]) -> str:
    """How an under-filled kernel was launched: its one grid and block, or (launched with
    several) the range of blocks and the configuration with the most time."""
    n = f"{r['underfilled_launches']:,} of {r['launches']:,} launches"
    if r.get("configs", 1) <= 1:
        return f"{n} with grid {r['grid']} ({r['blocks']:,} blocks) and block {r['block']}"
    return (f"{n} with {r['min_blocks']:,} to {r['max_blocks']:,} blocks in "
            f"{r['configs']} configurations (most time: grid {r['grid']}, "
            f"{r['blocks']:,} blocks, block {r['block']})")


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
    ev = [f"{short_kernel_name(r['name'])}: {_launch_config(r)} on a GPU with {r['sm_count']} SMs: "
          f"at most {100 * r.get('max_blocks', r['blocks']) / r['sm_count']:.1f}% of the SMs "
          f"busy; {_ms(r['time_ns'])} = {r['share_pct']:.1f}% of the window, "
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
