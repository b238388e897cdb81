"""Per-stage CPU of ``kineto.read`` on one trace file (issue 28, Kineto ingest).

Wraps the stages :func:`traceparse.kineto.reader.parse` calls (decoding, the frames,
time columns, linking, nesting, validation) with ``time.process_time`` counters, reads
the file ``--repeat`` times in one process (the cyclic GC paused, as ``read`` does) and
prints each stage's best-of-N milliseconds beside the best whole ``read``. The stage
sums include nested stages (``ranges_frame`` calls ``_json``); "rest" is the whole minus
the top-level stages.

Usage::

    PYTHONPATH=. python3 benchmarks/kineto_stages.py TRACE.json [--repeat 9]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

#: (module, function, top level?) of the stages timed.
STAGES = (
    ("traceparse.kineto.reader", "read_bytes", True),
    ("traceparse.kineto.reader", "decode_events", True),
    ("traceparse.kineto.reader", "_bucket", True),
    ("traceparse.kineto.reader", "decode_args", True),
    ("traceparse.kineto.times", "time_column", False),
    ("traceparse.kineto.times", "to_ns", False),
    ("traceparse.kineto.reader", "gpu_frame", True),
    ("traceparse.kineto.reader", "api_frame", True),
    ("traceparse.kineto.reader", "ranges_frame", True),
    ("traceparse.kineto.events", "_json", False),
    ("traceparse.kineto.events", "_int", False),
    ("traceparse.kineto.reader", "_comm_ops", True),
    ("traceparse.kineto.reader", "join_ids", True),
    ("traceparse.kineto.reader", "link_gpu", True),
    ("traceparse.kineto.reader", "attach_collectives", True),
    ("traceparse.kineto.reader", "link_stats", True),
    ("traceparse.kineto.reader", "by_launcher", True),
    ("traceparse.kineto.reader", "nesting_depth", True),
    ("traceparse.kineto.reader", "_memory", True),
    ("traceparse.kineto.reader", "ingest_frame", True),
    ("traceparse.schema", "conform", True),
    ("traceparse.timeline.Timeline", "validate", True),
)


def _wrap(fn: Callable[..., Any], name: str, acc: dict[str, float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[name] += time.process_time() - t
    return timed


def main() -> int:
    import importlib

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    from traceparse.kineto import reader

    acc: dict[str, float] = defaultdict(float)
    for mod, fn, _top in STAGES:
        owner: Any
        if mod.endswith(".Timeline"):
            owner = importlib.import_module(mod.rsplit(".", 1)[0]).Timeline
        else:
            owner = importlib.import_module(mod)
        setattr(owner, fn, _wrap(getattr(owner, fn), fn, acc))
    best: dict[str, float] = {}
    whole = []
    for _ in range(a.repeat):
        acc.clear()
        gc.collect()
        t = time.process_time()
        tl = reader.read(a.trace)
        del tl  # freeing the timeline is part of the cost a reader leaves behind
        whole.append(time.process_time() - t)
        for k, v in acc.items():
            best[k] = min(best.get(k, v), v)
    top = sum(best.get(fn, 0.0) for _m, fn, t in STAGES if t)
    print(f"read (whole, best of {a.repeat}): {min(whole) * 1e3:.1f} ms; "
          f"median {sorted(whole)[len(whole) // 2] * 1e3:.1f} ms")
    for _m, fn, t in STAGES:
        print(f"  {'' if t else '  '}{fn:20s} {best.get(fn, 0.0) * 1e3:7.1f} ms")
    print(f"  rest (whole - top-level stages) {(min(whole) - top) * 1e3:7.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
