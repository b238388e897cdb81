"""Benchmark harness: wall time, peak RSS and throughput per stage, medians of N runs.

Every measured stage runs in its own subprocess; wall time is measured around it and peak
RSS is the child's ``ru_maxrss`` from ``os.wait4`` (so imports and start-up count, exactly
as a user running the command sees them). Results are printed as Markdown and, with
``--results``, written into benchmarks/RESULTS.md between this harness's own markers
(other sections of the file are kept).

Suites (``--suite``, repeatable; default all):

* ``nsys``: generated exports of 10k / 100k / 1M kernels (benchmarks/gen_nsys.py):
  ``traceparse --no-cache info`` (end-to-end ingest), the library ``nsys.read`` alone, a bare
  ADBC Arrow read of the same columns, ``info`` from the cache, each analysis command from
  the cache, and ``report``; log-log slope of ingest time vs kernels.
* ``kineto``: the 8 DLRM ranks made 20x longer (gen_kineto.py stretch):
  ``traceparse --no-cache info DIR`` vs HTA 0.5 ``TraceAnalysis(trace_dir=DIR)`` (both whole
  processes) vs a bare ``orjson.loads`` of the files; plus synthetic traces of 10k / 100k /
  300k kernels for the slope.
* ``ncu``: generated raw pages of 1k / 10k launches x ~280 metrics.

Usage::

    python3 benchmarks/run.py --data /tmp/perfdata --shared ../shared --repeat 3 \\
        --hta-python /path/to/venv-with-hta/bin/python --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BEGIN = "<!-- perf harness: begin (benchmarks/run.py) -->"
END = "<!-- perf harness: end -->"
NSYS_SIZES = (10_000, 100_000, 1_000_000)
KINETO_SIZES = (10_000, 100_000, 300_000)
NCU_SIZES = (1_000, 10_000)
ANALYSES = (("kernels", []), ("breakdown", []), ("gaps", []), ("summary", []),
            ("launches", []), ("comm", []), ("steps", []))


def tree_rss(pid: int) -> int:
    """Summed RSS in bytes of ``pid`` and all its descendants (Linux /proc), following the
    children of every thread (worker pools fork from helper threads)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError):
            pass
    return total


def measure_rss(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``cmd``; return (wall s, peak RSS MiB, stdout); raise on failure.

    Peak RSS is the larger of the child's ``ru_maxrss`` (``os.wait4``: the largest single
    process of the tree) and the summed RSS of the process tree sampled every 20 ms (worker
    pools run several processes at once).
    """
    import threading

    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"tp-bench-{os.getpid()}.out"
    peak = [0]
    with open(out_path, "wb") as fh:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.PIPE, cwd=REPO, env=env)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                peak[0] = max(peak[0], tree_rss(proc.pid))

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        stop.set()
        th.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    text = out_path.read_text(errors="replace")
    out_path.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-800:]}")
    return wall, max(ru.ru_maxrss * 1024, peak[0]) / 2**20, text


def median_run(cmd: list[str], repeat: int, env: dict[str, str] | None = None
               ) -> dict[str, Any]:
    walls, rss, out = [], [], ""
    for _ in range(repeat):
        w, r, out = measure_rss(cmd, env)
        walls.append(w)
        rss.append(r)
    return {"wall": statistics.median(walls), "rss": max(rss), "out": out,
            "walls": walls}


def tp(*args: str) -> list[str]:
    return [sys.executable, "-m", "traceparse", *args]


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


LIB_NSYS = ("import sys, time; t=time.perf_counter(); from traceparse import nsys; "
            "tl=nsys.read(sys.argv[1]); print(time.perf_counter()-t, tl.kernels.height)")
BARE_NSYS = ("import sys, time; sys.path.insert(0, 'benchmarks'); "
             "from bench_nsys_ingest import _bare; t=time.perf_counter(); n=_bare("
             "__import__('pathlib').Path(sys.argv[1])); print(time.perf_counter()-t, n)")
BARE_JSON = ("import sys, time, orjson, pathlib; t=time.perf_counter(); "
             "n=sum(len(orjson.loads(p.read_bytes())['traceEvents']) for p in "
             "sorted(pathlib.Path(sys.argv[1]).glob('*.json'))); "
             "print(time.perf_counter()-t, n)")
READ_DIR = ("import sys; from traceparse import kineto; "
            "print(kineto.read_dir(sys.argv[1], workers=int(sys.argv[2])).gpu.height)")
HTA = ("import sys, time, logging; logging.disable(logging.WARNING); "
       "from hta.trace_analysis import TraceAnalysis; "
       "a=TraceAnalysis(trace_dir=sys.argv[1]); "
       "print(sum(len(t) for t in a.t.traces.values()))")


def env_with_cache(cache: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TRACEPARSE_CACHE_DIR=str(cache),
               TRACEPARSE_PROGRESS="0")
    return env


def ensure_nsys(data: Path, n: int) -> Path:
    p = data / f"nsys_{n}.sqlite"
    if not p.exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks/gen_nsys.py"), str(p),
                        "--kernels", str(n)], check=True)
    return p


def ensure_kineto(data: Path, n: int) -> Path:
    p = data / f"kineto_{n}.json"
    if not p.exists():
        subprocess.run([sys.executable, str(REPO / "benchmarks/gen_kineto.py"), "synth",
                        str(p), "--kernels", str(n)], check=True)
    return p


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) vs log(size)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
            / sum((x - mx) ** 2 for x in xs))


def suite_nsys(data: Path, repeat: int, lines: list[str], sizes: tuple[int, ...]) -> None:
    cache = data / "cache"
    env = env_with_cache(cache)
    lines += ["### nsys SQLite (generated, benchmarks/gen_nsys.py)", "",
              "| kernels | file MB | stage | median s | peak RSS MiB | kernels/s |",
              "|---:|---:|---|---:|---:|---:|"]
    ingest_pts = []
    for n in sizes:
        path = ensure_nsys(data, n)
        mb = path.stat().st_size / 1e6

        def row(stage: str, r: dict[str, Any], n: int = n, mb: float = mb) -> None:
            lines.append(f"| {n:,} | {mb:.0f} | {stage} | {r['wall']:.2f} | {r['rss']:.0f} | "
                         f"{n / r['wall']:,.0f} |")

        e2e = median_run(tp("--no-cache", "info", str(path)), repeat, env)
        row("`traceparse --no-cache info` (process)", e2e)
        ingest_pts.append((n, e2e["wall"]))
        lib = median_run(py(LIB_NSYS, str(path)), repeat, env)
        lib_s = float(lib["out"].split()[0])
        bare = median_run(py(BARE_NSYS, str(path)), repeat, env)
        bare_s = float(bare["out"].split()[0])
        lines.append(f"| {n:,} | {mb:.0f} | `nsys.read` in-process (import excluded) | "
                     f"{lib_s:.2f} | {lib['rss']:.0f} | {n / lib_s:,.0f} |")
        lines.append(f"| {n:,} | {mb:.0f} | bare ADBC Arrow read, same columns | {bare_s:.2f} |"
                     f" {bare['rss']:.0f} | {n / bare_s:,.0f} |")
        lines.append(f"| {n:,} | {mb:.0f} | ratio nsys.read / bare read | "
                     f"{lib_s / bare_s:.2f}x | | |")
        subprocess.run(tp("info", str(path)), env=env, cwd=REPO, check=True,
                       capture_output=True)  # warm the cache
        row("`traceparse info` from the cache", median_run(tp("info", str(path)), repeat, env))
        for name, extra in ANALYSES:
            try:
                row(f"`{name}` (cache warm)",
                    median_run(tp(name, str(path), *extra), repeat, env))
            except RuntimeError as exc:
                lines.append(f"| {n:,} | {mb:.0f} | `{name}` | failed: "
                             f"{str(exc).splitlines()[-1][:80]} | | |")
        out = data / f"report_{n}.html"
        try:
            row("`report` (cache warm)", median_run(
                tp("report", str(path), "-o", str(out), "--force"), repeat, env))
        except RuntimeError as exc:
            lines.append(f"| {n:,} | {mb:.0f} | `report` | failed: "
                         f"{str(exc).splitlines()[-1][:80]} | | |")
    if len(ingest_pts) > 1:
        lines += ["", f"log-log slope of end-to-end ingest time vs kernels "
                      f"({sizes[0]:,}..{sizes[-1]:,}): **{slope(ingest_pts):.3f}**"]
    lines.append("")


def suite_kineto(data: Path, shared: Path, repeat: int, lines: list[str],
                 hta_python: str | None, sizes: tuple[int, ...]) -> None:
    cache = data / "cache"
    env = env_with_cache(cache)
    d = data / "dlrm20"
    if not d.exists():
        files = sorted((shared / "traces/torch").glob("param__dlrm_8rank__worker*.json"))
        subprocess.run([sys.executable, str(REPO / "benchmarks/gen_kineto.py"), "stretch",
                        str(d), *map(str, files), "--factor", "20"], check=True)
    mb = sum(f.stat().st_size for f in d.glob("*.json")) / 1e6
    lines += ["### Kineto JSON: 8 DLRM ranks x 20 (gen_kineto.py stretch)", "",
              f"Input: {mb:.0f} MB uncompressed JSON in 8 files.", "",
              "| stage | median s | peak RSS MiB | runs (s) |", "|---|---:|---:|---|"]

    def row(stage: str, r: dict[str, Any]) -> None:
        runs = ", ".join(f"{w:.2f}" for w in r["walls"])
        lines.append(f"| {stage} | {r['wall']:.2f} | {r['rss']:.0f} | {runs} |")

    tp_r = median_run(tp("--no-cache", "info", str(d)), repeat, env)
    row("`traceparse --no-cache info DIR` (process, start-up included)", tp_r)
    bare = median_run(py(BARE_JSON, str(d)), repeat, env)
    bare_s = float(bare["out"].split()[0])
    row("bare `orjson.loads` of the 8 files, one process (decode only)", bare)
    lines.append(f"| ... of which decode time | {bare_s:.2f} | | |")
    for w in (1, 2):
        r = median_run(py(READ_DIR, str(d), str(w)), repeat, env)
        row(f"`kineto.read_dir(DIR, workers={w})` (process)", r)
    hta_s = None
    if hta_python:
        hta = median_run([hta_python, "-c", HTA, str(d)], repeat, env)
        row("HTA 0.5 `TraceAnalysis(trace_dir=DIR)` (process)", hta)
        hta_s = hta["wall"]
    subprocess.run(tp("info", str(d)), env=env, cwd=REPO, check=True, capture_output=True)
    row("`traceparse info DIR` from the cache", median_run(tp("info", str(d)), repeat, env))
    lines.append("")
    if hta_s:
        lines.append(f"Speed-up over HTA (same run): **{hta_s / tp_r['wall']:.1f}x**. ")
    lines.append(f"traceparse / bare decode: **{tp_r['wall'] / bare['wall']:.2f}x** "
                 f"(process vs process); peak RSS / input: **{tp_r['rss'] * 1.048576 / mb:.2f}x**.")
    lines += ["", "#### Synthetic Kineto traces (gen_kineto.py synth)", "",
              "| kernels | file MB | stage | median s | peak RSS MiB | kernels/s |",
              "|---:|---:|---|---:|---:|---:|"]
    pts = []
    for n in sizes:
        p = ensure_kineto(data, n)
        fmb = p.stat().st_size / 1e6
        r = median_run(tp("--no-cache", "info", str(p)), repeat, env)
        pts.append((n, r["wall"]))
        lines.append(f"| {n:,} | {fmb:.0f} | `traceparse --no-cache info` | {r['wall']:.2f} | "
                     f"{r['rss']:.0f} | {n / r['wall']:,.0f} |")
    if len(pts) > 1:
        lines += ["", f"log-log slope ({sizes[0]:,}..{sizes[-1]:,} kernels): "
                      f"**{slope(pts):.3f}**"]
    lines.append("")


def suite_ncu(data: Path, repeat: int, lines: list[str]) -> None:
    env = env_with_cache(data / "cache")
    lines += ["### ncu raw CSV (gen_ncu.py, ~280 metric columns)", "",
              "| launches | file MB | median s | peak RSS MiB | launches/s |",
              "|---:|---:|---:|---:|---:|"]
    for n in NCU_SIZES:
        p = data / f"ncu_{n}.csv"
        if not p.exists():
            subprocess.run([sys.executable, str(REPO / "benchmarks/gen_ncu.py"), str(p),
                            "--launches", str(n)], check=True)
        r = median_run(tp("--no-cache", "info", str(p)), repeat, env)
        lines.append(f"| {n:,} | {p.stat().st_size / 1e6:.0f} | {r['wall']:.2f} | "
                     f"{r['rss']:.0f} | {n / r['wall']:,.0f} |")
    lines.append("")


def write_results(path: Path, body: str) -> None:
    text = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{body}\n{END}\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="scratch dir for inputs/cache")
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--suite", action="append", choices=["nsys", "kineto", "ncu"])
    ap.add_argument("--nsys-sizes", default=",".join(map(str, NSYS_SIZES)))
    ap.add_argument("--kineto-sizes", default=",".join(map(str, KINETO_SIZES)))
    ap.add_argument("--hta-python", default=None, help="a python with HolisticTraceAnalysis")
    ap.add_argument("--results", type=Path, default=None, help="RESULTS.md to update")
    a = ap.parse_args()
    a.data.mkdir(parents=True, exist_ok=True)
    suites = a.suite or ["nsys", "kineto", "ncu"]
    load = os.getloadavg()
    lines = [f"## Performance harness (`benchmarks/run.py`, suites: {', '.join(suites)})", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; {datetime.date.today().isoformat()}; medians of "
             f"{a.repeat} runs, each stage a fresh subprocess (wall time includes interpreter "
             f"start-up and imports; peak RSS = max of the child's ru_maxrss and the sampled "
             f"summed RSS of its process tree). Load average at start "
             f"{load[0]:.1f} (the machine is shared: absolute times are noisy).", ""]
    if "nsys" in suites:
        suite_nsys(a.data, a.repeat, lines, tuple(int(x) for x in a.nsys_sizes.split(",")))
    if "kineto" in suites:
        suite_kineto(a.data, a.shared, a.repeat, lines, a.hta_python,
                     tuple(int(x) for x in a.kineto_sizes.split(",")))
    if "ncu" in suites:
        suite_ncu(a.data, a.repeat, lines)
    body = "\n".join(lines)
    print(body)
    if a.results:
        write_results(a.results, body)


if __name__ == "__main__":
    main()
