"""Derived frames kept beside a cached timeline, so the next command on the same trace reads
the analysis set instead of computing it again.

:func:`traceparse.derived.cached` keeps a derived value (launch links, the default
attribution segments, the idle gaps, the savings replay, ...) on the Timeline object for the
life of one process. A timeline that came from (or was just written to) the parse cache
(:mod:`traceparse.cache`) also gets a :class:`DerivedStore`: a directory in its cache entry
where those values are written as Arrow IPC files once computed, and read back by the next
process. ``summary`` then ``report`` then ``gaps`` on one 1M-kernel export compute the
shared analysis set once.

When a stored value is used (all must hold, else the value is computed as usual):

* the timeline's tables the value depends on are still the objects loaded from the cache
  (an analysis that replaced ``tl.gpu`` gets a fresh computation);
* the value was written by the same code: the store lives in a subdirectory named by
  :func:`code_digest`, a hash of every traceparse source file and the polars version, so
  any code change (or upgrade) starts an empty store and the old one is deleted;
* the value is a DataFrame or a dict of DataFrames (the only kinds written) and its file
  reads back whole; an unreadable file is deleted and the value recomputed.

The cache entry itself is keyed by the input's identity (:func:`traceparse.cache.identity`),
and a changed input rebuilds the entry, derived directory included. ``--no-cache`` (or
``traceparse.load(path)`` without ``cache=``) has no store: nothing is read or written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.timeline import Timeline

log = logging.getLogger(__name__)

_SLOT = "_derived_store"
#: The token of a table still as the cache loaded it (read or not yet read: a
#: :class:`~traceparse.timeline.LazyTimeline` reads tables on first use); see
#: :func:`traceparse.derived.table_token`.
AS_LOADED = object()
#: Larger values are not written: per-row intermediates of a 1M-kernel trace (the busy
#: activities, the attribution's segment sets: 200+ MB each) would cost more disk than the
#: timeline and are needed again only when a value built from them is missing.
MAX_VALUE_BYTES = 32 << 20


@lru_cache(maxsize=1)
def code_digest() -> str:
    """blake2b of the traceparse sources (every ``.py`` under the package, symlinked
    subpackages followed) and the polars version: the code a stored value came from.

    Example:
        >>> len(code_digest()) == 32 and code_digest() == code_digest()
        True
    """
    root = Path(__file__).resolve().parent
    h = hashlib.blake2b(digest_size=16)
    h.update(pl.__version__.encode())
    files = []
    for base, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [Path(base) / n for n in names if n.endswith(".py")]
    for f in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


def _json_exact(value: dict[str, Any]) -> bool:
    """True when ``value`` survives JSON unchanged (no tuples, NaN, non-str keys, ...)."""
    try:
        return bool(json.loads(json.dumps(value, allow_nan=False)) == value)
    except (TypeError, ValueError):
        return False


def _frame_path(stem: Path, i: int) -> Path:
    """File of the ``i``-th frame of the value whose index file is ``stem``.json."""
    return stem.parent / f"{stem.name}.{i}.arrow"


def _file_name(name: str) -> str:
    return hashlib.blake2b(name.encode(), digest_size=12).hexdigest()


class DerivedStore:
    """The derived values of one cached timeline (see the module docstring).

    Attributes:
        directory: ``<cache entry>/derived/<code digest>``.
        origin: the table objects the timeline was loaded with, by name.
    """

    def __init__(self, entry_dir: Path, origin: dict[str, Any]) -> None:
        self.directory = entry_dir / code_digest()
        self.origin = origin
        self._pruned = False

    def usable(self, tokens: dict[str, object]) -> bool:
        """True when every table (by its :func:`traceparse.derived.table_token`) is still the
        one the cache entry holds."""
        return all(tok is AS_LOADED or (t in self.origin and tok is self.origin[t])
                   for t, tok in tokens.items())

    def read(self, name: str) -> Any:
        """The stored value ``name``, or None when absent or unreadable (then deleted)."""
        stem = self.directory / _file_name(name)
        try:
            meta = json.loads((stem.with_suffix(".json")).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._forget(stem)
            return None
        try:
            if meta.get("name") != name:  # a hash collision or a foreign file: not ours
                return None
            if meta["kind"] == "json":
                return meta["value"]
            if meta["kind"] == "frame":
                return pl.read_ipc(_frame_path(stem, 0))
            return {k: pl.read_ipc(_frame_path(stem, i)) for i, k in enumerate(meta["keys"])}
        except Exception as exc:  # a truncated or foreign file: recompute and rewrite
            log.debug("dropping unreadable derived value %s: %s", name, exc)
            self._forget(stem)
            return None

    def write(self, name: str, value: object) -> bool:
        """Store ``value`` under ``name`` when it is a frame, a dict of frames, or a JSON
        document that reads back equal (a report payload); never raise (a cache directory
        that cannot be written only means the next run computes)."""
        frames: list[tuple[str, pl.DataFrame]]
        meta: dict[str, Any]
        if isinstance(value, pl.DataFrame):
            frames, meta = [("", value)], {"name": name, "kind": "frame"}
        elif isinstance(value, dict) and value and all(
                isinstance(k, str) and isinstance(v, pl.DataFrame) for k, v in value.items()):
            frames = list(value.items())
            meta = {"name": name, "kind": "dict", "keys": [k for k, _ in frames]}
        elif isinstance(value, dict) and _json_exact(value):
            frames, meta = [], {"name": name, "kind": "json", "value": value}
        else:
            return False
        if sum(f.estimated_size() for _, f in frames) > MAX_VALUE_BYTES:
            return False
        stem = self.directory / _file_name(name)
        try:
            self._prune()
            self.directory.mkdir(parents=True, exist_ok=True)
            for i, (_, frame) in enumerate(frames):
                path = _frame_path(stem, i)
                tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                frame.write_ipc(tmp, compression="uncompressed")
                os.replace(tmp, path)
            # the index file last: a reader never sees a value whose frames are incomplete
            tmp = stem.with_name(f".{stem.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, stem.with_suffix(".json"))
        except Exception as exc:
            log.debug("derived value %s not stored: %s", name, exc)
            return False
        return True

    def _prune(self) -> None:
        """Delete stores written by other code versions (once per process)."""
        if self._pruned:
            return
        self._pruned = True
        parent = self.directory.parent
        if parent.is_dir():
            for old in parent.iterdir():
                if old.name != self.directory.name:
                    shutil.rmtree(old, ignore_errors=True)

    def _forget(self, stem: Path) -> None:
        for f in stem.parent.glob(f"{stem.name}*"):
            f.unlink(missing_ok=True)


def attach(tl: Timeline, entry_dir: Path) -> None:
    """Give ``tl`` (just loaded from or written to the cache entry ``entry_dir``) a store of
    derived values in ``entry_dir / "derived"``, tied to its current table objects (a lazily
    loaded timeline's tables count as the entry's until replaced)."""
    origin = {k: v for k, v in tl.__dict__.items() if k in schema.TABLES}
    tl.__dict__[_SLOT] = DerivedStore(entry_dir / "derived", origin)


def detach(tl: Timeline) -> None:
    """Stop reading and writing derived values of ``tl`` (its cache entry is gone)."""
    tl.__dict__.pop(_SLOT, None)


def store_of(tl: Timeline) -> DerivedStore | None:
    """The store attached to ``tl`` by :func:`attach`, if any."""
    store: DerivedStore | None = tl.__dict__.get(_SLOT)
    return store
