"""Format detection and the one entry point :func:`load`.

Detection looks at content, not only the extension:

* a directory holding ``timeline.json`` -> a saved :class:`Timeline`;
* ``*.nsys-rep`` / ``*.qdrep`` -> an Nsight Systems report, exported to SQLite with the
  user's nsys (:mod:`traceparse.nsys.rep`);
* any other directory -> per-rank Kineto traces (``*.json``, ``*.json.gz``);
* ``SQLite format 3`` magic -> Nsight Systems SQLite export; gzipped, decompressed once
  into the cache directory (:mod:`traceparse.nsys.gz`);
* ``*.csv.gz`` -> gzipped Nsight Compute CSV;
* gzip magic, or text starting with ``{`` / ``[`` -> Kineto (PyTorch profiler) JSON;
* other text -> Nsight Compute CSV.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import polars as pl

from traceparse.cache import Cache, CacheArg, identity, resolve
from traceparse.derived_store import detach
from traceparse.errors import TraceError
from traceparse.nsys.rep import is_report
from traceparse.progress import Progress
from traceparse.timeline import Timeline

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"


def detect(path: str | os.PathLike[str]) -> str:
    """Return ``"timeline"``, ``"kineto-dir"``, ``"nsys-rep"``, ``"nsys-sqlite"``,
    ``"nsys-sqlite-gz"``, ``"kineto-json"`` or ``"ncu-csv"`` for ``path``; raise
    :class:`TraceError` if it cannot be read or is empty."""
    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    if p.is_dir():
        return "timeline" if (p / "timeline.json").is_file() else "kineto-dir"
    try:
        with open(p, "rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise TraceError(p, f"cannot read: {exc.strerror or exc}") from None
    if not head:
        raise TraceError(p, "empty file")
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if is_report(p):
        return "nsys-rep"
    if head.startswith(GZIP_MAGIC):
        if _gzipped_sqlite(p):
            return "nsys-sqlite-gz"
        return "ncu-csv" if p.name.lower().endswith(".csv.gz") else "kineto-json"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"[") or p.name.lower().endswith((".json", ".json.gz")):
        return "kineto-json"
    if p.suffix.lower() in (".sqlite", ".db", ".sqlite3"):
        raise TraceError(p, "not an SQLite database (bad header)")
    return "ncu-csv"


def _gzipped_sqlite(path: Path) -> bool:
    """True when ``path`` is a gzip stream whose content starts with SQLite's header (an
    unreadable stream is left to the reader that refuses it)."""
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, EOFError, zlib.error):
        return False


def load(path: str | os.PathLike[str], *, cache: CacheArg = None,
         tables: Collection[str] | None = None) -> Timeline:
    """Load any supported trace into a validated :class:`Timeline` (format detected).

    Args:
        path: an nsys SQLite export, a Kineto JSON (or a directory of per-rank ones), an
            Nsight Compute CSV, or a saved timeline directory.
        cache: None/False (default) parses every time; True uses the default cache
            directory; a path or a :class:`traceparse.cache.Cache` uses that cache. A cached
            timeline is returned when the input's identity (size, mtime, content hash,
            schema version) matches; otherwise the input is parsed and the cache filled.
        tables: the timeline tables the caller needs (None: all). Only an nsys SQLite
            export read without a cache honours it (:func:`traceparse.nsys.reader.read`: the
            ``api``, ``ranges``, ``metrics`` and ``memory`` tables left out are not read);
            with a cache the whole timeline is read (and cached), as for every other format.

    Raises:
        TraceError: the input is missing, unreadable, of an unknown kind or malformed.
    """
    kind = detect(path)
    if kind == "timeline":
        return Timeline.load(path)
    store = resolve(cache)
    key = identity(path, kind) if store is not None else None
    if store is not None and key is not None:
        hit = store.lookup(key)
        if hit is not None:
            # a table the entry cannot give back later: parse again, rebuild the entry next time
            hit.__dict__["_lazy_fallback"] = lambda: _reparse(hit, store, key, path, kind)
            return hit
    report = None
    if kind in ("nsys-rep", "nsys-sqlite-gz"):
        from traceparse.cache import default_dir
        from traceparse.nsys.gz import gunzip_sqlite
        from traceparse.nsys.rep import to_sqlite

        report = Path(path)
        convert = to_sqlite if kind == "nsys-rep" else gunzip_sqlite
        path = convert(path, store.directory if store is not None else default_dir())
        exported_from, kind = kind, "nsys-sqlite"
    with Progress(f"reading {Path(path).name}", nbytes=_input_bytes(path)):
        tl = _parse(path, kind, tables if store is None else None)
    if report is not None:  # name the user's file, not the export in the cache
        tl.sources = tl.sources.with_columns(pl.lit(report.name).alias("file"))
        tl.meta["file"] = report.name
        tl.meta["exported_from"] = exported_from
    if store is not None and key is not None:
        store.store(key, tl)
    return tl


def _reparse(hit: Timeline, store: Cache, key: dict[str, Any],
             path: str | os.PathLike[str], kind: str) -> Timeline:
    """The input parsed again for ``hit``, its unreadable cache entry dropped (rebuilt by the
    next load) and no derived value of that entry used or written any more."""
    detach(hit)
    store.drop(key)
    with Progress(f"reading {Path(path).name}", nbytes=_input_bytes(path)):
        return _parse(path, kind)


def _input_bytes(path: str | os.PathLike[str]) -> int:
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.iterdir() if f.is_file())
    return p.stat().st_size


def _parse(path: str | os.PathLike[str], kind: str,
           tables: Collection[str] | None = None) -> Timeline:
    if kind == "nsys-sqlite":
        from traceparse.nsys.reader import read as read_nsys

        return read_nsys(path, tables=tables)
    if kind in ("kineto-json", "kineto-dir"):
        from traceparse.kineto.ranks import read_dir as read_kineto_dir
        from traceparse.kineto.reader import read as read_kineto

        return read_kineto_dir(path) if kind == "kineto-dir" else read_kineto(path)
    from traceparse.ncu.reader import read as read_ncu

    return read_ncu(path)
