"""Old vs new Kineto ingest: every table of every real Kineto trace must stay equal.

Two steps, so two checkouts can be compared without importing both into one process:

* ``dump OUT [--dir D ...]``: with the ``traceparse`` on ``PYTHONPATH`` (or installed), read
  every ``*.json``/``*.json.gz`` under ``../shared/traces/torch`` and ``../shared/traces/gpu``
  (``kineto.read``) and each ``--dir`` with ``read_dir`` at 1 and 2 workers (the helper
  hand-off); pickle each timeline's tables and ``meta``, or the one-line error, into OUT.
* ``compare A B``: every table equal (``assert_frame_equal(check_exact=True)``), ``meta``
  equal, errors equal; prints the differences and exits 1 on any.

Usage (issue 28, fourth round)::

    PYTHONPATH=BEFORE_CHECKOUT python3 benchmarks/kineto_frames.py dump /tmp/old --dir DLRM20
    PYTHONPATH=. python3 benchmarks/kineto_frames.py dump /tmp/new --dir DLRM20
    python3 benchmarks/kineto_frames.py compare /tmp/old /tmp/new
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"
TABLES = ("gpu", "api", "ranges", "memory", "devices", "ingest", "sources", "metrics")


def dump(out: Path, dirs: list[str]) -> int:
    from traceparse.errors import TraceError
    from traceparse.kineto import ranks, reader

    out.mkdir(parents=True, exist_ok=True)
    files = sorted(p for d in ("torch", "gpu") for p in (SHARED / d).rglob("*")
                   if p.name.endswith((".json", ".json.gz")))
    jobs: list[tuple[str, Callable[[], Any]]] = [
        (str(p.relative_to(SHARED)), lambda p=p: reader.read(p)) for p in files]
    for d in dirs:
        jobs += [(f"{Path(d).name} read_dir workers={w}",
                  lambda d=d, w=w: ranks.read_dir(d, workers=w)) for w in (1, 2)]
    for i, (name, fn) in enumerate(jobs):
        try:
            tl = fn()
            rec: dict[str, Any] = {"tables": {t: tl.table(t) for t in TABLES},
                                   "meta": tl.meta}
        except TraceError as exc:
            rec = {"error": str(exc)}
        with open(out / f"{i:04d}.pickle", "wb") as fh:
            pickle.dump((name, rec), fh)
    print(f"{len(jobs)} traces written to {out}")
    return 0


def compare(a: Path, b: Path) -> int:
    from polars.testing import assert_frame_equal

    n = bad = 0
    for fa in sorted(a.glob("*.pickle")):
        with open(fa, "rb") as fh:
            name, ra = pickle.load(fh)
        with open(b / fa.name, "rb") as fh:
            name_b, rb = pickle.load(fh)
        n += 1
        try:
            assert name == name_b, (name, name_b)
            assert ra.keys() == rb.keys(), "one read failed, the other did not"
            if "error" in ra:
                assert ra["error"] == rb["error"], (ra["error"], rb["error"])
                continue
            for t in TABLES:
                assert_frame_equal(ra["tables"][t], rb["tables"][t], check_exact=True)
            assert ra["meta"] == rb["meta"], "meta differs"
        except AssertionError as exc:
            bad += 1
            print(f"DIFF {name}: {str(exc)[:400]}")
    print(f"{n} traces compared, {bad} differ")
    return 1 if bad or not n else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--dir", action="append", default=[], help="a directory of rank files")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    return dump(args.out, args.dir) if args.cmd == "dump" else compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
