"""Gzipped Nsight Systems SQLite exports (``*.sqlite.gz``).

SQLite reads only files, so :func:`gunzip_sqlite` decompresses the export once into the
cache directory (``<cache dir>/nsys-gunzip/<hash of path, size, mtime>/<stem>.sqlite``,
written to a temporary name and renamed, so a half-written copy is never read) and returns
it; the input itself is only read. A truncated or corrupt stream is a :class:`TraceError`
naming the file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import zlib
from pathlib import Path

from traceparse.errors import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"


def is_gzipped_sqlite(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` is a gzip stream whose content starts with SQLite's header."""
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, EOFError, zlib.error):
        return False


def gunzip_sqlite(path: str | os.PathLike[str], cache_dir: Path) -> Path:
    """The decompressed copy of ``path`` under ``cache_dir`` (made once per version)."""
    src = Path(path)
    st = src.stat()
    key = f"{src.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    out_dir = cache_dir / "nsys-gunzip" / hashlib.blake2b(key, digest_size=16).hexdigest()
    stem = src.name[:-3] if src.name.lower().endswith(".gz") else src.name
    out = out_dir / (stem if stem.lower().endswith((".sqlite", ".db", ".sqlite3"))
                     else f"{stem}.sqlite")
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{out.name}.{os.getpid()}.tmp"
    try:
        with gzip.open(src, "rb") as fh, open(tmp, "wb") as dst:
            shutil.copyfileobj(fh, dst, 1 << 20)
    except (OSError, EOFError, zlib.error) as exc:
        tmp.unlink(missing_ok=True)
        why = "truncated gzip stream" if isinstance(exc, EOFError) else f"corrupt gzip: {exc}"
        raise TraceError(src, why) from None
    tmp.replace(out)
    return out
