"""Generate large PyTorch profiler (Kineto) traces for benchmarks, two ways.

``synth``: a schema-faithful trace of N kernels (PyTorch 2.x layout: relative ``ts`` with
``baseTimeNanoseconds``, 3-decimal microseconds). Per kernel: one ``cpu_op`` (aten::*),
one ``cuda_runtime`` ``cudaLaunchKernel`` and an ``ac2g`` flow pair linking it to the
``kernel`` event (correlation ids). About 2,000 distinct kernel names (Zipf-distributed,
about 2% NCCL ``ncclDevKernel_*`` with a ``record_param_comms`` op carrying the collective
args), one ``gpu_memcpy`` per 50 kernels, one ``ProfilerStep#k`` per 1,000 kernels, on 4
streams, plus ``deviceProperties`` and ``distributedInfo``.

``stretch``: make real traces N times longer by repeating their events N times, each copy
shifted by the trace's span (plus 1 ms) and with correlation / External id / flow ids offset
so links stay unique. Metadata events (``ph: M``) are kept once.

Usage::

    python3 benchmarks/gen_kineto.py synth OUT.json --kernels 1000000 [--rank 0]
    python3 benchmarks/gen_kineto.py stretch OUT_DIR FILE... --factor 20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

BASE_NS = 1_735_632_360_000_000_000
N_NAMES = 2000
CHUNK = 50_000


def _names() -> list[str]:
    out = []
    for i in range(N_NAMES):
        if i % 50 == 0:
            out.append(f"ncclDevKernel_AllReduce_Sum_f32_RING_LL_{i}")
        else:
            out.append(f"void at::native::kernel_{i}<float, {i % 7}>(int, float const*, float*)")
    return out


def synth(out: Path, kernels: int, rank: int = 0, seed: int = 0) -> int:
    """Write a synthetic trace of ``kernels`` kernels to ``out``; return the event count."""
    rng = np.random.default_rng(seed + rank)
    names = _names()
    n = kernels
    name_idx = (rng.zipf(1.3, n) % N_NAMES).tolist()
    gap = rng.integers(500, 3000, n)
    start_ns = (np.cumsum(gap) + 1_000_000).tolist()       # GPU start, relative ns
    dur_ns = (rng.lognormal(9, 1.2, n).astype(np.int64) + 1000).tolist()
    lead = rng.integers(2000, 20000, n).tolist()           # launch precedes the kernel
    stream = (rng.integers(0, 4, n) + 7).tolist()
    grid = rng.integers(1, 4096, n).tolist()
    header = {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
              "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8},
              "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                    "totalGlobalMem": 85520809984, "computeMajor": 9,
                                    "computeMinor": 0, "maxThreadsPerBlock": 1024,
                                    "numSms": 132, "sharedMemPerBlock": 49152,
                                    "warpSize": 32}]}
    head = orjson.dumps(header)[:-1] + b', "traceEvents": ['
    pid, tid = 1000 + rank, 1000 + rank
    events_written = 0

    def us(ns: int) -> float:
        return round(ns / 1000, 3)

    with open(out, "wb") as fh:
        fh.write(head)
        first = True
        meta = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                 "args": {"name": "python"}},
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                 "args": {"name": "thread 1 (python)"}}]
        chunk: list[dict[str, Any]] = list(meta)
        for i in range(n):
            k0, kd, launch = start_ns[i], dur_ns[i], start_ns[i] - lead[i]
            corr = i + 1
            name = names[name_idx[i]]
            if i % 1000 == 0:
                end = start_ns[min(n - 1, i + 999)] + 1
                chunk.append({"ph": "X", "cat": "user_annotation", "name":
                              f"ProfilerStep#{i // 1000}", "pid": pid, "tid": tid,
                              "ts": us(launch - 500), "dur": us(end - launch + 500),
                              "args": {"External id": 3 * corr}})
            nccl = name_idx[i] % 50 == 0
            op_args: dict[str, Any] = {"External id": 3 * corr + 1, "Sequence number": i}
            if nccl:
                op_args.update({"Collective name": "allreduce", "dtype": "Float",
                                "In msg nelems": 262144, "Out msg nelems": 262144,
                                "Group size": 8, "Process Group Name": "0"})
            chunk.append({"ph": "X", "cat": "cpu_op",
                          "name": "record_param_comms" if nccl else "aten::mm",
                          "pid": pid, "tid": tid, "ts": us(launch - 300), "dur": us(1800),
                          "args": op_args})
            chunk.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                          "pid": pid, "tid": tid, "ts": us(launch), "dur": us(1500),
                          "args": {"External id": 3 * corr + 1, "cbid": 211,
                                   "correlation": corr}})
            chunk.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0,
                          "tid": stream[i], "ts": us(k0), "dur": us(kd),
                          "args": {"External id": 3 * corr + 1, "queued": 0, "device": 0,
                                   "context": 1, "stream": stream[i], "correlation": corr,
                                   "registers per thread": 64, "shared memory": 0,
                                   "blocks per SM": 1.5, "warps per SM": 12.0,
                                   "grid": [grid[i], 1, 1], "block": [256, 1, 1],
                                   "est. achieved occupancy %": 50}})
            chunk.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": us(launch),
                          "cat": "ac2g", "name": "ac2g"})
            chunk.append({"ph": "f", "id": corr, "pid": 0, "tid": stream[i], "ts": us(k0),
                          "cat": "ac2g", "name": "ac2g", "bp": "e"})
            if i % 50 == 0:
                chunk.append({"ph": "X", "cat": "gpu_memcpy", "name":
                              "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7,
                              "ts": us(k0 + kd + 10), "dur": us(900),
                              "args": {"device": 0, "context": 1, "stream": 7,
                                       "correlation": n + corr, "bytes": 1 << 20,
                                       "memory bandwidth (GB/s)": 1.1}})
                chunk.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync",
                              "pid": pid, "tid": tid, "ts": us(launch + 1600), "dur": us(400),
                              "args": {"cbid": 41, "correlation": n + corr}})
            if len(chunk) >= CHUNK or i == n - 1:
                body = orjson.dumps(chunk)[1:-1]
                fh.write(body if first else b"," + body)
                first = False
                events_written += len(chunk)
                chunk = []
        fh.write(b"]}")
    return events_written


def _shift_ids(args: dict[str, Any], off: int) -> dict[str, Any]:
    out = dict(args)
    for key in ("correlation", "External id", "Ev Idx"):
        if isinstance(out.get(key), int) and out[key] > 0:
            out[key] = out[key] + off
    return out


def stretch(src: Path, out: Path, factor: int) -> int:
    """Write ``src`` repeated ``factor`` times to ``out``; return the event count."""
    doc = orjson.loads(src.read_bytes())
    events = doc["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    times = [(e["ts"], e.get("dur", 0)) for e in body if isinstance(e.get("ts"), int | float)]
    t0 = min(t for t, _ in times)
    t1 = max(t + (d if isinstance(d, int | float) else 0) for t, d in times)
    span = (t1 - t0) + 1000.0                                  # us, plus 1 ms between copies
    ids = [v for e in body for v in (e.get("id"), *(e.get("args") or {}).values())
           if isinstance(v, int)]
    id_step = max([*ids, 0]) + 1
    out_events: list[dict[str, Any]] = list(meta)
    for k in range(factor):
        dt, off = span * k, id_step * k
        for e in body:
            c = dict(e)
            if isinstance(c.get("ts"), int | float):
                c["ts"] = round(c["ts"] + dt, 3)
            if isinstance(c.get("id"), int):
                c["id"] = c["id"] + off
            if isinstance(c.get("args"), dict):
                c["args"] = _shift_ids(c["args"], off)
            out_events.append(c)
    doc["traceEvents"] = out_events
    out.write_bytes(orjson.dumps(doc))
    return len(out_events)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("synth")
    s.add_argument("out", type=Path)
    s.add_argument("--kernels", type=int, default=1_000_000)
    s.add_argument("--rank", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("stretch")
    t.add_argument("out_dir", type=Path)
    t.add_argument("files", nargs="+", type=Path)
    t.add_argument("--factor", type=int, default=20)
    a = ap.parse_args()
    t0 = time.perf_counter()
    if a.mode == "synth":
        n = synth(a.out, a.kernels, a.rank, a.seed)
        print(f"wrote {a.out}: {n:,} events in {time.perf_counter() - t0:.1f} s")
    else:
        a.out_dir.mkdir(parents=True, exist_ok=True)
        for f in a.files:
            n = stretch(f, a.out_dir / f.name, a.factor)
            print(f"wrote {a.out_dir / f.name}: {n:,} events")


if __name__ == "__main__":
    main()
