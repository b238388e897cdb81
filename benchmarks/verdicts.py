"""Verdict table over every shared trace: headline verdict, largest gap and its cause, launch
overhead, the CUDA-graph saving and the overlap-comm saving (best rank, with that rank's
exposed communication).

Usage (repo root): ``python3 benchmarks/verdicts.py [--out FILE.md]``. Dev-only. Every nsys
export and every Kineto file of ``../shared/traces`` is one row, except the 8 DLRM ranks
(``param__dlrm_8rank__worker*``), which are loaded together as one 8-rank set (through a
temporary directory of links; the corpus is never copied). Run it on two checkouts to get a
before/after table of the conclusions.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared"


def _inputs(tmp: Path) -> list[tuple[str, Path]]:
    traces = SHARED / "traces"
    out = [(p.name, p) for p in sorted((traces / "nsys").glob("*.sqlite"))]
    dlrm = sorted((traces / "torch").glob("param__dlrm_8rank__worker*"))
    for p in sorted((traces / "torch").glob("*.json*")):
        if p not in dlrm:
            out.append((p.name, p))
    if dlrm:
        d = tmp / "dlrm_8rank"
        d.mkdir()
        for p in dlrm:
            (d / p.name).symlink_to(p.resolve())
        out.append(("param__dlrm_8rank (8 ranks)", d))
    return out


def row(name: str, path: Path) -> dict[str, Any]:
    """One table row for ``path`` (errors become the verdict text)."""
    from traceparse import load
    from traceparse.analyses.summary import summarize

    tl = load(path, cache=False)
    s = summarize(tl, top=1)
    bd = s["sections"]["breakdown"]
    gaps = s["sections"]["top_gaps"]
    launches = s["sections"]["launches"]
    rec = launches.filter(pl.col("metric") == "graph_recoverable_ns")
    lo_rank = (bd.group_by("rank").agg(pl.col("launch_overhead_ns").sum().alias("lo"))
               if bd.height else None)
    out: dict[str, Any] = {
        "trace": name, "verdict": s["verdict"],
        "ranks": int(tl.gpu["rank"].n_unique()) if tl.gpu.height else 0,
        "launch_overhead_ms_max_rank": (int(lo_rank["lo"].max()) / 1e6
                                        if lo_rank is not None and lo_rank.height else 0.0),
        "graph_recoverable_ms": (float(rec["sum"][0] or 0) / 1e6 if rec.height else 0.0),
        "top_gap": "",
        "overlap_comm": "0.000 (0.000)",
    }
    sv = s["sections"].get("savings")
    if sv is not None and sv.height:
        oc = sv.filter(pl.col("change") == "overlap_comm").sort(
            ["saving_ns", "rank"], descending=[True, False])
        if oc.height:
            b = oc.row(0, named=True)
            out["overlap_comm"] = f"{b['saving_ns'] / 1e6:.3f} ({b['bound_ns'] / 1e6:.3f})"
    if gaps.height:
        g = gaps.row(0, named=True)
        out["top_gap"] = f"{g['dur_ns'] / 1e6:.3f} ms {g['cause']}: {g['cause_name']}"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = ["| trace | ranks | verdict | largest gap: cause | launch overhead ms (max rank) "
             "| graph-recoverable ms | overlap-comm saves ms (exposed comm, that rank) |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in _inputs(Path(tmp)):
            t0 = time.time()
            try:
                r = row(name, path)
                lines.append(f"| {name} | {r['ranks']} | {r['verdict']} | {r['top_gap']} | "
                             f"{r['launch_overhead_ms_max_rank']:.3f} | "
                             f"{r['graph_recoverable_ms']:.3f} | {r['overlap_comm']} |")
            except Exception as e:  # a dev table: report and go on
                lines.append(f"| {name} | - | error: {type(e).__name__}: {e} | | | | |")
            print(lines[-1], f"({time.time() - t0:.1f}s)", file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
