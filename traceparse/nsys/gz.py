"""Gzipped Nsight Systems SQLite exports (``*.sqlite.gz``).

SQLite reads only files, so :func:`gunzip_sqlite` decompresses the export once into the
cache directory (``<cache dir>/nsys-gunzip/<hash of path, size, mtime>/<stem>.sqlite``,
written to a temporary name and renamed, so a half-written copy is never read) and returns
it; the input itself is only read. A truncated or corrupt stream is a :class:`TraceError`
naming the file, and so is one that inflates more than the Kineto reader's gzip-bomb ratio
(:data:`traceparse.kineto.io.MAX_RATIO` once 64 MiB are out; the H100 scenario exports
compress 4.6-10x).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from pathlib import Path

from traceparse.errors import TraceError
from traceparse.kineto.io import MAX_RATIO, bomb_ratio


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
        with open(src, "rb") as raw, gzip.GzipFile(fileobj=raw) as fh, open(tmp, "wb") as dst:
            out_bytes = 0
            while chunk := fh.read(1 << 20):
                dst.write(chunk)
                out_bytes += len(chunk)
                if (ratio := bomb_ratio(out_bytes, raw.tell())) is not None:
                    raise TraceError(src, f"gzip inflates {ratio}x (real exports stay under "
                                          f"{MAX_RATIO}x): refusing a possible gzip bomb")
    except TraceError:
        tmp.unlink(missing_ok=True)
        raise
    except (OSError, EOFError, zlib.error) as exc:
        tmp.unlink(missing_ok=True)
        why = "truncated gzip stream" if isinstance(exc, EOFError) else f"corrupt gzip: {exc}"
        raise TraceError(src, why) from None
    tmp.replace(out)
    return out
