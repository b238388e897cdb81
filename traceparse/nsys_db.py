"""Read-only access to an Nsight Systems SQLite export: probing and bulk reads.

Everything here is format plumbing shared by :mod:`traceparse.nsys`:

* :class:`NsysDB` opens the file **read-only** through a ``file:...?mode=ro`` URI (the
  file's bytes and mtime are never touched), checks that it is an nsys export, and caches
  the table list (``sqlite_master``) and column lists (``PRAGMA table_info``).
* :meth:`NsysDB.frame` runs one ``SELECT`` and returns a polars frame. Bulk reads go through
  ADBC (``adbc-driver-sqlite``: SQLite -> Arrow without Python objects, about 2.3x faster
  than ``sqlite3.fetchall`` on the kernel table, see ``benchmarks/bench_nsys_ingest.py``).
  ADBC infers each column's type from the first batch, so a column that starts with NULLs
  and later holds text fails there; such queries fall back to ``sqlite3`` transparently.

Columns are always addressed by name (never by position) and values reach SQL only as
``?`` parameters; identifiers come from the file's own ``sqlite_master`` after a check.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import polars as pl

from traceparse.errors import TraceError

#: Tables whose presence marks a file as an Nsight Systems export.
NSYS_MARKER_TABLES = ("StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_GPU",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")
#: Export-metadata table names (2022.x and older / 2023+).
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
#: Tables with at least this many rows are read in parallel rowid chunks.
PARALLEL_MIN_ROWS = 200_000


def _uri(path: Path) -> str:
    return "file:" + quote(str(path.resolve()), safe="/") + "?mode=ro"


def q(ident: str) -> str:
    """Quote an SQL identifier that was read from the file's own schema."""
    return '"' + ident.replace('"', '""') + '"'


class NsysDB:
    """An open, read-only nsys SQLite export.

    Args:
        path: the ``.sqlite`` file.
        use_adbc: read bulk queries through ADBC (default) or only through ``sqlite3``.

    Raises:
        TraceError: not a file, not an SQLite database, truncated/corrupt, or an SQLite
            database without any Nsight Systems table.
    """

    def __init__(self, path: str | os.PathLike[str], *, use_adbc: bool = True) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise TraceError(self.path, "is a directory, not an Nsight Systems SQLite export")
        if not self.path.is_file():
            raise TraceError(self.path, "no such file")
        if self.path.stat().st_size == 0:
            raise TraceError(self.path, "empty file")
        self.uri = _uri(self.path)
        try:
            self.con = sqlite3.connect(self.uri, uri=True)
            rows = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(self.path, f"not a readable SQLite database ({exc})") from None
        self.tables: set[str] = {r[0] for r in rows}
        if not self.tables & set(NSYS_MARKER_TABLES):
            raise TraceError(self.path, "SQLite database without Nsight Systems tables "
                                        "(no StringIds, META_DATA_EXPORT or CUPTI_* table)")
        self._columns: dict[str, list[str]] = {}
        self._adbc: Any = None
        self.use_adbc = use_adbc

    # ------------------------------------------------------------------ probing
    def has(self, table: str) -> bool:
        """True if ``table`` exists (lazy exports omit empty tables)."""
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` from ``PRAGMA table_info`` ([] if absent)."""
        if table not in self.tables:
            return []
        if table not in self._columns:
            rows = self._exec(f"PRAGMA table_info({q(table)})", ())
            self._columns[table] = [r[1] for r in rows]
        return self._columns[table]

    def count(self, table: str) -> int:
        """Row count of ``table`` (0 if absent)."""
        if table not in self.tables:
            return 0
        return int(self._exec(f"SELECT COUNT(*) FROM {q(table)}", ())[0][0])

    def meta(self) -> dict[str, str]:
        """Key/value pairs of the export-metadata table (either name), {} if none."""
        for t in META_TABLES:
            cols = self.columns(t)
            if "name" in cols and "value" in cols:
                return {str(k): str(v) for k, v in
                        self._exec(f"SELECT name, value FROM {q(t)}", ())}
        return {}

    def _exec(self, sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(self.path, f"corrupt or truncated SQLite file ({exc})") from None

    # ------------------------------------------------------------------ bulk reads
    def frame(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        """Run ``sql`` and return the result as a polars frame (ADBC, else sqlite3)."""
        if self.use_adbc:
            try:
                return self._frame_adbc(sql, params)
            except TraceError:
                raise
            except Exception:  # type inference failure or driver problem: use sqlite3
                pass
        return self._frame_sqlite(sql, params)

    def table_frame(self, table: str, select: str, *, workers: int | None = None
                    ) -> pl.DataFrame:
        """``SELECT {select} FROM {table}``, in rowid chunks read by parallel threads.

        Large tables are split into ``workers`` contiguous rowid ranges, each read on its
        own read-only ADBC connection (the driver releases the GIL), and concatenated in
        rowid order, i.e. the same rows in the same order as one plain SELECT.
        """
        sql = f"SELECT {select} FROM {q(table)}"
        n = self.count(table)
        workers = workers or min(os.cpu_count() or 1, 4)
        if not self.use_adbc or workers < 2 or n < PARALLEL_MIN_ROWS:
            return self.frame(sql)
        try:
            lo, hi = self._exec(f"SELECT MIN(rowid), MAX(rowid) FROM {q(table)}", ())[0]
        except TraceError:
            return self.frame(sql)
        if lo is None:
            return self.frame(sql)
        step = (hi - lo) // workers + 1
        bounds = [(lo + i * step, min(lo + (i + 1) * step - 1, hi)) for i in range(workers)]
        chunk_sql = sql + " WHERE rowid BETWEEN ? AND ?"

        def read(b: tuple[int, int]) -> pl.DataFrame:
            part = NsysDB(self.path, use_adbc=True)
            try:
                return part._frame_adbc(chunk_sql, b)
            finally:
                part.close()

        try:
            with ThreadPoolExecutor(workers) as ex:
                parts = list(ex.map(read, bounds))
            return pl.concat(parts, how="vertical_relaxed", rechunk=False)
        except Exception:  # chunk type inference differs, odd schema: one plain read
            return self.frame(sql)

    def _frame_adbc(self, sql: str, params: Sequence[Any]) -> pl.DataFrame:
        import adbc_driver_sqlite.dbapi as adbc

        if self._adbc is None:
            self._adbc = adbc.connect(self.uri)
        cur = self._adbc.cursor()
        try:
            cur.execute(sql, parameters=tuple(params) if params else None)
            table = cur.fetch_arrow_table()
        finally:
            cur.close()
        out = pl.from_arrow(table, rechunk=False)
        assert isinstance(out, pl.DataFrame)
        return out

    def _frame_sqlite(self, sql: str, params: Sequence[Any]) -> pl.DataFrame:
        try:
            cur = self.con.execute(sql, tuple(params))
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except sqlite3.DatabaseError as exc:
            raise TraceError(self.path, f"corrupt or truncated SQLite file ({exc})") from None
        if not rows:
            return pl.DataFrame({n: pl.Series(n, [], dtype=pl.Int64) for n in names})
        cols = list(zip(*rows, strict=True))
        data = {}
        for n, vals in zip(names, cols, strict=True):
            col = pl.Series(n, vals, strict=False)
            # an all-NULL column has no type; nsys's nullable columns are mostly integer ids
            data[n] = col.cast(pl.Int64) if col.dtype == pl.Null else col
        return pl.DataFrame(data)

    def close(self) -> None:
        """Close both connections."""
        if self._adbc is not None:
            self._adbc.close()
            self._adbc = None
        self.con.close()

    def __enter__(self) -> NsysDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
