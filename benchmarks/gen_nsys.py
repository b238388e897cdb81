"""Generate a schema-faithful Nsight Systems SQLite export of any size (for benchmarks).

Layout follows nsys 2024.2 exports (export schema 3.11): StringIds, META_DATA_EXPORT,
TARGET_INFO_GPU, ENUM_CUDA_MEMCPY_OPER, ENUM_CUDA_MEM_KIND, CUPTI_ACTIVITY_KIND_KERNEL /
MEMCPY / MEMSET / RUNTIME / SYNCHRONIZATION and NVTX_EVENTS, with the real column lists.

Content: N kernels over ~2,000 distinct names (about 2% NCCL ``ncclDevKernel_*``), one
runtime launch row per kernel (``cudaLaunchKernel_v7000``, 10% driver ``cuLaunchKernel``),
one memcpy per 50 kernels, one memset per 200, one NVTX push/pop pair of ranges per 20
kernels, one sync row per 100 kernels, on 2 processes x 4 streams.

Usage::

    python3 benchmarks/gen_nsys.py OUT.sqlite [--kernels 1000000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

import numpy as np


def _cols(text: str) -> list[str]:
    return text.split(", ")


KERNEL_COLS = _cols("start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
               "globalPid, demangledName, shortName, mangledName, launchType, cacheConfig, "
               "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
               "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
               "localMemoryTotal, gridId, sharedMemoryExecuted, graphNodeId, "
               "sharedMemoryLimitConfig")
MEMCPY_COLS = _cols("start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
               "globalPid, bytes, copyKind, deprecatedSrcId, srcKind, dstKind, srcDeviceId, "
               "srcContextId, dstDeviceId, dstContextId, migrationCause, graphNodeId, "
               "virtualAddress")
MEMSET_COLS = _cols("start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
               "globalPid, value, bytes, graphNodeId, memKind")
RUNTIME_COLS = _cols("start, end, eventClass, globalTid, correlationId, nameId, returnValue, "
                     "callchainId")
SYNC_COLS = _cols("start, end, deviceId, contextId, greenContextId, streamId, correlationId, "
             "globalPid, syncType, eventId")
NVTX_COLS = _cols("start, end, eventType, rangeId, category, color, text, globalTid, "
                  "endGlobalTid, textId, domainId, uint64Value, int64Value, doubleValue, "
                  "uint32Value, int32Value, floatValue, jsonTextId, jsonText")


def _create(con: sqlite3.Connection, table: str, cols: list[str]) -> None:
    body = ", ".join(f'"{c}" INTEGER' if c not in ("text", "jsonText") else f'"{c}" TEXT'
                     for c in cols)
    con.execute(f"CREATE TABLE {table} ({body})")


def _insert(con: sqlite3.Connection, table: str, cols: list[str], arrays: dict) -> None:
    n = len(next(iter(arrays.values())))
    data = [arrays[c].tolist() if c in arrays else [None] * n for c in cols]
    marks = ", ".join("?" * len(cols))
    con.executemany(f"INSERT INTO {table} VALUES ({marks})", zip(*data, strict=True))


def generate(out: Path, kernels: int = 1_000_000, seed: int = 0) -> dict[str, int]:
    """Write the export to ``out`` (replaced); return row counts per table."""
    rng = np.random.default_rng(seed)
    out.unlink(missing_ok=True)
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    # strings: 2,000 kernel names (demangled + short), API names, NVTX texts
    n_names = 2000
    strings: list[str] = []
    for i in range(n_names):
        if i % 50 == 0:
            base = f"ncclDevKernel_AllReduce_Sum_f32_RING_LL_{i}"
            strings += [f"{base}(ncclDevKernelArgsStorage<4096>)", base]
        else:
            strings += [f"void at::native::kernel_{i}<float, {i % 7}>(int, float const*, float*)",
                        f"kernel_{i}"]
    api_names = ["cudaLaunchKernel_v7000", "cuLaunchKernel", "cudaMemcpyAsync_v3020",
                 "cudaMemsetAsync_v3020", "cudaStreamSynchronize_v3020"]
    api_base = len(strings) + 1
    strings += api_names
    nvtx_base = len(strings) + 1
    strings += [f"layer_{i}" for i in range(64)]
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)",
                    [(i + 1, s) for i, s in enumerate(strings)])
    con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
        ("EXPORT_PRODUCT_VERSION", "2024.2.3.38"), ("EXPORT_SCHEMA_VERSION", "3.11.1")])
    con.execute("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, "
                "clockRate INTEGER, memoryBandwidth INTEGER, smCount INTEGER, "
                "totalMemory INTEGER, l2CacheSize INTEGER, computeMajor INTEGER, "
                "computeMinor INTEGER, chipName TEXT, uuid TEXT)")
    con.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", [
        (0, d, "NVIDIA H100 80GB HBM3", 1980000000, 3352320000000, 132, 85520809984,
         52428800, 9, 0, "GH100", f"GPU-{d}") for d in range(2)])
    con.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER, name TEXT, label TEXT)")
    con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?,?,?)", [
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device")])
    con.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER, name TEXT, label TEXT)")
    con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?,?,?)", [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device")])

    n = kernels
    proc = rng.integers(0, 2, n)                      # process (and device) of each kernel
    pids = np.array([4242, 4243])
    gpid = (pids[proc].astype(np.int64) << 24)
    gtid = gpid | pids[proc]
    dur = rng.lognormal(9, 1.2, n).astype(np.int64) + 1000
    start = np.cumsum(rng.integers(500, 3000, n)).astype(np.int64) + 10_000_000
    corr = np.arange(1, n + 1, dtype=np.int64) * 2  # per-process ids: overlap on purpose
    name_idx = rng.zipf(1.3, n) % n_names
    dem = name_idx * 2 + 1
    zeros, ones = np.zeros(n, np.int64), np.ones(n, np.int64)
    kern = {"start": start, "end": start + dur, "deviceId": proc, "contextId": proc + 1,
            "streamId": rng.integers(0, 4, n) + 7, "correlationId": corr, "globalPid": gpid,
            "demangledName": dem, "shortName": dem + 1, "launchType": np.zeros(n, np.int64),
            "cacheConfig": zeros, "registersPerThread": rng.integers(16, 255, n),
            "gridX": rng.integers(1, 4096, n), "gridY": np.ones(n, np.int64),
            "gridZ": ones, "blockX": np.full(n, 256), "blockY": np.ones(n, np.int64),
            "blockZ": np.ones(n, np.int64), "staticSharedMemory": np.zeros(n, np.int64),
            "dynamicSharedMemory": rng.integers(0, 4, n) * 16384,
            "localMemoryPerThread": zeros, "localMemoryTotal": np.zeros(n, np.int64),
            "gridId": np.arange(n, dtype=np.int64), "sharedMemoryExecuted": np.full(n, 65536),
            "sharedMemoryLimitConfig": np.zeros(n, np.int64)}
    _create(con, "CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLS)
    _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLS, kern)
    launch = start - rng.integers(2000, 20000, n)
    driver = rng.random(n) < 0.1
    rt = {"start": launch, "end": launch + 1500, "eventClass": driver.astype(np.int64),
          "globalTid": gtid, "correlationId": corr,
          "nameId": np.where(driver, api_base + 1, api_base), "returnValue": np.zeros(n, np.int64)}
    sel = slice(0, n, 50)
    m = len(range(0, n, 50))
    mc = {"start": start[sel] + 5, "end": start[sel] + 5 + rng.integers(800, 90000, m),
          "deviceId": proc[sel], "contextId": proc[sel] + 1, "streamId": np.full(m, 7),
          "correlationId": corr[sel] + 1, "globalPid": gpid[sel],
          "bytes": rng.integers(4, 1 << 24, m), "copyKind": rng.choice([1, 2, 8], m),
          "srcKind": rng.integers(0, 3, m), "dstKind": np.full(m, 2)}
    sel2 = slice(0, n, 200)
    s = len(range(0, n, 200))
    ms = {"start": start[sel2] + 7, "end": start[sel2] + 900, "deviceId": proc[sel2],
          "contextId": proc[sel2] + 1, "streamId": np.full(s, 8),
          "correlationId": corr[sel2] + 1, "globalPid": gpid[sel2], "value": np.zeros(s, np.int64),
          "bytes": rng.integers(4, 1 << 20, s), "memKind": np.full(s, 2)}
    for part, api_off in ((mc, 2), (ms, 3)):
        rt = {k: np.concatenate([rt[k], v]) for k, v in {
            "start": part["start"] - 3000, "end": part["start"] - 1000,
            "eventClass": np.zeros(len(part["start"]), np.int64),
            "globalTid": part["globalPid"] | pids[part["deviceId"]],
            "correlationId": part["correlationId"],
            "nameId": np.full(len(part["start"]), api_base + api_off),
            "returnValue": np.zeros(len(part["start"]), np.int64)}.items()}
    _create(con, "CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLS)
    _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLS, mc)
    _create(con, "CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_COLS)
    _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", MEMSET_COLS, ms)
    _create(con, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLS)
    _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", RUNTIME_COLS, rt)
    sel3 = slice(0, n, 100)
    y = len(range(0, n, 100))
    sy = {"start": start[sel3] + dur[sel3], "end": start[sel3] + dur[sel3] + 5000,
          "deviceId": proc[sel3], "contextId": proc[sel3] + 1, "streamId": np.full(y, 7),
          "correlationId": corr[sel3] + 1, "globalPid": gpid[sel3], "syncType": np.full(y, 3),
          "eventId": np.full(y, 4294967295)}
    _create(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC_COLS)
    _insert(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", SYNC_COLS, sy)
    # NVTX: per 20 kernels an outer range with one nested range, on the launching thread
    sel4 = slice(0, n - 20, 20)
    o0 = start[sel4] - 10                       # properly nested and disjoint per group
    o1 = start[19:n:20][: len(o0)]
    v = len(o0)
    text_id = nvtx_base + rng.integers(0, 64, v)
    nv = {"start": np.concatenate([o0, o0 + 10]), "end": np.concatenate([o1, o1 - 10]),
          "eventType": np.full(2 * v, 59), "globalTid": np.concatenate([gtid[sel4]] * 2),
          "textId": np.concatenate([text_id, text_id]), "domainId": np.zeros(2 * v, np.int64)}
    _create(con, "NVTX_EVENTS", NVTX_COLS)
    _insert(con, "NVTX_EVENTS", NVTX_COLS, nv)
    con.commit()
    counts = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in (
        "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")}
    con.close()
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t = time.perf_counter()
    counts = generate(a.out, a.kernels, a.seed)
    print(f"wrote {a.out} in {time.perf_counter() - t:.1f} s: {counts}")


if __name__ == "__main__":
    main()
