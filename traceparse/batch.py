"""Fleet scale: ingest and summarise many traces into one partitioned Parquet dataset.

:func:`run_batch` takes a list of trace files (see :func:`discover`), processes each one
independently - load (through the cache), write its tables, compute its summary row - on a
local process pool or a Dask cluster, and writes::

    OUT/gpu/trace=<id>/part.parquet      # one hive partition per trace, per table
    OUT/api/trace=<id>/part.parquet
    OUT/ranges/trace=<id>/part.parquet
    OUT/summary.parquet                  # one row per trace (also summary.csv)

Read the dataset back with ``pl.scan_parquet("OUT/gpu/**/*.parquet", hive_partitioning=True)``
(the ``trace`` column comes from the directory name) or ``pyarrow.dataset``.

A trace that fails to load does not stop the batch: its summary row has ``status = "error"``
and the one-line reason in ``error``, and it has no partition. A file that is no trace at
all (:class:`traceparse.errors.NotATrace`: a capture's ``*.meta.json`` sidecar, an unrelated
CSV) gets ``status = "skipped"`` with the reason, and does not fail the batch.

Example:
    >>> paths = discover("runs/")                                   # doctest: +SKIP
    >>> summary = run_batch(paths, "fleet/", executor="local")      # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import polars as pl

from traceparse.errors import NotATrace, TraceError

#: File suffixes :func:`discover` picks up in a directory.
TRACE_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".json", ".json.gz", ".csv")
#: Tables written to the dataset, one partition per trace each (``ncu``: the launches and
#: counters of Nsight Compute pages, empty for timelines).
DATASET_TABLES = ("gpu", "api", "ranges", "ncu")
#: Columns of the summary table, in order.
SUMMARY_COLS = {
    "trace": pl.String, "file": pl.String, "status": pl.String, "error": pl.String,
    "format": pl.String, "ranks": pl.Int64, "kernels": pl.Int64, "gpu_rows": pl.Int64,
    "api_rows": pl.Int64, "range_rows": pl.Int64, "kernel_time_ns": pl.Int64,
    "window_start_ns": pl.Int64, "window_end_ns": pl.Int64, "window_ns": pl.Int64,
    "top_kernel": pl.String, "top_kernel_ns": pl.Int64, "top_kernel_pct": pl.Float64,
    "compute_pct": pl.Float64, "communication_pct": pl.Float64, "memory_pct": pl.Float64,
    "launch_overhead_pct": pl.Float64, "warmup_pct": pl.Float64, "host_sync_pct": pl.Float64,
    "idle_pct": pl.Float64,
}
_PARTS = ("compute", "communication", "memory", "launch_overhead", "warmup", "host_sync",
          "idle")


def discover(spec: str | os.PathLike[str]) -> list[Path]:
    """Trace files named by ``spec``: a directory (searched recursively for
    :data:`TRACE_SUFFIXES`), a glob pattern (``runs/*/rank*.json``, ``**`` allowed), or one
    file. Sorted; raises :class:`TraceError` when nothing matches."""
    p = Path(spec)
    if p.is_dir():
        found = sorted(f for f in p.rglob("*")
                       if f.is_file() and f.name.lower().endswith(TRACE_SUFFIXES))
    elif p.is_file():
        found = [p]
    else:
        found = sorted(Path(f) for f in glob.glob(str(spec), recursive=True)
                       if Path(f).is_file())
    if not found:
        raise TraceError(p, "no trace files match (a directory, a glob pattern or a file)")
    return found


def trace_ids(paths: Sequence[Path]) -> list[str]:
    """A unique, filesystem-safe partition id per path: the path relative to the paths'
    common directory, with every character outside ``[A-Za-z0-9._-]`` replaced by ``_``.

    Example:
        >>> trace_ids([Path("a/x/rank 0.json"), Path("a/y/rank 0.json")])
        ['x_rank_0.json', 'y_rank_0.json']
    """
    if not paths:
        return []
    absolute = [str(Path(p).resolve()) for p in paths]
    root = os.path.commonpath([os.path.dirname(a) for a in absolute])
    ids: list[str] = []
    seen: dict[str, int] = {}
    for a in absolute:
        rid = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.relpath(a, root)) or "trace"
        n = seen.get(rid, 0)
        seen[rid] = n + 1
        ids.append(rid if n == 0 else f"{rid}~{n}")
    return ids


def summary_row(tl: Any, trace: str, file: str) -> dict[str, Any]:
    """The summary row of one loaded timeline (see :data:`SUMMARY_COLS`)."""
    kernels = tl.kernels
    row: dict[str, Any] = {
        "trace": trace, "file": file, "status": "ok", "error": None,
        "format": ",".join(sorted(set(tl.sources["format"].cast(pl.String).to_list()))),
        "ranks": tl.gpu["rank"].n_unique() if tl.gpu.height else tl.sources.height,
        "kernels": kernels.height, "gpu_rows": tl.gpu.height, "api_rows": tl.api.height,
        "range_rows": tl.ranges.height,
        "kernel_time_ns": int(kernels["dur_ns"].sum()) if kernels.height else 0,
    }
    span = tl.span_ns()
    if span:
        row.update(window_start_ns=span[0], window_end_ns=span[1], window_ns=span[1] - span[0])
    if tl.ncu_only():  # an ncu page: its launches and their profiled time (no window)
        kernels = tl.ncu.select(pl.col("kernel_name").alias("name"), "dur_ns")
        timed = kernels["dur_ns"].drop_nulls()
        row.update(kernels=kernels.height,
                   kernel_time_ns=int(timed.sum()) if timed.len() else None)
        kernels = kernels.filter(pl.col("dur_ns").is_not_null())
    if kernels.height:
        top = (kernels.group_by("name").agg(pl.col("dur_ns").sum())
               .sort(["dur_ns", "name"], descending=[True, False]).row(0))
        row.update(top_kernel=str(top[0]), top_kernel_ns=int(top[1]),
                   top_kernel_pct=100.0 * top[1] / max(1, row["kernel_time_ns"]))
    row.update(_attribution(tl))
    return row


def _attribution(tl: Any) -> dict[str, float]:
    """Percent of the summed device windows per attribution part ({} when the attribution
    analysis is unavailable or the trace has no GPU activity)."""
    try:
        from traceparse.analyses import attribution
    except ImportError:
        return {}
    if tl.gpu.height == 0:
        return {}
    bd = attribution.breakdown(tl)
    totals = {p: int(bd[f"{p}_ns"].sum()) for p in _PARTS if f"{p}_ns" in bd.columns}
    whole = sum(totals.values())
    if not whole:
        return {}
    return {f"{p}_pct": 100.0 * v / whole for p, v in totals.items()}


def process_one(path: str, trace: str, out_dir: str,
                cache_dir: str | None = None) -> dict[str, Any]:
    """Load one trace, write its partitions under ``out_dir`` and return its summary row.

    Runs in a worker (process pool or Dask): arguments and result are plain picklable
    values. A :class:`TraceError` becomes an ``error`` row instead of an exception.
    """
    from traceparse.atomic import atomic_path
    from traceparse.loader import load

    try:
        tl = load(path, cache=cache_dir if cache_dir else None)
    except NotATrace as exc:
        return {"trace": trace, "file": path, "status": "skipped", "error": str(exc)}
    except TraceError as exc:
        return {"trace": trace, "file": path, "status": "error", "error": str(exc)}
    for table in DATASET_TABLES:
        frame = tl.table(table)
        part = Path(out_dir) / table / f"trace={trace}"
        part.mkdir(parents=True, exist_ok=True)
        with atomic_path(part / "part.parquet") as tmp:
            frame.write_parquet(tmp)
    return summary_row(tl, trace, path)


def summary_frame(rows: Iterable[dict[str, Any]]) -> pl.DataFrame:
    """Rows from :func:`process_one` as a typed frame sorted by trace id."""
    full = [{c: r.get(c) for c in SUMMARY_COLS} for r in rows]
    if not full:
        return pl.DataFrame(schema=SUMMARY_COLS)
    return pl.DataFrame(full, schema=SUMMARY_COLS, orient="row").sort("trace")


def _local(jobs: list[tuple[str, str, str, str | None]], workers: int | None,
           on_done: Callable[[], None]) -> list[dict[str, Any]]:
    n = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    if n == 1:
        out = []
        for job in jobs:
            out.append(process_one(*job))
            on_done()
        return out
    rows: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=n, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(process_one, *job) for job in jobs]
        for fut in as_completed(futures):
            rows.append(fut.result())
            on_done()
    return rows


def _dask(jobs: list[tuple[str, str, str, str | None]], address: str | None,
          workers: int | None, on_done: Callable[[], None]) -> list[dict[str, Any]]:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise TraceError(None, "--executor dask needs Dask distributed: "
                               "pip install 'traceparse[dask]'") from None
    cluster = None
    if address:
        client = Client(address)
    else:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        futures = [client.submit(process_one, *job, pure=False) for job in jobs]
        rows = []
        for fut in dask_completed(futures):
            rows.append(fut.result())
            on_done()
        return rows
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def parse_executor(text: str) -> tuple[str, str | None]:
    """``"local"`` -> (local, None); ``"dask"`` -> (dask, None) = a local Dask cluster;
    ``"dask=tcp://host:8786"`` -> (dask, address)."""
    name, _, address = text.partition("=")
    if name not in ("local", "dask") or (name == "local" and address):
        raise TraceError(None, f"--executor must be local, dask or dask=ADDRESS, got {text!r}")
    return name, address or None


def run_batch(paths: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], *,
              executor: str = "local", workers: int | None = None,
              cache_dir: str | os.PathLike[str] | None = None,
              on_done: Callable[[], None] | None = None) -> pl.DataFrame:
    """Process every trace in ``paths`` and write the dataset and summary to ``out_dir``.

    Args:
        paths: trace files (one trace each).
        out_dir: output directory (created; existing partitions of the same ids replaced).
        executor: ``local`` (process pool), ``dask`` (local Dask cluster) or
            ``dask=ADDRESS`` (an existing scheduler; workers must see the same paths).
        workers: pool size (default: the CPU count).
        cache_dir: timeline cache directory for the workers (None = no cache).
        on_done: called once per finished trace (progress reporting).

    Returns:
        The summary table (also written to ``summary.parquet`` and ``summary.csv``).
    """
    from traceparse.atomic import atomic_path

    kind, address = parse_executor(executor)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = [Path(p) for p in paths]
    cache = str(cache_dir) if cache_dir else None
    jobs = [(str(f.resolve()), tid, str(out.resolve()), cache)
            for f, tid in zip(files, trace_ids(files), strict=True)]
    done = on_done or (lambda: None)
    rows = _dask(jobs, address, workers, done) if kind == "dask" else _local(jobs, workers, done)
    summary = summary_frame(rows)
    with atomic_path(out / "summary.parquet") as tmp:
        summary.write_parquet(tmp)
    with atomic_path(out / "summary.csv") as tmp:
        summary.write_csv(tmp)
    return summary
