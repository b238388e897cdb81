"""A directory of per-rank Kineto traces -> one multi-rank
:class:`~traceparse.timeline.Timeline` (:func:`read_dir`).

Each file is parsed by :func:`traceparse.kineto.reader.read`, in helper processes when
there are several large files and idle cores. A file in the directory that is well-formed
but no trace at all (:class:`~traceparse.errors.NotATrace`: a capture's ``*.meta.json``
sidecar, a config dump) is not read: it gets one ``ingest`` row (table ``files``, outcome
``not read``, the reason) and the ranks are taken from the trace files alone.
"""

from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import polars as pl

from traceparse.errors import NotATrace, TraceError
from traceparse.kineto.reader import read
from traceparse.timeline import Timeline, concat, ingest_frame

_TRACE_SUFFIXES = (".json", ".json.gz")
#: Files above this total size are parsed in a process pool by :func:`read_dir`.
PARALLEL_MIN_BYTES = 8 << 20


def is_trace_file(p: Path) -> bool:
    """Whether directory entry ``p`` is read as a rank: a file named ``*.json[.gz]``."""
    return p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES)


def trace_files(directory: Path) -> list[Path]:
    """Kineto trace files in ``directory`` (``*.json``, ``*.json.gz``), sorted by name."""
    return sorted(p for p in directory.iterdir() if is_trace_file(p))


#: One file's outcome: its timeline, or why it is no trace at all (returned, not raised).
Part = Timeline | NotATrace


def _read_indexed(args: tuple[str, int]) -> Part:
    path, order = args
    try:
        return read(path, _fallback=(order, "file order"))
    except NotATrace as exc:
        return exc


#: Shared [next front job, one past the last back job] of :func:`_read_shared`, set in each
#: helper process by :func:`_init_helper`.
_BOUNDS: Any = None


def _init_helper(bounds: Any) -> None:
    global _BOUNDS
    _BOUNDS = bounds


def _claim(bounds: Any, front: bool) -> int | None:
    """Atomically take the next job index from the front (helpers) or back (this process)
    of the shared bounds; None when every job is taken."""
    with bounds.get_lock():
        if bounds[0] >= bounds[1]:
            return None
        if front:
            bounds[0] += 1
            return int(bounds[0] - 1)
        bounds[1] -= 1
        return int(bounds[1])


def _helper(jobs: list[tuple[str, int]], tmp: str) -> list[tuple[int, str | NotATrace]]:
    """Helper-process loop: claim jobs from the front until none is left; save each
    timeline as uncompressed Parquet under ``tmp`` and return ``(job, directory)`` pairs.
    (Sending ~10 MB pickled timelines back through the pool's pipe stalled the helper
    until this process's busy thread drained it, ~0.5 s per file on 2 cores. A pickle
    *file* was measured too: ~20 ms less CPU per DLRM x20 rank, but 9.1 MB against
    1.8 MB of Parquet per rank in the temporary directory, every part held until the
    end; no whole-process gain was measurable, so Parquet stays.)"""
    done: list[tuple[int, str | NotATrace]] = []
    while (i := _claim(_BOUNDS, front=True)) is not None:
        part = _read_indexed(jobs[i])
        done.append((i, part if isinstance(part, NotATrace)
                     else str(part.save(f"{tmp}/part{i}", compression="uncompressed"))))
    return done


def _read_shared(jobs: list[tuple[str, int]], helpers: int) -> list[Part]:
    """Parse ``jobs`` in ``helpers`` spawned processes **and** this one.

    Helpers claim jobs from the front of the list and this process from the back, through
    a shared pair of bounds, so no process sits idle and no job waits in a queue: this
    process works while the helpers start (spawning re-imports polars, ~0.5 s each), the
    last jobs go to whoever is free, and on a busy machine the directory is not slower
    than a serial parse.
    """
    ctx = get_context("spawn")
    bounds = ctx.Array("q", [0, len(jobs)])
    parts: list[Part | None] = [None] * len(jobs)
    with (tempfile.TemporaryDirectory(prefix="traceparse-") as tmp,
          ProcessPoolExecutor(max_workers=helpers, mp_context=ctx, initializer=_init_helper,
                              initargs=(bounds,)) as pool):
        futures = [pool.submit(_helper, jobs, tmp) for _ in range(helpers)]
        try:
            while (i := _claim(bounds, front=False)) is not None:
                parts[i] = _read_indexed(jobs[i])
            for fut in futures:
                for i, saved in fut.result():
                    parts[i] = saved if isinstance(saved, NotATrace) \
                        else Timeline.load(saved, validate=False)
        except BaseException:
            with bounds.get_lock():
                bounds[0] = bounds[1]  # helpers stop after their current job (the pool
            raise                      # waits for them: they hold the shared lock)
    return [t for t in parts if t is not None]


def idle_cores() -> int:
    """Cores no other process is using, as the 1-minute load average tells (rounded).

    A helper process costs a fresh interpreter and polars import (~0.25 s of CPU) plus
    its own warm-up: on a machine whose cores are all busy it only takes CPU from this
    process. On the shared 2-core box (load 5-10), ``info`` on the 8-rank DLRM x20 set
    took 2.8 s of CPU serially against 3.5 s with a helper, and more wall time too.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: assume the cores are free
        load = 0.0
    cores = os.cpu_count() or 1
    return max(0, min(cores - 1, round(cores - load)))


def _idle_mark() -> tuple[int, float] | None:
    """(idle + iowait clock ticks of all CPUs since boot, monotonic seconds) from Linux's
    ``/proc/stat``; None where it cannot be read (then no core counts as idle)."""
    try:
        with open("/proc/stat", "rb") as fh:
            fields = fh.readline().split()
        return int(fields[4]) + int(fields[5]), time.monotonic()
    except (OSError, ValueError, IndexError):
        return None


def idle_since(mark: tuple[int, float] | None) -> float:
    """Cores that were idle on average since ``mark`` (:func:`_idle_mark`): the idle ticks
    counted meanwhile over the elapsed ticks. This process's own core is busy parsing, so
    it counts the others."""
    now = _idle_mark()
    if mark is None or now is None or now[1] <= mark[1]:
        return 0.0
    return (now[0] - mark[0]) / (os.sysconf("SC_CLK_TCK") * (now[1] - mark[1]))


def _read_then_share(jobs: list[tuple[str, int]]) -> list[Part]:
    """Parse ``jobs`` here, from the last, while :func:`idle_cores` (the 1-minute load
    average) says no core is free; after each file, if a core stayed idle while it was
    parsed, share the rest with that many helpers (:func:`_read_shared`).

    The load average lags: right after a burst of work (another tool, a previous run) it
    still counts cores that are idle now. Measured over this process's own parse instead,
    idle CPU time says what a helper would get now.
    """
    done: list[Part] = []
    todo = list(jobs)
    while todo:
        mark = _idle_mark()
        done.append(_read_indexed(todo.pop()))
        helpers = min(int(idle_since(mark) + 0.5), (os.cpu_count() or 1) - 1, len(todo) - 1)
        if helpers >= 1:
            return [*_read_shared(todo, helpers), *reversed(done)]
    return list(reversed(done))


def read_dir(path: str | os.PathLike[str], *, workers: int | None = None) -> Timeline:
    """Parse a directory of per-rank Kineto traces into one multi-rank timeline.

    Each file's rank comes from ``distributedInfo.rank``, else its name, else its position
    in name order among the trace files (``sources.rank_source`` says which). A JSON file
    that is no trace (:class:`NotATrace`) is not read: one ``ingest`` row says why. Files
    are parsed in parallel in a process pool when there are several, they are large enough
    to repay it, and cores are idle (:func:`idle_cores`, else measured while the first
    files are parsed here: :func:`_read_then_share`; ``workers`` sets the number of
    processes instead).

    Raises:
        TraceError: no trace files, a bad (damaged) file, or two files claiming the same
            rank.
    """
    d = Path(path)
    if not d.is_dir():
        raise TraceError(d, "not a directory")
    files = trace_files(d)
    if not files:
        raise TraceError(d, "no Kineto trace files (*.json, *.json.gz) in the directory"
                            + _subdirectory_hint(d))
    jobs = [(str(f), i) for i, f in enumerate(files)]
    total = sum(f.stat().st_size for f in files)
    n = min(len(files), workers or 1 + idle_cores())
    results: list[Part]
    if n > 1 and total >= PARALLEL_MIN_BYTES:
        results = _read_shared(jobs, n - 1)
    elif workers is None and len(jobs) > 2 and total >= PARALLEL_MIN_BYTES:
        results = _read_then_share(jobs)
    else:
        results = [_read_indexed(j) for j in jobs]
    skipped = [(f, r) for f, r in zip(files, results, strict=True) if isinstance(r, NotATrace)]
    files, parts = _traces_only(d, files, results)
    ranks = [int(t.sources["rank"][0]) for t in parts]
    if len(set(ranks)) != len(ranks):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        names = [f.name for f, r in zip(files, ranks, strict=False) if r in dup]
        raise TraceError(d, f"several files claim rank {dup[0]}: {', '.join(names[:4])}")
    tl = concat(parts)
    tl.meta = {"format": "kineto-json", "ranks": ranks, "files": [f.name for f in files],
               "parts": [t.meta for t in parts]}
    unread = [(f.name, exc.problem) for f, exc in skipped] + _other_entries(d)
    if unread:
        tl.meta["not_read"] = sorted(name for name, _ in unread)
        rows = [{"rank": 0, "table": "files", "source": name, "outcome": "not read",
                 "reason": why, "count": 1} for name, why in sorted(unread)]
        tl.ingest = pl.concat([tl.ingest, ingest_frame(rows)], how="vertical_relaxed")
    return tl.validate()


def _subdirectory_hint(d: Path) -> str:
    """Where a directory without trace files has subdirectories that hold some (a
    TensorBoard log directory: ``log/run1/*.pt.trace.json``), the words that name them."""
    subs = sorted((sub.name, len(trace_files(sub))) for sub in d.iterdir()
                  if sub.is_dir() and not sub.name.startswith("."))
    held = [(name, n) for name, n in subs if n]
    if not held:
        return ""
    named = ", ".join(f"{name} ({n})" for name, n in held[:3])
    more = f" and {len(held) - 3} more" if len(held) > 3 else ""
    return f"; subdirectories with trace files: {named}{more}: give one of them"


def _other_entries(d: Path) -> list[tuple[str, str]]:
    """(name, why) of the directory's entries that are not Kineto trace file names: they
    are not read, and the accounting says so."""
    return [(p.name, "a directory: the ranks are the files of this one" if p.is_dir()
             else "name not *.json or *.json.gz: not a Kineto trace")
            for p in sorted(d.iterdir()) if not is_trace_file(p)]


def _traces_only(d: Path, files: list[Path], results: list[Part]
                 ) -> tuple[list[Path], list[Timeline]]:
    """The trace files and their timelines, without the files that are no trace. A rank
    taken from a file's position in name order counted those files: such a file is read
    again at its position among the traces."""
    kept = [(j, f, r) for j, (f, r) in enumerate(zip(files, results, strict=True))
            if isinstance(r, Timeline)]
    if not kept:
        first = next(r for r in results if isinstance(r, NotATrace))
        raise TraceError(d, f"no Kineto trace in the directory: {len(files)} JSON file(s), "
                            f"none a trace ({Path(first.path or '').name}: {first.problem})")
    parts = [tl if tl.sources["rank_source"][0] != "file order" or j == i
             else read(str(f), _fallback=(i, "file order"))
             for i, (j, f, tl) in enumerate(kept)]
    return [f for _, f, _ in kept], parts
