"""Kineto ingest time: traceparse vs a bare orjson decode vs HTA's TraceAnalysis.

Usage (from the repo root; HTA is optional and never a dependency)::

    python3 benchmarks/bench_kineto_ingest.py [--scale 20] [--repeat 3] [--hta-python PY]

Inputs: the 8 DLRM ranks of ../shared/traces/torch (symlinked into a temp dir), and the same
ranks made ``--scale`` times longer by :func:`make_long` (events replicated with shifted
timestamps and ids), written to a temp dir. Prints medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
TORCH = REPO.parent / "shared" / "traces" / "torch"


def make_long(src: Path, dst: Path, scale: int) -> None:
    """Write ``src`` with its events repeated ``scale`` times, each copy shifted past the
    previous one in time; correlation / External ids shifted so links stay one-to-one."""
    doc = orjson.loads(src.read_bytes())
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1
    id_step = 10_000_000
    out = []
    for k in range(scale):
        for e in events:
            if k and e.get("ph") == "M":
                continue
            e2 = dict(e)
            if "ts" in e2 and isinstance(e2["ts"], (int, float)):
                e2["ts"] = e2["ts"] + k * span
            if isinstance(e2.get("args"), dict):
                a = dict(e2["args"])
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] += k * id_step
                e2["args"] = a
            if isinstance(e2.get("id"), int):
                e2["id"] += k * id_step
            out.append(e2)
    doc["traceEvents"] = out
    dst.write_bytes(orjson.dumps(doc))


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def bare_orjson(directory: Path) -> None:
    """orjson.loads of every file, GC paused as traceparse does (the fair floor)."""
    gc.disable()
    try:
        for f in sorted(directory.iterdir()):
            orjson.loads(f.read_bytes())
    finally:
        gc.enable()


HTA_SNIPPET = """
import sys, time
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
TraceAnalysis(trace_dir=sys.argv[1])
print(time.perf_counter() - t)
"""


def hta_time(py: str, directory: Path, repeat: int) -> float | None:
    runs = []
    for _ in range(repeat):
        res = subprocess.run([py, "-c", HTA_SNIPPET, str(directory)], capture_output=True,
                             text=True, check=False)
        if res.returncode:
            print("HTA failed:", res.stderr.strip().splitlines()[-1:], file=sys.stderr)
            return None
        runs.append(float(res.stdout.strip().splitlines()[-1]))
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-python", default=None, help="python with HTA installed")
    opts = ap.parse_args()
    from traceparse.kineto.ranks import read_dir

    files = sorted(TORCH.glob("param__dlrm_8rank__worker*.json"))
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp, "x1"), Path(tmp, f"x{opts.scale}")
        small.mkdir()
        big.mkdir()
        for f in files:
            (small / f.name).symlink_to(f)
            make_long(f, big / f.name, opts.scale)
        for label, d in (("8 DLRM ranks", small), (f"8 DLRM ranks x{opts.scale}", big)):
            mb = sum(f.stat().st_size for f in d.iterdir()) / 1e6
            tl = read_dir(d)
            ours = timed(lambda d=d: read_dir(d), opts.repeat)
            ours_1 = timed(lambda d=d: read_dir(d, workers=1), opts.repeat)
            bare = timed(lambda d=d: bare_orjson(d), opts.repeat)
            hta = hta_time(opts.hta_python, d, opts.repeat) if opts.hta_python else None
            print(f"| {label} | {mb:.1f} MB | {tl.gpu.height + tl.api.height + tl.ranges.height}"
                  f" rows | traceparse {ours:.2f} s | traceparse 1 worker {ours_1:.2f} s |"
                  f" bare orjson {bare:.2f} s | HTA "
                  f"{'n/a' if hta is None else f'{hta:.2f} s'} |")


if __name__ == "__main__":
    main()
