"""What every fix rule of :mod:`traceparse.reports.recommend` shares: the thresholds at
which the rules fire, and how a fix row and its figures are written."""

from __future__ import annotations

from typing import Any

from traceparse import units

#: Thresholds (fractions of the summed window) at which each rule fires.
LAUNCH_MIN_FRAC = 0.05
FUSION_MIN_FRAC = 0.02
COMM_MIN_FRAC = 0.02
IDLE_MIN_FRAC = 0.10
PINNED_MIN_FRAC = 0.01
COPY_MIN_FRAC = 0.10


def _ms(ns: float) -> str:
    """A duration in human units (ns, µs, ms, s), as the CLI prints it."""
    return units.duration(round(ns))


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def _rec(rid: str, title: str, saving: float, window: int, evidence: list[str], how: str,
         estimate: str) -> dict[str, Any]:
    return {"id": rid, "title": title, "saving_ns": int(saving), "window_ns": int(window),
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


def unprofiled_clause(row: dict[str, Any]) -> str:
    """``; without the profiler X of Y`` of a savings-engine row (its ``saving_unprofiled_ns``
    of ``window_unprofiled_ns``), or "" where it has no profiler-free figure: the one
    wording ``summary``'s savings and launch lines and the report's launch note share."""
    if row.get("saving_unprofiled_ns") is None or not row.get("window_unprofiled_ns"):
        return ""
    return (f"; without the profiler {_ms(row['saving_unprofiled_ns'])} of "
            f"{_ms(row['window_unprofiled_ns'])}")
