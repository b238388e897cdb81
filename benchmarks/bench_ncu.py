"""Time traceparse.ncu.reader.read on the largest shared ncu CSVs (median of 5 runs)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from traceparse.ncu import reader as ncu

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/ncu")
for name in ("leleucas__dropout_nsight162.csv", "panjd-cutlass__report80.details.csv",
             "fuzigrad__output.raw.csv", "rsmall__rmsnorm.raw.csv"):
    p = ROOT / name
    times = []
    for _ in range(5):
        t = time.perf_counter()
        tl = ncu.read(p)
        times.append(time.perf_counter() - t)
    mb = p.stat().st_size / 1e6
    print(f"| {name} | {mb:.2f} MB | {tl.ncu.height} launches | "
          f"{statistics.median(times) * 1000:.0f} ms |")
