"""Parse once: a Parquet cache of parsed timelines keyed by the input's identity.

Parsing a 1 GB Nsight Systems export takes seconds; loading the same timeline back from
Parquet takes a small fraction of that. :func:`traceparse.load` (and so every CLI command)
consults a :class:`Cache` before parsing and fills it after.

Layout: one entry per input path, ``<cache dir>/<blake2b of the resolved path>/`` holding
``key.json`` (the identity the entry was built from) and ``timeline/`` (a
:meth:`Timeline.save` directory). An entry is used only when its ``key.json`` equals the
input's current identity, so a changed input is a miss and its entry is rebuilt in place
(the cache does not grow with every edit of the same file).

Identity (:func:`identity`) = cache format, schema version, traceparse version, input kind,
resolved path, and per input file its size, ``mtime_ns`` and a blake2b content hash:

* files up to :data:`FULL_HASH_BYTES` (16 MiB) are hashed whole (about 20 ms);
* larger files are hashed over :data:`SAMPLE_BLOCKS` blocks of :data:`SAMPLE_BLOCK_BYTES`
  spread evenly from the first to the last byte (4 MiB read whatever the size), plus the size.

Why sampled: hashing a 5 GB export whole costs ~5 s at blake2b's ~1 GB/s, more than the
parse the cache exists to skip and far above the 0.3 s a cached ``info`` should take. Size
and ``mtime_ns`` already change on every normal rewrite; the sampled hash additionally
catches a different trace copied over with its size and mtime preserved (``cp -p``,
``rsync -t``), since headers, string tables and the last pages differ between runs. It is
not a cryptographic guarantee against an adversarial file crafted to match: use
``--no-cache`` (or ``cache=None``) when that matters.

Speed: entries are uncompressed Parquet (reads ~40% faster than zstd; a 1M-kernel nsys
timeline is ~40 MB) and a hit checks column names and dtypes but not every value again (the
timeline was validated before it was stored).

Robustness: an entry is written to a temporary directory and renamed into place (readers
never see half an entry); an unreadable or corrupt entry is deleted and rebuilt; a cache
directory that cannot be written never fails the command (the timeline is returned
uncached).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceparse.atomic import atomic_path
from traceparse.derived_store import attach
from traceparse.timeline import Timeline

log = logging.getLogger(__name__)

#: Bump when the entry layout or the identity recipe changes, or when a parser's output for
#: the same input changes (2: Kineto ``[memory]`` events fill the ``memory`` table; 3: one
#: rank per nsys GPU process, osrt and cpu_sample ranges; 4: both of those together; 5: nsys
#: profiler_overhead ranges; 6: a Kineto process that sees one GPU describes the index its
#: activities carry, memory events too, ``traceparse.kineto.devices``; 7: a Kineto GPU event
#: without a stream, ``args.stream`` 4294967295, has a null ``stream_id``).
CACHE_FORMAT = 7
#: Files up to this size are hashed whole.
FULL_HASH_BYTES = 16 << 20
#: Larger files: this many evenly spaced blocks ...
SAMPLE_BLOCKS = 64
#: ... of this size are hashed.
SAMPLE_BLOCK_BYTES = 64 << 10
#: Environment variable naming the cache directory.
ENV_DIR = "TRACEPARSE_CACHE_DIR"

_KEY_FILE = "key.json"
_TIMELINE_DIR = "timeline"
_TRACE_SUFFIXES = (".json", ".json.gz")


def default_dir() -> Path:
    """The cache directory: ``$TRACEPARSE_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceparse``,
    else ``~/.cache/traceparse``."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "traceparse"


def content_hash(path: Path, size: int) -> str:
    """blake2b (128-bit) of the whole file when small, of sampled blocks when large.

    Example:
        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile() as f:
        ...     _ = f.write(b"abc"); f.flush()
        ...     content_hash(Path(f.name), 3) == hashlib.blake2b(b"abc", digest_size=16).hexdigest()
        True
    """
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        if size <= FULL_HASH_BYTES:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        else:
            h.update(size.to_bytes(8, "little"))
            last = size - SAMPLE_BLOCK_BYTES
            for i in range(SAMPLE_BLOCKS):
                fh.seek(last * i // (SAMPLE_BLOCKS - 1))
                h.update(fh.read(SAMPLE_BLOCK_BYTES))
    return h.hexdigest()


def _members(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir()
                      if p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES))
    return [path]


def identity(path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """The identity of input ``path`` of detected ``kind`` (see the module docstring).

    A directory's identity lists every trace file in it (name, size, mtime, hash), so adding,
    removing or changing one rank's file is a miss, and the names of its other entries (the
    accounting lists them as not read), so adding or removing one is a miss too.
    """
    from traceparse import schema
    from traceparse._version import __version__

    p = Path(path).resolve()
    files = []
    for f in _members(p):
        st = f.stat()
        files.append([f.name, st.st_size, st.st_mtime_ns, content_hash(f, st.st_size)])
    key = {"cache_format": CACHE_FORMAT, "schema_version": schema.SCHEMA_VERSION,
           "traceparse": __version__, "kind": kind, "path": str(p), "files": files}
    if p.is_dir():  # the entries not read are in the ingest accounting: their names count
        members = {row[0] for row in files}
        key["others"] = sorted(e.name for e in p.iterdir() if e.name not in members)
    return key


@dataclass(frozen=True)
class Cache:
    """A cache directory of parsed timelines.

    Attributes:
        directory: where entries live (created on first store).
    """

    directory: Path

    def entry(self, path: str | os.PathLike[str]) -> Path:
        """The entry directory for input ``path`` (one per resolved path)."""
        name = hashlib.blake2b(str(Path(path).resolve()).encode(), digest_size=16).hexdigest()
        return Path(self.directory) / name

    def lookup(self, key: dict[str, Any]) -> Timeline | None:
        """The cached timeline for identity ``key``, or None on a miss. A corrupt entry (bad
        JSON, missing or unreadable Parquet, schema mismatch) is deleted and is a miss."""
        entry = self.entry(key["path"])
        try:
            stored = json.loads((entry / _KEY_FILE).read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self._drop(entry)
            return None
        if stored != key:
            return None
        try:
            tl = Timeline.load(entry / _TIMELINE_DIR, lazy=True)
        except Exception as exc:  # any failure to read back = a corrupt entry: rebuild it
            log.debug("dropping corrupt cache entry %s: %s", entry, exc)
            self._drop(entry)
            return None
        attach(tl, entry)
        return tl

    def store(self, key: dict[str, Any], tl: Timeline) -> bool:
        """Write ``tl`` under identity ``key`` atomically; return False (never raise) when the
        cache directory cannot be written, the timeline cannot be saved, or it is partial
        (``meta["tables_not_read"]``: some tables were not read)."""
        if tl.meta.get("tables_not_read"):  # a partial read (traceparse.nsys.reader.read(tables=))
            log.debug("not caching a partial timeline of %s", key["path"])
            return False
        entry = self.entry(key["path"])
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(entry, directory=True) as tmp:
                tl.save(tmp / _TIMELINE_DIR, compression="uncompressed")
                (tmp / _KEY_FILE).write_text(json.dumps(key, indent=1))
        except Exception as exc:  # a cache that cannot be written must not fail the load
            log.debug("cache store failed for %s: %s", entry, exc)
            return False
        attach(tl, entry)
        return True

    def drop(self, key: dict[str, Any]) -> None:
        """Delete the entry of identity ``key`` (a later load rebuilds it)."""
        self._drop(self.entry(key["path"]))

    @staticmethod
    def _drop(entry: Path) -> None:
        shutil.rmtree(entry, ignore_errors=True)


CacheArg = Cache | bool | str | os.PathLike[str] | None


def resolve(cache: CacheArg) -> Cache | None:
    """Normalise the ``cache`` argument of :func:`traceparse.load`: None/False = no cache,
    True = the :func:`default_dir` cache, a path = a cache in that directory."""
    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache(default_dir())
    if isinstance(cache, Cache):
        return cache
    return Cache(Path(cache))
