"""Chrome export: every memory event of the timeline is one counter event. Kinds not in the
device's own memory (Managed, Pinned, Pageable ...) go on their own track,
``memory not on the device (bytes)``, beside ``memory (bytes)`` (they used to be left out:
uvm-pytorch__report4's 359 cudaMallocManaged events, 20.57 GB, were not in the export).
"""

from __future__ import annotations

import json
import sqlite3

import polars as pl
import pytest

from tests.conftest import TRACES
from traceparse import schema
from traceparse.nsys import read
from traceparse.reports.chrome import to_chrome
from traceparse.timeline import Timeline

MB = 10**6


def _counters(tl: Timeline) -> dict[str, list[tuple[int, int]]]:
    doc = json.loads(to_chrome(tl, flows=False))
    base = doc["otherData"]["base_ns"]
    out: dict[str, list[tuple[int, int]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["name"].startswith("memory"):
            out.setdefault(e["name"], []).append((round(e["ts"] * 1000) + base,
                                                  e["args"]["allocated"]))
    return out


def test_managed_memory_gets_its_own_track() -> None:
    # device 0: Device +10 MB at 100, Managed +100 MB at 200, Device +5 MB at 300,
    # Managed -40 MB at 400 (nsys: bytes only, levels replayed)
    ev = [(100, 10 * MB, "Device"), (200, 100 * MB, "Managed"), (300, 5 * MB, "Device"),
          (400, -40 * MB, "Managed")]
    mem = schema.conform("memory", pl.DataFrame({
        "rank": [0] * 4, "device_id": [0] * 4, "ts_ns": [e[0] for e in ev],
        "kind": ["alloc" if e[1] > 0 else "free" for e in ev], "bytes": [e[1] for e in ev],
        "memory_kind": [e[2] for e in ev], "source": ["nsys"] * 4}))
    got = _counters(Timeline(memory=mem))
    # device level: 10, then 10 + 5 = 15; managed level: 100, then 100 - 40 = 60
    assert got == {"memory (bytes)": [(100, 10 * MB), (300, 15 * MB)],
                   "memory not on the device (bytes)": [(200, 100 * MB), (400, 60 * MB)]}


UVM = TRACES / "nsys" / "uvm-pytorch__report4.sqlite"


@pytest.mark.shared
def test_uvm_every_memory_event_is_a_counter() -> None:
    """Raw CUDA_GPU_MEMORY_USAGE_EVENTS (sqlite3): one counter per row; the not-on-device
    track is the running sum of the Managed/Pinned/Pageable/Unknown rows (memKind 0, 1, 4,
    6, 7; memoryOperationType 0 = alloc, 1 = free)."""
    con = sqlite3.connect(f"file:{UVM}?mode=ro", uri=True)
    total = con.execute("SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()[0]
    rows = con.execute("SELECT start, bytes, memoryOperationType FROM "
                       "CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind IN (0, 1, 4, 6, 7) "
                       "ORDER BY start").fetchall()
    con.close()
    level, want = 0, []
    for start, nbytes, op in rows:
        level += nbytes if op == 0 else -nbytes
        want.append((start, level))
    got = _counters(read(UVM))
    assert sum(len(v) for v in got.values()) == total == 4181
    assert got["memory not on the device (bytes)"] == want
    assert want[-1][1] == 20_568_866_816
