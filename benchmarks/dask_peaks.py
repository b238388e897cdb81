"""Issue 28: peaks of the Dask executor, client and workers apart.

Starts ``LocalCluster(n_workers=W, threads_per_worker=1)`` (the scheduler runs in this, the
client's, process, as under ``traceparse ... --executor dask``), runs ``kernels``,
``breakdown --gpu-only``, ``gaps``, ``launches --report graphs`` or ``summary`` of one nsys
export on it (:mod:`traceparse.executor`, :mod:`traceparse.summary_chunks`; the summary's
savings replays run in the client) and prints one JSON line: wall and CPU seconds of the client,
the workers' CPU seconds (summed, including their start), the client's peak RSS and each
worker's peak RSS (``getrusage`` in each worker after the run), and the md5 of the CSV of
the result (to compare with the other executors' output; for ``summary``, the md5 of its text
as ``traceparse summary`` prints it).

Usage: ``python3 benchmarks/dask_peaks.py EXPORT kernels|breakdown|gaps|launches|summary
[--workers 4]
[--chunk-rows N]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import resource
import time


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("export")
    ap.add_argument("what", choices=["kernels", "breakdown", "gaps", "launches", "summary"])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--chunk-rows", type=int, default=1 << 18)
    args = ap.parse_args()
    from distributed import Client, LocalCluster

    from traceparse import executor

    t0, c0 = time.perf_counter(), time.process_time()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        t1 = time.perf_counter()
        text = None
        if args.what == "summary":
            from traceparse.reports.summary_text import render_text
            from traceparse.summary_chunks import summary

            result = summary(args.export, top=10, min_gap_ns=10_000, executor="dask",
                             chunk_rows=args.chunk_rows, scheduler=cluster.scheduler_address)
            frame, text = None, None if result is None else render_text(result)
        elif args.what == "gaps":  # the frame only (its first event is for the table format)
            found = executor.idle_gaps(args.export, min_ns=10_000, executor="dask",
                                       chunk_rows=args.chunk_rows,
                                       scheduler=cluster.scheduler_address)
            frame = None if found is None else found[0]
        elif args.what == "launches":
            from traceparse import launch_chunks

            frame = launch_chunks.graph_recoverable(args.export, executor="dask",
                                                    chunk_rows=args.chunk_rows,
                                                    scheduler=cluster.scheduler_address)
        else:
            fn = executor.kern_sum if args.what == "kernels" else executor.gpu_breakdown
            frame = fn(args.export, executor="dask", chunk_rows=args.chunk_rows,
                       scheduler=cluster.scheduler_address)
        t2 = time.perf_counter()
        workers = client.run(_peak_mib)
        worker_cpu = client.run(_cpu_s)
    if text is None:
        assert frame is not None
        text = frame.write_csv()
    digest = hashlib.md5(text.encode())
    print(json.dumps({
        "export": args.export, "what": args.what, "workers": args.workers,
        "chunk_rows": args.chunk_rows, "wall_s": round(t2 - t0, 2),
        "cluster_start_s": round(t1 - t0, 2), "client_cpu_s": round(time.process_time() - c0, 2),
        "client_peak_mib": round(_peak_mib()), "worker_peak_mib": sorted(
            round(v) for v in workers.values()),
        "workers_cpu_s": round(sum(worker_cpu.values()), 1),
        "md5": digest.hexdigest()}))


if __name__ == "__main__":
    main()
