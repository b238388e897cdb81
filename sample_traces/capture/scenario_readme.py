#!/usr/bin/env python3
"""Write ``DEST/README.md`` for a directory of known-cause scenario captures (issue 19).

Everything in it comes from the sidecars ``scenarios.py`` wrote (``*.meta.json``): GPU,
driver, software versions, and per run the planted cause, files with sizes, what was skipped
and why, and the exact commands. ``scenarios.py`` calls :func:`write_readme` at the end of a
run; run this by hand after deleting or re-capturing files::

    python3 sample_traces/capture/scenario_readme.py sample_traces/gpu

Standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TOOL = "sample_traces/capture/scenarios.py"


def load_sidecars(dest: Path) -> list[dict[str, Any]]:
    """The scenario sidecars in ``dest``, in file-name order."""
    out = []
    for p in sorted(dest.glob("*.meta.json")):
        m = json.loads(p.read_text())
        if m.get("tool") == TOOL:
            out.append(m)
    return out


def _size(dest: Path, name: str) -> str:
    p = dest / name
    return f"{p.stat().st_size / 1e6:.2f} MB" if p.is_file() else "missing"


def render(dest: Path, metas: list[dict[str, Any]]) -> str:
    """The README text (deterministic for the same sidecars and files)."""
    if not metas:
        raise ValueError(f"{dest}: no {TOOL} sidecars (*.meta.json)")
    first = metas[0]
    gpu, sw = first.get("gpu"), first["software"]
    lines = ["# Known-cause scenario captures (issue 19)", "",
             f"Written by `{TOOL}` and `sample_traces/capture/scenario_readme.py` from the "
             "sidecars beside the traces; what each scenario plants and what traceparse must "
             "conclude is in `sample_traces/capture/planted.py`, the checks in "
             "`tests/test_capture_scenarios_gpu.py`.", ""]
    if gpu:
        lines += [f"* GPU: {gpu['name']} (compute capability {gpu['compute_capability']}, "
                  f"{gpu['sm_count']} SMs, {gpu['memory_bytes'] / 2**30:.0f} GiB), driver "
                  f"{gpu['driver']}, power limit {gpu['power_limit_w']}, max SM clock "
                  f"{gpu['max_sm_clock_mhz']}"]
    else:
        lines += ["* A CPU-only run: no GPU was involved, nothing here is diagnosable."]
    lines += [f"* Software: Python {sw['python']}, torch {sw['torch']}, CUDA {sw['cuda']}, "
              f"cuDNN {sw['cudnn']}, {sw['os']}",
              f"* Captured (UTC): {min(m['captured_utc'] for m in metas)} to "
              f"{max(m['captured_utc'] for m in metas)}", "",
              "| run | planted | diagnosable | files |", "|---|---|---|---|"]
    for m in metas:
        files = ", ".join(f"`{n}` ({_size(dest, n)})" for n in m["files"].values())
        cause = m["cause"] or "none (twin)"
        lines.append(f"| {m['scenario']}-{m['variant']} | {cause} | "
                     f"{'yes' if m['diagnosable'] else 'no'} | {files} |")
    lines += ["", "## Commands (from the repository root)", ""]
    for m in metas:
        lines += [f"* {m['scenario']}-{m['variant']}: `{m['command']}`"]
        lines += [f"  * `{c}`" for c in m.get("tool_commands", [])]
    skipped = [(m, s) for m in metas for s in m["skipped"]]
    if skipped:
        lines += ["", "## Not captured, and why", ""]
        lines += [f"* {m['scenario']}-{m['variant']}: {s['what']}: {s['reason']}"
                  for m, s in skipped]
    return "\n".join(lines) + "\n"


def write_readme(dest: Path) -> Path:
    """Write ``dest/README.md`` from the sidecars there; return its path."""
    out = dest / "README.md"
    out.write_text(render(dest, load_sidecars(dest)))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: scenario_readme.py DEST", file=sys.stderr)
        return 2
    try:
        print(f"wrote {write_readme(Path(args[0]))}")
    except (OSError, ValueError, KeyError) as exc:
        print(f"scenario_readme: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
