"""Issue 28: where `summary`'s resident memory goes, section by section.

Parses one trace without the cache (as ``traceparse --no-cache summary``, with the CLI's
mmap threshold), then computes the sections of
:data:`traceparse.analyses.summary.SECTIONS` in summary order and the verdict, each
reusing what the earlier ones kept on the timeline. A thread samples the resident set
(``/proc/self/statm``, Linux) every 5 ms; per stage it prints the seconds, the RSS at its
start and end, its peak and the rise of the peak over the start, and the
``estimated_size`` of each value the stage left on the timeline (values sharing the gpu
frame's buffers count them again). Polars' memory is not seen by ``tracemalloc``, hence
the sampling.

Usage: ``python3 benchmarks/summary_memory.py TRACE``
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")
_peak = [0.0]
_stop = threading.Event()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def _sample() -> None:
    while not _stop.is_set():
        _peak[0] = max(_peak[0], _rss_mib())
        time.sleep(0.005)


def _size_mib(value: Any) -> float:
    import numpy as np
    import polars as pl

    if isinstance(value, (pl.DataFrame, pl.Series)):
        return value.estimated_size() / 2**20
    if isinstance(value, np.ndarray):
        return value.nbytes / 2**20
    if isinstance(value, dict):
        return sum(_size_mib(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_size_mib(v) for v in value)
    if hasattr(value, "__dict__"):
        return sum(_size_mib(v) for v in vars(value).values())
    return 0.0


def _stage(name: str, fn: Callable[[], Any]) -> Any:
    start = _rss_mib()
    _peak[0] = start
    t0 = time.perf_counter()
    value = fn()
    end = _rss_mib()
    peak = max(_peak[0], end)
    print(f"{name:18s} {time.perf_counter() - t0:7.1f} s  start {start:7.0f}  end {end:7.0f}"
          f"  peak {peak:7.0f} (+{peak - start:.0f}) MiB", flush=True)
    return value


def main(path: str) -> None:
    from traceparse.analyses import summary as s
    from traceparse.cli.main import keep_mmap_threshold
    from traceparse.loader import load

    keep_mmap_threshold()
    threading.Thread(target=_sample, daemon=True).start()
    tl = _stage("parse", lambda: load(path, cache=None))
    for t in ("gpu", "api", "ranges"):
        frame = getattr(tl, t)
        print(f"  table {t}: {frame.height} rows, {frame.width} columns, "
              f"{frame.estimated_size() / 2**20:.0f} MiB")
    opts = s.SummaryOptions(top=10, min_gap_ns=s.DEFAULT_MIN_NS, gaps=None)
    seen: set[str] = set()

    def kept() -> None:
        for key, (_deps, value) in tl.__dict__.get("_derived", {}).items():
            if key not in seen and not key.startswith("summary:"):
                seen.add(key)
                print(f"    kept {key}: {_size_mib(value):.0f} MiB")

    for name, fn in s.SECTIONS.items():
        _stage(name, lambda name=name, fn=fn: s._section(tl, name, fn, opts))
        kept()
    _stage("verdict (rest)", lambda: s.summarize(tl))
    kept()
    _stop.set()
    print(f"max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
