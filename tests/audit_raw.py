"""Independent raw readers for the conclusions audit (``test_conclusions_audit.py``):
``sqlite3`` on an nsys export, ``json`` on a Kineto file, never traceparse's readers; and
the small interval helpers the audit uses."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

SENTINEL = 4294967295


@dataclass
class Raw:
    """The events of one file: GPU activities, host calls and host ranges."""

    #: (pid, device, stream, start, end, kind, name, blocks, grid, block) per GPU activity
    gpu: list[tuple[int, int, int, int, int, str, str, int | None, str | None, str | None]] = \
        field(default_factory=list)
    #: (pid, tid, name, start, end) per host API call
    calls: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    #: (pid, tid, name, start, end) per host range (NVTX, OS runtime, ops, annotations ...)
    ranges: list[tuple[int, int, str, int, int]] = field(default_factory=list)
    #: (pid, tid) pairs that have CPU samples
    sampled: set[tuple[int, int]] = field(default_factory=set)
    #: (pid, stream, event, start, end) of stream-wait records: nsys synchronization rows
    #: with both a stream and an event; Kineto "Stream Wait Event" cuda_sync rows (pid -1)
    waits: list[tuple[int, int, int, int, int]] = field(default_factory=list)


# ----------------------------------------------------------------------------- readers


def _nsys(path: Path) -> Raw:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    cols = {t: {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')} for t in tables}
    strings = dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables \
        else {}
    raw = Raw()
    for t, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
                    ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                    ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if t not in tables:
            continue
        if kind == "kernel":
            nm = next(c for c in ("demangledName", "shortName", "mangledName") if c in cols[t])
            q = (f"SELECT globalPid, deviceId, streamId, start, end, {nm}, gridX, gridY, gridZ, "
                 f"blockX, blockY, blockZ FROM {t}")
        else:
            q = f"SELECT globalPid, deviceId, streamId, start, end FROM {t}"
        for r in con.execute(q):
            if r[3] is None or r[4] is None or r[4] < r[3]:
                continue
            name, blocks, grid, block = kind, None, None, None
            if kind == "kernel":
                name = strings.get(r[5], str(r[5])) if isinstance(r[5], int) else str(r[5])
                blocks = r[6] * r[7] * r[8]
                grid, block = f"{r[6]}x{r[7]}x{r[8]}", f"{r[9]}x{r[10]}x{r[11]}"
            raw.gpu.append(((r[0] >> 24) & 0xFFFFFF, r[1], r[2], r[3], r[4], kind, name,
                            blocks, grid, block))
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if t in tables:
            for g, s, e, n in con.execute(f"SELECT globalTid, start, end, nameId FROM {t}"):
                raw.calls.append(((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, strings.get(n, ""), s, e))
    if "NVTX_EVENTS" in tables:
        tid = "textId" if "textId" in cols["NVTX_EVENTS"] else "NULL"
        for g, s, e, text, text_id in con.execute(
                f"SELECT globalTid, start, end, text, {tid} FROM NVTX_EVENTS "
                "WHERE end IS NOT NULL AND eventType IN (59, 60, 70, 71)"):
            name = text if text is not None else strings.get(text_id, "")
            raw.ranges.append(((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, name, s, e))
    for t in ("OSRT_API", "PROFILER_OVERHEAD"):
        if t in tables and {"globalTid", "nameId"} <= cols[t]:
            for g, s, e, n in con.execute(f"SELECT globalTid, start, end, nameId FROM {t}"):
                if e is not None:
                    raw.ranges.append(((g >> 24) & 0xFFFFFF, g & 0xFFFFFF, strings.get(n, ""),
                                       s, e))
    sync = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    if sync in tables:
        for g, st, ev, s, e in con.execute(
                f"SELECT globalPid, streamId, eventId, start, end FROM {sync} "
                f"WHERE streamId != {SENTINEL} AND eventId != {SENTINEL}"):
            raw.waits.append(((g >> 24) & 0xFFFFFF, st, ev, s, e))
    if "COMPOSITE_EVENTS" in tables:
        for (g,) in con.execute("SELECT DISTINCT globalTid FROM COMPOSITE_EVENTS"):
            raw.sampled.add(((g >> 24) & 0xFFFFFF, g & 0xFFFFFF))
    con.close()
    return raw


_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
             "gpu_memset": "memset", "memset": "memset"}
_CALL_CATS = {"cuda_runtime", "runtime", "cuda_driver"}


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        m = re.search(r"\d+", str(v)) if v is not None else None
        return int(m.group()) if m else None


def _kineto(path: Path) -> Raw:
    with (gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")) as f:
        doc = json.loads(f.read(), parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    base = int(doc.get("baseTimeNanoseconds") or 0) if isinstance(doc, dict) else 0
    raw = Raw()
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("ts") is None \
                or e.get("dur") is None:
            continue
        cat = str(e.get("cat", "")).lower()
        s = base + round(Decimal(e["ts"]) * 1000)
        end = s + round(Decimal(e["dur"]) * 1000)
        a = e.get("args") or {}
        name = str(e.get("name", ""))
        if cat in _GPU_CATS:
            dev = _int(a.get("device"))
            dev = _int(e.get("pid")) if dev is None else dev
            stream = _int(a.get("stream"))
            stream = _int(e.get("tid")) if stream is None else stream
            grid, block, blocks = a.get("grid"), a.get("block"), None
            if isinstance(grid, list):
                blocks = int(np.prod(grid))
                grid = "x".join(map(str, grid))
            if isinstance(block, list):
                block = "x".join(map(str, block))
            raw.gpu.append((-1, dev or 0, stream or 0, s, end, _GPU_CATS[cat], name, blocks,
                            grid, block))
        elif cat == "cuda_sync" and a.get("wait_on_cuda_event_id") is not None:
            raw.waits.append((-1, _int(a.get("stream")) or 0,
                              _int(a.get("wait_on_cuda_event_id")) or 0, s, end))
        elif cat in _CALL_CATS:
            raw.calls.append((_int(e.get("pid")) or 0, _int(e.get("tid")) or 0, name, s, end))
        elif cat != "gpu_user_annotation":
            raw.ranges.append((_int(e.get("pid")) or 0, _int(e.get("tid")) or 0, name, s, end))
    return raw


def read_raw(path: Path) -> Raw:
    if path.name.endswith(".sqlite.gz"):  # the capture scripts' gzipped exports
        import gzip
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            plain = Path(tmp) / path.name.removesuffix(".gz")
            with gzip.open(path, "rb") as src, plain.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            return _nsys(plain)
    return _nsys(path) if path.suffix == ".sqlite" else _kineto(path)


# ------------------------------------------------------------------------ interval sums


def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _length(iv: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in iv)


def _clip(iv: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in iv if e > lo and s < hi]


def _intersect(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    out, j = 0, 0
    for s, e in a:
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            out += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return out


# -------------------------------------------------------------------------- the audit
