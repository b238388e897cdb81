"""Write a scenario (:class:`~traceparse.samplegen.scenarios.Scenario`) as an nsys SQLite export.

The tables and columns follow what ``nsys export --type sqlite`` 2024.2 (export schema 3.11.1)
writes; see FORMATS.md section A. The DDL below was written for traceparse from the column
lists observed in real exports (names, order, types and NOT NULL constraints), without the
vendor's comments. Like a lazy export, activity tables are only created when they have rows;
the metadata, string, target-info and enum tables always exist.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from traceparse.atomic import atomic_path


class Scenario(Protocol):
    """What this writer reads of a :class:`traceparse.samplegen.scenarios.Scenario` (a protocol, so
    that ``samplegen`` imports this module and never the other way round)."""

    @property
    def pid(self) -> int: ...

    @property
    def threads(self) -> Sequence[tuple[int, str]]: ...

    @property
    def ranges(self) -> Sequence[Any]: ...

    def numbered_calls(self) -> Iterator[tuple[int, Any]]: ...

    def span_ns(self) -> tuple[int, int]: ...

NSYS_VERSION = "2024.2.3.38"
EXPORT_SCHEMA = "3.11.1"
VM_ID = 1 << 48          # globalVid of a single-host capture (VM id 1 in bits 48-55)
NO_ID = 4294967295       # unsigned sentinel for "no stream/event" in SYNCHRONIZATION rows
SESSION_EPOCH_NS = 1_763_800_000_000_000_000

INT, INN, T, R = "INTEGER", "INTEGER NOT NULL", "TEXT", "REAL"

_ENUM = [("id", "INTEGER NOT NULL PRIMARY KEY"), ("name", T), ("label", T)]

DDL: dict[str, list[tuple[str, str]]] = {
    "StringIds": [("id", "INTEGER NOT NULL PRIMARY KEY"), ("value", "TEXT NOT NULL")],
    "META_DATA_EXPORT": [("name", "TEXT NOT NULL"), ("value", T)],
    "TARGET_INFO_SESSION_START_TIME": [("utcEpochNs", INT), ("utcTime", T), ("localTime", T)],
    "ANALYSIS_DETAILS": [("globalVid", INN), ("duration", INN), ("startTime", INN),
                         ("stopTime", INN)],
    "PROCESSES": [("globalPid", INT), ("pid", INT), ("name", T)],
    "ThreadNames": [("nameId", INN), ("priority", INT), ("globalTid", INT)],
    "TARGET_INFO_GPU": [
        ("vmId", INN), ("id", INN), ("name", T), ("busLocation", T), ("isDiscrete", INT),
        ("l2CacheSize", INT), ("totalMemory", INT), ("memoryBandwidth", INT), ("clockRate", INT),
        ("smCount", INT), ("pwGpuId", INT), ("uuid", T), ("luid", INT), ("chipName", T),
        ("cuDevice", INT), ("ctxswDevPath", T), ("ctrlDevPath", T), ("revision", INT),
        ("nodeMask", INT), ("constantMemory", INT), ("maxIPC", INT), ("maxRegistersPerBlock", INT),
        ("maxShmemPerBlock", INT), ("maxShmemPerBlockOptin", INT), ("maxShmemPerSm", INT),
        ("maxRegistersPerSm", INT), ("threadsPerWarp", INT), ("asyncEngines", INT),
        ("maxWarpsPerSm", INT), ("maxBlocksPerSm", INT), ("maxThreadsPerBlock", INT),
        ("maxBlockDimX", INT), ("maxBlockDimY", INT), ("maxBlockDimZ", INT), ("maxGridDimX", INT),
        ("maxGridDimY", INT), ("maxGridDimZ", INT), ("computeMajor", INT), ("computeMinor", INT),
        ("smMajor", INT), ("smMinor", INT)],
    "TARGET_INFO_CUDA_STREAM": [("streamId", INN), ("hwId", INN), ("vmId", INN),
                                ("processId", INN), ("contextId", INN), ("priority", INN),
                                ("flag", INN)],
    "ENUM_NSYS_EVENT_TYPE": _ENUM,
    "ENUM_NSYS_EVENT_CLASS": _ENUM,
    "ENUM_CUDA_MEMCPY_OPER": _ENUM,
    "ENUM_CUDA_MEM_KIND": _ENUM,
    "ENUM_CUPTI_SYNC_TYPE": _ENUM,
    "CUPTI_ACTIVITY_KIND_RUNTIME": [
        ("start", INN), ("end", INN), ("eventClass", INN), ("globalTid", INT),
        ("correlationId", INT), ("nameId", INN), ("returnValue", INN), ("callchainId", INT)],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        ("start", INN), ("end", INN), ("deviceId", INN), ("contextId", INN),
        ("greenContextId", INT), ("streamId", INN), ("correlationId", INT), ("globalPid", INT),
        ("demangledName", INN), ("shortName", INN), ("mangledName", INT), ("launchType", INT),
        ("cacheConfig", INT), ("registersPerThread", INN), ("gridX", INN), ("gridY", INN),
        ("gridZ", INN), ("blockX", INN), ("blockY", INN), ("blockZ", INN),
        ("staticSharedMemory", INN), ("dynamicSharedMemory", INN),
        ("localMemoryPerThread", INN), ("localMemoryTotal", INN), ("gridId", INN),
        ("sharedMemoryExecuted", INT), ("graphNodeId", INT), ("sharedMemoryLimitConfig", INT)],
    "CUPTI_ACTIVITY_KIND_MEMCPY": [
        ("start", INN), ("end", INN), ("deviceId", INN), ("contextId", INN),
        ("greenContextId", INT), ("streamId", INN), ("correlationId", INT), ("globalPid", INT),
        ("bytes", INN), ("copyKind", INN), ("deprecatedSrcId", INT), ("srcKind", INT),
        ("dstKind", INT), ("srcDeviceId", INT), ("srcContextId", INT), ("dstDeviceId", INT),
        ("dstContextId", INT), ("migrationCause", INT), ("graphNodeId", INT),
        ("virtualAddress", INT)],
    "CUPTI_ACTIVITY_KIND_MEMSET": [
        ("start", INN), ("end", INN), ("deviceId", INN), ("contextId", INN),
        ("greenContextId", INT), ("streamId", INN), ("correlationId", INT), ("globalPid", INT),
        ("value", INN), ("bytes", INN), ("graphNodeId", INT), ("memKind", INT)],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": [
        ("start", INN), ("end", INN), ("deviceId", INN), ("contextId", INN),
        ("greenContextId", INT), ("streamId", INN), ("correlationId", INT), ("globalPid", INT),
        ("syncType", INN), ("eventId", INN)],
    "NVTX_EVENTS": [
        ("start", INN), ("end", INT), ("eventType", INN), ("rangeId", INT), ("category", INT),
        ("color", INT), ("text", T), ("globalTid", INT), ("endGlobalTid", INT), ("textId", INT),
        ("domainId", INT), ("uint64Value", INT), ("int64Value", INT), ("doubleValue", R),
        ("uint32Value", INT), ("int32Value", INT), ("floatValue", R), ("jsonTextId", INT),
        ("jsonText", T)],
}

#: ENUM_CUDA_MEMCPY_OPER: (id, symbol suffix, label); traceparse copy_kind = the short form.
MEMCPY_OPER = [(0, "UNKNOWN", "Unknown"), (1, "HTOD", "Host-to-Device"),
               (2, "DTOH", "Device-to-Host"), (3, "HTOA", "Host-to-Array"),
               (4, "ATOH", "Array-to-Host"), (5, "ATOA", "Array-to-Array"),
               (6, "ATOD", "Array-to-Device"), (7, "DTOA", "Device-to-Array"),
               (8, "DTOD", "Device-to-Device"), (9, "HTOH", "Host-to-Host"),
               (10, "PTOP", "Peer-to-Peer"), (11, "UVM_HTOD", "Unified Host-to-Device"),
               (12, "UVM_DTOH", "Unified Device-to-Host"),
               (13, "UVM_DTOD", "Unified Device-to-Device")]
#: ENUM_CUDA_MEM_KIND (nsys numbering, not CUPTI's).
MEM_KIND = [(0, "PAGEABLE", "Pageable"), (1, "PINNED", "Pinned"), (2, "DEVICE", "Device"),
            (3, "ARRAY", "Array"), (4, "MANAGED", "Managed"),
            (5, "DEVICE_STATIC", "Device Static"), (6, "MANAGED_STATIC", "Managed Static"),
            (7, "UNKNOWN", "Unknown")]
SYNC_TYPE = [(0, "UNKNOWN", "Unknown"), (1, "EVENT_SYNCHRONIZE", "Event sync"),
             (2, "STREAM_WAIT_EVENT", "Stream wait sync"),
             (3, "STREAM_SYNCHRONIZE", "Stream sync"),
             (4, "CONTEXT_SYNCHRONIZE", "Context sync")]
EVENT_CLASS = [(0, "CUDA_RUNTIME", "CUDA runtime"), (1, "CUDA_DRIVER", "CUDA driver"),
               (26, "CUDA_API", "CUDA API"), (27, "OS_RUNTIME", "OSRT runtime")]
EVENT_TYPE = [(33, "NvtxCategory"), (34, "NvtxMark"), (35, "NvtxPushRange"),
              (36, "NvtxPopRange"), (37, "NvtxStartRange"), (38, "NvtxEndRange"),
              (39, "NvtxThread"), (59, "NvtxPushPopRange"), (60, "NvtxStartEndRange"),
              (75, "NvtxDomainCreate"), (76, "NvtxDomainDestroy")]

#: The one GPU the samples pretend to run on (TARGET_INFO_GPU values).
GPU_INFO: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3", "busLocation": "0000:18:00.0", "isDiscrete": 1,
    "l2CacheSize": 52428800, "totalMemory": 85028601856, "memoryBandwidth": 3352320000000,
    "clockRate": 1980000000, "smCount": 132, "uuid": "5a0c1e2f-7d3b-4c11-9e60-1b2c3d4e5f60",
    "chipName": "GH100", "cuDevice": 0, "threadsPerWarp": 32, "asyncEngines": 3,
    "maxThreadsPerBlock": 1024, "maxWarpsPerSm": 64, "maxBlocksPerSm": 32,
    "maxShmemPerBlock": 49152, "maxShmemPerBlockOptin": 232448, "maxShmemPerSm": 233472,
    "maxRegistersPerBlock": 65536, "maxRegistersPerSm": 65536, "constantMemory": 65536,
    "computeMajor": 9, "computeMinor": 0, "smMajor": 9, "smMinor": 0,
}

MEMCPY_ID = {short: i for i, short in
             [(1, "HtoD"), (2, "DtoH"), (8, "DtoD"), (9, "HtoH"), (10, "PtoP")]}
MEM_KIND_ID = {label: i for i, _, label in MEM_KIND}
SYNC_ID = {"event": 1, "stream": 3, "context": 4}


def global_pid(pid: int) -> int:
    """nsys ``globalPid``: VM id in bits 48-55, the PID in bits 24-47, thread bits zero."""
    return VM_ID | (pid << 24)


def global_tid(pid: int, tid: int) -> int:
    """nsys ``globalTid``: :func:`global_pid` with the TID in bits 0-23."""
    return global_pid(pid) | tid


def create_table(db: sqlite3.Connection, table: str) -> None:
    """Create ``table`` from :data:`DDL`."""
    cols = ",\n".join(f"    {name:<28}{decl}" for name, decl in DDL[table])
    db.execute(f"CREATE TABLE {table} (\n{cols}\n)")


def insert(db: sqlite3.Connection, table: str, rows: Iterable[dict[str, Any]]) -> None:
    """Insert ``rows`` (dicts keyed by column; missing columns are NULL) into ``table``."""
    cols = [name for name, _ in DDL[table]]
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    db.executemany(sql, [tuple(r.get(c) for c in cols) for r in rows])


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids) + 1
        return self.ids[value]


def _enum_rows(rows: Sequence[tuple[int, str, str]], prefix: str) -> list[dict[str, Any]]:
    return [{"id": i, "name": prefix + sym, "label": label} for i, sym, label in rows]


def write(scenario: Scenario, path: str | os.PathLike[str]) -> Path:
    """Write ``scenario`` as an nsys SQLite export at ``path`` (atomically, replacing it)."""
    target = Path(path)
    with atomic_path(target) as tmp:
        db = sqlite3.connect(tmp)
        try:
            _fill(db, scenario, target.name)
            db.commit()
        finally:
            db.close()
    return target


def _fill(db: sqlite3.Connection, sc: Scenario, file_name: str) -> None:
    sid = _Strings()
    pid = sc.pid
    gpid = global_pid(pid)
    runtime, kernels, copies, sets, syncs, nvtx = [], [], [], [], [], []
    streams: set[tuple[int, int]] = set()
    for corr, call in sc.numbered_calls():
        gtid = global_tid(pid, call.tid or pid)
        runtime.append({"start": call.start_ns, "end": call.end_ns,
                        "eventClass": 1 if call.is_driver else 0, "globalTid": gtid,
                        "correlationId": corr, "nameId": sid(call.api), "returnValue": 0})
        a = call.activity
        if call.sync is not None:
            syncs.append({"start": call.start_ns, "end": call.end_ns, "deviceId": 0,
                          "contextId": 1, "streamId": NO_ID if call.sync_stream is None
                          else call.sync_stream, "correlationId": corr, "globalPid": gpid,
                          "syncType": SYNC_ID[call.sync], "eventId": NO_ID})
        if a is None:
            continue
        streams.add((a.device, a.stream))
        common = {"start": a.start_ns, "end": a.start_ns + a.dur_ns, "deviceId": a.device,
                  "contextId": 1, "streamId": a.stream, "correlationId": corr,
                  "globalPid": gpid}
        if a.kind == "kernel":
            kernels.append({**common, "demangledName": sid(a.name),
                            "shortName": sid(a.short_name), "launchType": 0,
                            "cacheConfig": 0, "registersPerThread": a.registers,
                            "gridX": a.grid[0], "gridY": a.grid[1], "gridZ": a.grid[2],
                            "blockX": a.block[0], "blockY": a.block[1], "blockZ": a.block[2],
                            "staticSharedMemory": a.static_smem,
                            "dynamicSharedMemory": a.dynamic_smem,
                            "localMemoryPerThread": 0, "localMemoryTotal": 0,
                            "gridId": corr, "sharedMemoryExecuted": 0,
                            "sharedMemoryLimitConfig": 0})
        elif a.kind == "memcpy":
            copies.append({**common, "bytes": a.bytes, "copyKind": MEMCPY_ID[a.copy_kind],
                           "srcKind": MEM_KIND_ID[a.src_kind],
                           "dstKind": MEM_KIND_ID[a.dst_kind], "srcDeviceId": a.device,
                           "srcContextId": 1, "dstDeviceId": a.device, "dstContextId": 1})
        else:
            sets.append({**common, "value": 0, "bytes": a.bytes,
                         "memKind": MEM_KIND_ID[a.dst_kind]})
    for r in sc.ranges:
        nvtx.append({"start": r.start_ns, "end": r.end_ns, "eventType": 59, "text": r.name,
                     "globalTid": global_tid(pid, r.tid or pid)})
    stop = sc.span_ns()[1]

    tables: list[tuple[str, list[dict[str, Any]]]] = [
        ("META_DATA_EXPORT", [{"name": k, "value": v} for k, v in _meta(file_name)]),
        ("TARGET_INFO_SESSION_START_TIME", [{"utcEpochNs": SESSION_EPOCH_NS,
                                             "utcTime": "2025-11-22T08:26:40",
                                             "localTime": "2025-11-22T08:26:40"}]),
        ("ANALYSIS_DETAILS", [{"globalVid": VM_ID, "duration": stop + 1_000_000,
                               "startTime": 0, "stopTime": stop + 1_000_000}]),
        ("PROCESSES", [{"globalPid": gpid, "pid": pid, "name": "python3"}]),
        ("ThreadNames", [{"nameId": sid(name), "priority": 10,
                          "globalTid": global_tid(pid, tid)} for tid, name in sc.threads]),
        ("TARGET_INFO_GPU", [{**GPU_INFO, "vmId": VM_ID, "id": 0, "pwGpuId": 0, "luid": 0}]),
        ("TARGET_INFO_CUDA_STREAM", [{"streamId": s, "hwId": 0, "vmId": 1, "processId": pid,
                                      "contextId": 1, "priority": 0, "flag": 2}
                                     for _, s in sorted(streams)]),
        ("ENUM_NSYS_EVENT_TYPE", [{"id": i, "name": n, "label": n} for i, n in EVENT_TYPE]),
        ("ENUM_NSYS_EVENT_CLASS", _enum_rows(EVENT_CLASS, "TRACE_PROCESS_EVENT_")),
        ("ENUM_CUDA_MEMCPY_OPER", _enum_rows(MEMCPY_OPER, "CUDA_MEMCPY_KIND_")),
        ("ENUM_CUDA_MEM_KIND", _enum_rows(MEM_KIND, "CUDA_MEMOPR_MEMORY_KIND_")),
        ("ENUM_CUPTI_SYNC_TYPE", _enum_rows(SYNC_TYPE, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_")),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", runtime),
        ("CUPTI_ACTIVITY_KIND_KERNEL", kernels),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", copies),
        ("CUPTI_ACTIVITY_KIND_MEMSET", sets),
        ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", syncs),
        ("NVTX_EVENTS", nvtx),
    ]
    create_table(db, "StringIds")
    for table, rows in tables:
        if rows or not table.startswith(("CUPTI_", "NVTX_")):  # lazy export
            create_table(db, table)
            insert(db, table, rows)
    insert(db, "StringIds", [{"id": i, "value": v} for v, i in sid.ids.items()])


def _meta(file_name: str) -> list[tuple[str, str]]:
    major, minor, micro = EXPORT_SCHEMA.split(".")
    return [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", NSYS_VERSION), ("EXPORT_PRODUCT_DATE", "2024.2"),
            ("EXPORT_SCHEMA_VERSION", EXPORT_SCHEMA), ("EXPORT_SCHEMA_VERSION_MAJOR", major),
            ("EXPORT_SCHEMA_VERSION_MINOR", minor), ("EXPORT_SCHEMA_VERSION_MICRO", micro),
            ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"),
            ("EXPORT_PARAM_OUTUPT_FILE", file_name), ("EXPORT_PARAM_LAZY", "true"),
            ("EXPORT_PARAM_TIME_NORMALIZE", "false"), ("EXPORT_PARAM_TIME_SHIFT", "0"),
            ("EXPORT_GENERATOR", "traceparse.samplegen (synthetic sample)")]
