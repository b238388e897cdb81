"""``traceparse batch`` at fleet scale: N generated Kineto ranks through the local process
pool or a local Dask cluster, with the peak memory of the client and of each worker.

Ranks are made by ``gen_kineto.synth`` (``--kernels`` each, rank ids 0..N-1) into
``--data`` (reused when present). Each configuration runs ``python3 -m traceparse batch
DIR -o OUT --executor E -j W`` as one process; every 50 ms the RSS of that process and of
each of its descendants is read from /proc, so the table gives the **client** peak (the
CLI process itself, which only receives one summary row per trace: timelines stay on the
workers, which write their own partitions) and the largest **worker** peak (a Dask
worker, nanny or pool process), plus the summed tree peak.

Usage::

    python3 benchmarks/bench_batch.py --data /work/scale/ranks --ranks 64 256 \\
        --kernels 2000 --executor dask local
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))


def make_ranks(data: Path, n: int, kernels: int) -> Path:
    """Directory with ``n`` synthetic rank files (created once)."""
    from gen_kineto import synth

    d = data / f"ranks{n}_k{kernels}"
    d.mkdir(parents=True, exist_ok=True)
    for r in range(n):
        f = d / f"rank{r}.json"
        if not f.exists():
            synth(f, kernels, rank=r, seed=r)
    return d


def _children(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = []
        try:  # children started by any thread (Dask's nannies start workers off-main)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            pass
        out += kids
        todo += kids
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def run(cmd: list[str]) -> dict[str, float]:
    """Wall s, client peak MiB, largest descendant peak MiB, summed tree peak MiB."""
    peaks: dict[int, int] = {}
    tree = [0]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            pids = [proc.pid, *_children(proc.pid)]
            now = {p: _rss(p) for p in pids}
            for p, v in now.items():
                peaks[p] = max(peaks.get(p, 0), v)
            tree[0] = max(tree[0], sum(now.values()))

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    stop.set()
    th.join()
    if proc.returncode not in (0, 2):
        raise RuntimeError(err.decode(errors="replace")[-800:])
    client = peaks.pop(proc.pid, 0)
    return {"wall_s": wall, "client_mib": client / 2**20,
            "worker_mib": max(peaks.values(), default=0) / 2**20, "tree_mib": tree[0] / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--kernels", type=int, default=2000)
    ap.add_argument("--executor", nargs="+", default=["dask", "local"])
    ap.add_argument("-j", "--workers", type=int, default=2)
    args = ap.parse_args()
    print("| ranks | input MB | executor | workers | wall s | client peak MiB "
          "| largest worker peak MiB | tree peak MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.ranks:
        d = make_ranks(args.data, n, args.kernels)
        size = sum(f.stat().st_size for f in d.iterdir()) / 1e6
        for ex in args.executor:
            with tempfile.TemporaryDirectory(prefix="tp-batch-") as out:
                r = run([sys.executable, "-m", "traceparse", "--no-cache", "batch", str(d),
                         "-o", out, "--executor", ex, "-j", str(args.workers)])
            print(f"| {n} | {size:.0f} | {ex} | {args.workers} | {r['wall_s']:.1f} | "
                  f"{r['client_mib']:.0f} | {r['worker_mib']:.0f} | {r['tree_mib']:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
