"""The batch-scaling prediction on the held-out H100 sweep (``sample_traces/h100_captures``).

The model (``analyses/scale.py``) and the profiler's per-op cost
(``analyses/profiler_cost.PER_EVENT_NS``) were developed on the H200 sweep in
``../shared/traces/gpu/sweep`` (``benchmarks/predict_sweep.py``). This script applies them
unchanged to captures from another GPU, including batch sizes the H200 sweep lacks
(gpt2s b16, gpt2m b2/b8/b32, decode b8): every ordered pair of eager configurations of one
model, and each onto itself. It writes its table into benchmarks/RESULTS.md between the
``predict_holdout`` markers.

Usage: PYTHONPATH=. python3 benchmarks/predict_holdout.py [--no-write]
"""

from __future__ import annotations

import datetime
import platform
import re
import statistics
import sys
from itertools import product
from pathlib import Path

import predict_sweep as ps

from traceparse import __version__

HOLDOUT = Path(__file__).resolve().parents[1] / "sample_traces" / "h100_captures" / "sweep"
START, END = "<!-- predict_holdout:start -->", "<!-- predict_holdout:end -->"


def families() -> dict[str, list[str]]:
    """Eager configurations by model, in batch order."""
    out: dict[str, list[str]] = {}
    for p in sorted(HOLDOUT.glob("*.truth.json")):
        name = p.name.removesuffix(".truth.json")
        if name.endswith("_graph"):
            continue
        model = name.rsplit("_b", 1)[0] if name.startswith("train") else "decode"
        out.setdefault(model, []).append(name)
    for names in out.values():
        names.sort(key=lambda n: int(re.search(r"_b(\d+)", n).group(1)))  # type: ignore[union-attr]
    return out


def main() -> None:
    ps.SWEEP = HOLDOUT
    write = "--no-write" not in sys.argv
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = ["## Held-out check: the same model on an H100 sweep (`PYTHONPATH=. python3 "
           "benchmarks/predict_holdout.py`, issue 27)\n",
           f"{now}; traceparse {__version__}; Python {platform.python_version()}; traces "
           "`sample_traces/h100_captures/sweep` (NVIDIA H100 80GB HBM3, torch 2.11, "
           "record_shapes on); nothing refitted: the shipped per-op profiler cost "
           f"({ps.profiler_cost.PER_EVENT_NS:,.0f} ns, solved on the H200 sweep) and the "
           "curves calibrated from each source trace.\n",
           "| traced + calibrated | predicted | F | predicted | truth | error |",
           "|---|---|---:|---:|---:|---:|"]
    errs: dict[str, list[float]] = {"self": [], "unseen": []}
    for names in families().values():
        cfgs = {n: ps.Config(n) for n in names}
        for a, b in product(names, names):
            src = cfgs[a]
            tgt_ns, tgt_batch = ps.truth(b)
            f = tgt_batch / src.batch
            p = src.predict(f)["predicted_step_ns"]
            errs["self" if a == b else "unseen"].append((p - tgt_ns) * 100 / tgt_ns)
            out.append(f"| {a} | {b} | {f:g} | {p / 1e6:.2f} ms | {tgt_ns / 1e6:.2f} ms | "
                       f"{ps.pct(p, tgt_ns)} |")
            print(a, b, f, p / 1e6, tgt_ns / 1e6, flush=True)
    for k, v in errs.items():
        goal = 10 if k == "self" else 15
        out.append(f"\n{k}: worst {max(v, key=abs):+.1f} %, median |error| "
                   f"{statistics.median(abs(x) for x in v):.1f} %, within {goal} %: "
                   f"{sum(abs(x) <= goal for x in v)}/{len(v)}")
    text = "\n".join(out) + "\n"
    print(text)
    if write:
        old = ps.RESULTS.read_text()
        block = f"{START}\n{text}{END}"
        new = (re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _m: block, old,
                      flags=re.S) if START in old else old.rstrip("\n") + "\n\n" + block + "\n")
        ps.RESULTS.write_text(new)


if __name__ == "__main__":
    main()
