"""Long fuzz run of the three readers (minutes): the CI fuzz tests with many more examples
and random (not derandomized) seeds.

Each target runs the same properties as tests/test_fuzz_*.py: the reader returns a valid
Timeline or raises TraceError. Crashes are printed with the failing example and counted.

Usage::

    python3 benchmarks/fuzz_long.py [--seconds 300] [--examples 100000]

The time budget is split evenly over the targets; each runs until its share is spent.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import test_fuzz_kineto as fk  # noqa: E402
import test_fuzz_ncu as fc  # noqa: E402
import test_fuzz_nsys as fn  # noqa: E402
from hypothesis import HealthCheck, Phase, Verbosity, settings  # noqa: E402

TARGETS = [
    ("nsys bytes", fn.test_mutated_bytes), ("nsys cells", fn.test_random_cell_values),
    ("kineto json bytes", fk.test_mutated_json_bytes),
    ("kineto gzip bytes", fk.test_mutated_gzip_bytes),
    ("kineto events", fk.test_structured_events),
    ("ncu raw bytes", fc.test_mutated_raw_page),
    ("ncu details bytes", fc.test_mutated_details_page),
    ("ncu cells", fc.test_random_cells),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--examples", type=int, default=100_000, help="cap per target")
    ap.add_argument("--only", default="", help="run only targets whose name contains this")
    args = ap.parse_args()
    targets = [t for t in TARGETS if args.only in t[0]]
    share = args.seconds / len(targets)
    total = crashes = 0
    for name, test in targets:
        inner = test.hypothesis.inner_test  # type: ignore[attr-defined]
        count = [0]

        def counted(*a, _inner=inner, _count=count, **k):  # type: ignore[no-untyped-def]
            _count[0] += 1
            return _inner(*a, **k)

        test.hypothesis.inner_test = counted  # type: ignore[attr-defined]
        # run in slices of 200 examples until the share of time is spent
        t0 = time.perf_counter()
        status = "ok"
        while time.perf_counter() - t0 < share and count[0] < args.examples:
            # replace the CI settings (derandomized, ~100 examples) for this run
            test._hypothesis_internal_use_settings = settings(  # type: ignore[attr-defined]
                max_examples=200, deadline=None, derandomize=False, database=None,
                suppress_health_check=list(HealthCheck), phases=[Phase.generate],
                verbosity=Verbosity.quiet)
            try:
                test()
            except Exception as exc:  # a crash: report and move to the next target
                crashes += 1
                status = "CRASH"
                tb = traceback.extract_tb(exc.__traceback__)[-1]
                print(f"  {type(exc).__name__}: {str(exc)[:300]} at {tb.filename}:{tb.lineno}",
                      flush=True)
                break
        test.hypothesis.inner_test = inner  # type: ignore[attr-defined]
        total += count[0]
        print(f"{name:20s} {count[0]:7d} examples {time.perf_counter() - t0:6.1f} s  {status}",
              flush=True)
    print(f"total {total} examples, {crashes} crashing targets")


if __name__ == "__main__":
    main()
