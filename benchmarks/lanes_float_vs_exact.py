"""The report overview's lanes, float running sums (branch h35) against exact integers.

Usage: ``PYTHONPATH=. python3 benchmarks/lanes_float_vs_exact.py [--ref h35] FILE...`` from the
repository (the old ``reports/lanes.py`` is read with ``git show REF:reports/lanes.py``).

For each file (nsys export or Kineto trace, through ``loader.load``) and each setting (the
report's defaults; ``budget=10, bins=50``) it prints one line per lane whose segments
differ, and, per bin that differs, what changed with the trace's own events as evidence:

* ``phantom``: the float path drew a shade, the exact path none, and no activity of the
  lane overlaps the bin (checked on the rows, not on the new code);
* ``added``: the exact path draws a bin the float path left empty (activity listed);
* ``level``: a quarter level flipped; the exact busy time over the bin width is printed
  (summed over the lane's rows in Python integers), so the right quarter can be read off;
* ``dominant``: the dominant category changed (busy time per category printed).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from traceparse import loader
from traceparse.reports import lanes

SETTINGS: list[dict[str, int]] = [{}, {"budget": 10, "bins": 50}]


def _old_module(ref: str) -> Any:
    src = subprocess.run(["git", "show", f"{ref}:reports/lanes.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_lanes.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_lanes", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _per_bin(segs: list[list[float]], edges: list[int]) -> dict[int, tuple[int, float]]:
    """bin -> (dominant category, level) of the drawn bins of a binned lane."""
    out: dict[int, tuple[int, float]] = {}
    for a, w, c, level in segs:
        i, j = edges.index(int(a)), edges.index(int(a + w))
        for b in range(i, j):
            out[b] = (int(c), float(level))
    return out


def _busy(rows: pl.DataFrame, t0: int, lo: int, hi: int) -> dict[str, int]:
    """Exact busy ns per category of ``rows`` in ``[lo, hi)`` (relative), Python ints."""
    out: dict[str, int] = {}
    for cat, s, e in rows.select(pl.col("category").cast(pl.String), "start_ns",
                                 "end_ns").iter_rows():
        ov = min(e - t0, hi) - max(s - t0, lo)
        if ov > 0:
            out[cat] = out.get(cat, 0) + ov
    return out


def compare(gpu: pl.DataFrame, old: Any, kw: dict[str, int]) -> list[str]:
    a, b = old.timeline_lanes(gpu, **kw), lanes.timeline_lanes(gpu, **kw)
    assert {k: v for k, v in a.items() if k != "lanes"} == {
        k: v for k, v in b.items() if k != "lanes"}
    lines: list[str] = []
    if b["mode"] != "binned":
        assert a == b
        return lines
    edges = [int(x) for x in lanes.bin_edges(0, b["window_ns"], kw.get("bins", 600))]
    t0 = b["window_start_ns"]
    for la, lb in zip(a["lanes"], b["lanes"], strict=True):
        if la["segments"] == lb["segments"]:
            continue
        pred = (pl.col("rank") == lb["rank"]) & (pl.col("device_id") == lb["device_id"])
        pred = pred & (pl.col("stream_id").is_null() if lb["stream_id"] is None
                       else pl.col("stream_id") == lb["stream_id"])
        rows = gpu.filter(pred)
        pa, pb = _per_bin(la["segments"], edges), _per_bin(lb["segments"], edges)
        lines.append(f"  lane rank {lb['rank']} dev {lb['device_id']} stream "
                     f"{lb['stream_id']}: segments {len(la['segments'])} -> "
                     f"{len(lb['segments'])}")
        for bin_ in sorted(set(pa) | set(pb)):
            if pa.get(bin_) == pb.get(bin_):
                continue
            lo, hi = edges[bin_], edges[bin_ + 1]
            busy = _busy(rows, t0, lo, hi)
            kind = ("phantom" if bin_ not in pb else "added" if bin_ not in pa
                    else "level" if pa[bin_][1] != pb[bin_][1] else "dominant")
            if kind == "phantom":
                assert not busy, (bin_, busy)  # the evidence: nothing ran there
            else:
                assert busy, (bin_, kind)
            lines.append(f"    bin {bin_} [{lo}, {hi}) {kind}: {pa.get(bin_)} -> "
                         f"{pb.get(bin_)}; busy {busy} of {hi - lo} "
                         f"({sum(busy.values()) / max(hi - lo, 1):.6f})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="h35")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    old = _old_module(args.ref)
    for f in args.files:
        gpu = loader.load(f).gpu
        for kw in SETTINGS:
            lines = compare(gpu, old, kw)
            out = lanes.timeline_lanes(gpu, **kw)
            print(f"{Path(f).name} {kw or 'defaults'}: mode {out['mode']}, "
                  f"{len(out['lanes'])} lanes, "
                  f"{sum(len(ln['segments']) for ln in out['lanes'])} segments, "
                  f"{sum(1 for ln in lines if ln.startswith('  lane'))} lanes changed")
            for ln in lines:
                print(ln)
        sys.stdout.flush()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
