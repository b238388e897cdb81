"""Issue-16 harness: traceparse against the tools users already have, on the two scale
workloads of ``../shared/tools/scale`` (README there), whole process against whole process.

Rows (each a separate process, run under ``/usr/bin/time -v``):

* Kineto, 8-rank DLRM x20 directory: ``traceparse --no-cache info DIR``; HTA 0.5
  ``TraceAnalysis(trace_dir=DIR)`` (its own venv, ``--hta-python``); a bare ``orjson.loads``
  of every file in one process (the decode floor).
* nsys x170 (``--nsys170-file``, issue 28), 10.3M kernels: ``--no-cache`` ``kernels``,
  ``summary``, ``report``, ``gaps`` (and ``fixes`` where the CLI has it), the bare Arrow
  read and ``nsys stats`` (when given), ``--repeat170`` runs each (default 1). Every row
  prints its time ratio to the reference row of its workload (HTA, the bare read) and its
  goal.
* both nsys exports: ``kernels`` and ``breakdown --gpu-only`` on the ``memory``, ``chunks``
  and ``dask`` executors, ``gaps`` and the full ``breakdown`` in chunks (issue 28;
  :func:`executor_rows`).
* nsys, 1.03M-kernel export: ``traceparse --no-cache kernels``; ``nsys stats -r
  cuda_gpu_kern_sum`` on a fresh copy (nsys alters its input; the copy is made before the
  timer starts; ``--nsys`` or ``$NSYS``); the bare Arrow read (``bare_nsys_read.py``);
  ``traceparse --no-cache summary``; ``summary`` and ``report`` from a cached timeline
  whose analysis set is dropped before each run (the analyses computed), and from a cached
  timeline with its analysis set (``traceparse/derived_store.py``; warmed by one untimed
  run of the same command before each timed one).

Every row runs ``--repeat`` times (default 3), **interleaved**: each round runs every
command once, the order rotating by one per round, so load from other users falls on all
rows alike; the table gives medians and every run. Peak RSS is ``Maximum resident set
size`` of ``/usr/bin/time -v`` (the largest single process of the tree: the command and
the helpers it waited for) and the summed RSS of the whole process tree sampled every
20 ms (parallel rank parsing runs several processes at once); the CPU seconds (user +
system, from the same ``time -v``) are the figure that compares on a shared machine, where
wall time follows the other users' load. Load averages before and
after are written with the table, which goes into benchmarks/RESULTS.md between this
harness's own markers (``--results``).

Usage::

    python3 benchmarks/scale.py --kineto /work/scale/dlrm20 --nsys-file /work/scale/ngp17.sqlite \\
        --hta-python /work/venv-hta/bin/python --nsys "$NSYS" --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from run import tree_rss  # benchmarks/run.py: the same process-tree RSS sampler

from traceparse.cache import Cache

REPO = Path(__file__).resolve().parent.parent
SCALE_TOOLS = REPO.parent / "shared" / "tools" / "scale"
BEGIN = "<!-- scale harness: begin (benchmarks/scale.py) -->"
END = "<!-- scale harness: end -->"
HTA = ("import sys; from hta.trace_analysis import TraceAnalysis; "
       "TraceAnalysis(trace_dir=sys.argv[1])")
ORJSON = ("import sys, pathlib, orjson\n"
          "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json')): orjson.loads(p.read_bytes())")


def run_once(cmd: list[str], env: dict[str, str],
             cwd: Path = REPO) -> tuple[float, float, float, float]:
    """(wall s, max RSS MiB of one process per time -v, peak summed tree RSS MiB, CPU s:
    user + system of the command and the children it waited for). CPU time is the figure
    that compares across runs on a shared machine: wall time follows the other users'
    load."""
    with tempfile.NamedTemporaryFile("w+", suffix=".time") as tf:
        full = ["/usr/bin/time", "-v", "-o", tf.name, *cmd]
        peak = [0]
        t = time.perf_counter()
        proc = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                cwd=cwd, env=env)
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.02):
                peak[0] = max(peak[0], tree_rss(proc.pid))

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        _, err = proc.communicate()
        wall = time.perf_counter() - t
        stop.set()
        th.join()
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                               f"{err.decode(errors='replace')[-600:]}")
        text = Path(tf.name).read_text()
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    maxrss = int(m[1]) / 1024 if m else float("nan")
    cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", text))
    return wall, maxrss, peak[0] / 2**20, cpu


def rows(args: argparse.Namespace, tmp: Path) -> list[tuple[str, str, list[str], object]]:
    """(workload, label, command, setup callable or None) for every row that can run."""
    py = sys.executable
    tp = [py, "-m", "traceparse"]
    out: list[tuple[str, str, list[str], object]] = []
    k = str(args.kineto)
    out.append(("kineto", "traceparse --no-cache info", [*tp, "--no-cache", "info", k], None))
    if args.hta_python:
        out.append(("kineto", "HTA 0.5 TraceAnalysis", [args.hta_python, "-c", HTA, k], None))
    out.append(("kineto", "bare orjson.loads (1 process)", [py, "-c", ORJSON, k], None))
    n = str(args.nsys_file)
    copy = tmp / "copy.sqlite"

    def fresh_copy() -> None:
        # nsys stats skips (exit 0, ~0.05 s) when its output file exists: remove it too
        for stale in [*tmp.glob("copy.sqlite*"), *tmp.glob("out_*")]:
            stale.unlink()
        shutil.copyfile(n, copy)

    out.append(("nsys", "traceparse --no-cache kernels", [*tp, "--no-cache", "kernels", n], None))
    if args.nsys:
        out.append(("nsys", "nsys stats -r cuda_gpu_kern_sum",
                    [args.nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv",
                     "--force-export", "false", "--output", str(tmp / "out"), str(copy)],
                    fresh_copy))
    out.append(("nsys", "bare Arrow read (bare_nsys_read.py)",
                [py, str(SCALE_TOOLS / "bare_nsys_read.py"), n], None))
    out.append(("nsys", "traceparse --no-cache summary", [*tp, "--no-cache", "summary", n], None))
    derived = Cache(tmp / "cache").entry(args.nsys_file) / "derived"

    def cold_analyses() -> None:  # the timeline stays cached; its analysis set is dropped
        shutil.rmtree(derived, ignore_errors=True)

    summary = [*tp, "summary", n]
    report = [*tp, "report", n, "-o", str(tmp / "r.html"), "--force"]
    env = dict(os.environ, TRACEPARSE_CACHE_DIR=str(tmp / "cache"))

    def warm(cmd: list[str]) -> object:  # run once untimed, so the analysis set is stored
        return lambda: subprocess.run(cmd, cwd=REPO, env=env, check=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    out.append(("nsys", "traceparse summary (cached timeline, analyses computed)", summary,
                cold_analyses))
    out.append(("nsys", "traceparse report (cached timeline, analyses computed)", report,
                cold_analyses))
    out.append(("nsys", "traceparse summary (cached timeline and analysis set)", summary,
                warm(summary)))
    out.append(("nsys", "traceparse report (cached timeline and analysis set)", report,
                warm(report)))
    out += executor_rows("nsys", n, tp)
    if args.nsys170_file:
        out += rows170(args, tmp, tp)
        out += executor_rows("nsys170", str(args.nsys170_file), tp)
    return out


#: Rows of the chunked executors (issue 28): the same output as the memory executor.
EXECUTOR_ROWS = (
    ("kernels", "--executor chunks"), ("kernels", "--executor dask --workers 4"),
    ("breakdown --gpu-only", ""), ("breakdown --gpu-only", "--executor chunks"),
    ("breakdown --gpu-only", "--executor dask --workers 4"),
    ("gaps", "--executor chunks --chunk-rows 65536"),
    ("breakdown", ""), ("breakdown", "--executor chunks"))


def executor_rows(workload: str, n: str, tp: list[str]
                  ) -> list[tuple[str, str, list[str], object]]:
    """``kernels``, ``breakdown --gpu-only``, ``gaps`` and ``breakdown`` on the ``memory``
    (default), ``chunks`` and
    ``dask`` executors (the dask rows start a local cluster of 4 worker processes, one
    thread each, on whatever cores the machine has; the tree RSS column sums client and
    workers, ``benchmarks/dask_peaks.py`` gives each process's peak)."""
    out: list[tuple[str, str, list[str], object]] = []
    for cmd, opts in EXECUTOR_ROWS:
        label = " ".join(f"traceparse --no-cache {cmd} {opts}".split())
        out.append((workload, label, [*tp, "--no-cache", *cmd.split(), n, *opts.split()],
                    None))
    return out


#: (workload, label) -> (reference row label in the same workload, goal) for the table.
GOALS = {
    ("kineto", "traceparse --no-cache info"): ("HTA 0.5 TraceAnalysis", ">= 10x faster than HTA"),
    ("nsys", "traceparse --no-cache kernels"): ("bare Arrow read (bare_nsys_read.py)",
                                                "faster than nsys stats, <= 1.5x bare read"),
    ("nsys", "traceparse --no-cache summary"): ("bare Arrow read (bare_nsys_read.py)",
                                                "<= 2.5x bare read, peak <= 2x file"),
    ("nsys170", "traceparse --no-cache kernels"): ("bare Arrow read (bare_nsys_read.py)",
                                                   "keep (faster than nsys stats)"),
    ("nsys170", "traceparse --no-cache summary"): ("bare Arrow read (bare_nsys_read.py)",
                                                   "<= 30 s, peak <= 2x file"),
    ("nsys170", "traceparse --no-cache report"): ("bare Arrow read (bare_nsys_read.py)",
                                                  "<= 30 s, peak <= 2x file"),
    ("nsys170", "traceparse --no-cache gaps"): ("bare Arrow read (bare_nsys_read.py)",
                                                "<= 30 s, peak <= 2x file"),
    ("nsys170", "traceparse --no-cache fixes"): ("bare Arrow read (bare_nsys_read.py)",
                                                 "<= 30 s, peak <= 2x file"),
    **{(w, f"traceparse --no-cache {c} {o}".strip()): (
        "bare Arrow read (bare_nsys_read.py)", "peak <= 2x file, output = memory executor's")
       for w in ("nsys", "nsys170") for c, o in EXECUTOR_ROWS if o},
}


def rows170(args: argparse.Namespace, tmp: Path, tp: list[str]
            ) -> list[tuple[str, str, list[str], object]]:
    """The x170 export (scale_nsys.py ... 170, 10.3M kernels): whole-trace commands
    without the cache (each run parses the 1.4 GB file; minutes on a loaded machine)."""
    n = str(args.nsys170_file)
    out: list[tuple[str, str, list[str], object]] = [
        ("nsys170", "traceparse --no-cache kernels", [*tp, "--no-cache", "kernels", n], None),
        ("nsys170", "bare Arrow read (bare_nsys_read.py)",
         [sys.executable, str(SCALE_TOOLS / "bare_nsys_read.py"), n], None),
        ("nsys170", "traceparse --no-cache summary", [*tp, "--no-cache", "summary", n], None),
        ("nsys170", "traceparse --no-cache report",
         [*tp, "--no-cache", "report", n, "-o", str(tmp / "r170.html"), "--force"], None),
        ("nsys170", "traceparse --no-cache gaps", [*tp, "--no-cache", "gaps", n], None)]
    if has_command("fixes"):
        out.append(("nsys170", "traceparse --no-cache fixes",
                    [*tp, "--no-cache", "fixes", n], None))
    if args.nsys:
        copy = tmp / "copy170.sqlite"

        def fresh_copy() -> None:
            for stale in [*tmp.glob("copy170.sqlite*"), *tmp.glob("out170_*")]:
                stale.unlink()
            shutil.copyfile(n, copy)

        out.insert(1, ("nsys170", "nsys stats -r cuda_gpu_kern_sum",
                       [args.nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv",
                        "--force-export", "false", "--output", str(tmp / "out170"),
                        str(copy)], fresh_copy))
    return out


def has_command(name: str) -> bool:
    """Whether this checkout's CLI has the command ``name``."""
    r = subprocess.run([sys.executable, "-m", "traceparse", name, "--help"], cwd=REPO,
                       capture_output=True, check=False)
    return r.returncode == 0


def version(cmd: list[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
        if r.returncode:
            return "?"
        return (r.stdout.strip() or r.stderr.strip()).splitlines()[-1][:80]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kineto", type=Path, required=True, help="DLRM x20 directory")
    ap.add_argument("--nsys-file", type=Path, required=True, help="1.03M-kernel .sqlite")
    ap.add_argument("--hta-python", help="python of a venv with HTA 0.5")
    ap.add_argument("--nsys", default=os.environ.get("NSYS"), help="nsys executable")
    ap.add_argument("--nsys170-file", type=Path,
                    help="the 10.3M-kernel export (scale_nsys.py ... 170), made once into a "
                         "scratch directory, never committed")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--repeat170", type=int, default=1,
                    help="runs of each x170 row (each parses 1.4 GB)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only rows whose 'workload label' contains this text (repeatable)")
    ap.add_argument("--before", type=Path, help="an exported older checkout (git archive): "
                    "its traceparse rows are run too, labelled 'before'")
    ap.add_argument("--results", type=Path, help="write the table into this RESULTS.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-scale-") as tmpdir:
        tmp = Path(tmpdir)
        env = dict(os.environ, TRACEPARSE_CACHE_DIR=str(tmp / "cache"))
        table = [(*row, REPO) for row in rows(args, tmp)]
        if args.before:
            table += [(w, f"{label} (before)", cmd, setup, args.before)
                      for w, label, cmd, setup in rows(args, tmp)
                      if label.startswith("traceparse") and "--gpu-only" not in label
                      and "--executor" not in label]
            table.sort(key=lambda row: row[0] != "kineto")
        if args.only:
            table = [row for row in table if any(o in f"{row[0]} {row[1]}" for o in args.only)]
        for cwd in {row[4] for row in table}:  # warm each checkout's cache (not timed)
            subprocess.run([sys.executable, "-m", "traceparse", "info", str(args.nsys_file)],
                           cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
        load0 = os.getloadavg()
        runs: dict[int, list[tuple[float, float, float, float]]] = {
            i: [] for i in range(len(table))}
        for r in range(max(args.repeat, args.repeat170 if args.nsys170_file else 0)):
            order = list(range(len(table)))
            order = order[r % len(order):] + order[:r % len(order)]
            for i in order:
                if r >= (args.repeat170 if table[i][0] == "nsys170" else args.repeat):
                    continue
                _, label, cmd, setup, cwd = table[i]
                if callable(setup):
                    setup()
                runs[i].append(run_once(cmd, env, cwd))
                print(f"round {r + 1} {label}: {runs[i][-1][0]:.2f} s", file=sys.stderr)
        load1 = os.getloadavg()
    md = render(args, table, runs, load0, load1)
    print(md)
    if args.results:
        write_results(args.results, md)


def render(args: argparse.Namespace, table: list[tuple[str, str, list[str], object, Path]],
           runs: dict[int, list[tuple[float, float, float, float]]],
           load0: tuple[float, float, float], load1: tuple[float, float, float]) -> str:
    sizes = {"kineto": sum(p.stat().st_size for p in args.kineto.glob("*.json")),
             "nsys": args.nsys_file.stat().st_size}
    if args.nsys170_file:
        sizes["nsys170"] = args.nsys170_file.stat().st_size
    rev = os.environ.get("TRACEPARSE_REV") or version(["git", "rev-parse", "--short", "HEAD"])
    vers = {"python": platform.python_version()}
    for lib in ("polars", "msgspec", "orjson", "pyarrow"):
        vers[lib] = version([sys.executable, "-c", f"import {lib}; print({lib}.__version__)"])
    if args.hta_python:
        vers["HTA"] = version([args.hta_python, "-c", "import importlib.metadata as m; "
                               "print(m.version('HolisticTraceAnalysis'))"])
    if args.nsys:
        vers["nsys"] = version([args.nsys, "--version"])
    lines = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, traceparse "
        f"{rev}, {platform.machine()} {os.cpu_count()} CPUs ({platform.platform()}), load "
        f"average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end (other engineers "
        "share the machine). Versions: " + ", ".join(f"{k} {v}" for k, v in vers.items()) + ".",
        f"Inputs: Kineto {sizes['kineto'] / 1e6:.0f} MB (8 files), nsys "
        f"{sizes['nsys'] / 1e6:.0f} MB"
        + (f", nsys x170 {sizes['nsys170'] / 1e6:.0f} MB ({args.repeat170} run(s) per row)"
           if "nsys170" in sizes else "")
        + f". Medians of {args.repeat} interleaved runs; RSS ratio "
        "= the larger of the two RSS figures / input bytes; time ratio = this row's median / "
        "the reference row's median in the same run.",
        "",
        "| workload | command | median s | runs s | median CPU s | max RSS 1 process MiB "
        "| peak tree RSS MiB | RSS / input | time / reference | goal |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    medians = {(w, label): statistics.median(r[0] for r in runs[i])
               for i, (w, label, *_) in enumerate(table)}
    for i, (work, label, *_) in enumerate(table):
        rs = runs[i]
        wall = statistics.median(r[0] for r in rs)
        one = statistics.median(r[1] for r in rs)
        tree = statistics.median(r[2] for r in rs)
        cpu = statistics.median(r[3] for r in rs)
        ratio = max(one, tree) * 2**20 / sizes[work]
        # a "(before)" row has its command's reference and goal
        ref, goal = GOALS.get((work, label.removesuffix(" (before)")), ("", ""))
        vs = (f"{wall / medians[work, ref]:.2f}x {ref.split(' (')[0]}"
              if (work, ref) in medians else "")
        lines.append(f"| {work} | {label} | {wall:.2f} | "
                     f"{', '.join(f'{r[0]:.2f}' for r in rs)} | {cpu:.1f} | {one:.0f} | "
                     f"{tree:.0f} | "
                     f"{ratio:.1f}x | {vs} | {goal} |")
    return "\n".join(lines) + "\n"


def write_results(path: Path, md: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    block = f"{BEGIN}\n{md}{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Issue 16: scale workloads against the peers " \
               "(`benchmarks/scale.py`)\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    main()
