"""Read-only access to an Nsight Systems SQLite export: probing and bulk reads.

Everything here is format plumbing shared by :mod:`traceparse.nsys`:

* :class:`NsysDB` opens the file **read-only** through a ``file:...?mode=ro`` URI (the
  file's bytes and mtime are never touched), checks that it is an nsys export, and caches
  the table list (``sqlite_master``) and column lists (``PRAGMA table_info``). A database
  in WAL mode would make SQLite create ``-shm``/``-wal`` files beside the input even for a
  read-only reader; such a file is opened ``immutable=1`` when it has no ``-wal`` file, and
  otherwise from a private copy (database + its ``-wal``) in a temporary directory, so
  nothing is ever written next to the user's file.
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
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import polars as pl

from traceparse.errors import NotATrace, TraceError

R = TypeVar("R")

#: Tables whose presence marks a file as an Nsight Systems export.
NSYS_MARKER_TABLES = ("StringIds", "META_DATA_EXPORT", "EXPORT_META_DATA", "TARGET_INFO_GPU",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")
#: Export-metadata table names (2022.x and older / 2023+).
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
#: Tables with at least this many rows are read in parallel rowid chunks ...
PARALLEL_MIN_ROWS = 200_000
#: ... of about this many rows each (at least one per worker thread).
BATCH_ROWS = 1 << 17
#: Rows per Arrow batch of an ADBC result (the driver's default is 1024: ngp17's kernel read
#: then costs about 10% more CPU, in 8x more chunks). The column types are inferred from
#: the first batch.
ADBC_BATCH_ROWS = 1 << 16
#: Columns a GPU activity table must have, even when it holds no rows (a table without them
#: is not an nsys export layout this reader knows).
ACTIVITY_COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "bytes"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "bytes"),
}
#: A kernel table must also have at least one of these name columns (StringIds ids).
KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")


def _uri(path: Path, *, immutable: bool = False) -> str:
    return ("file:" + quote(str(path.resolve()), safe="/") + "?mode=ro"
            + ("&immutable=1" if immutable else ""))


def is_wal(path: Path) -> bool:
    """True if the SQLite header says the database is in WAL mode (read/write format
    version 2 at bytes 18-19)."""
    with open(path, "rb") as fh:
        head = fh.read(20)
    return (len(head) == 20 and head.startswith(b"SQLite format 3\x00")
            and 2 in (head[18], head[19]))


def _private_copy(path: Path) -> Path:
    """Copy a WAL-mode database and its ``-wal`` file into a fresh temporary directory."""
    tmp = Path(tempfile.mkdtemp(prefix="traceparse-wal-"))
    shutil.copyfile(path, tmp / "db.sqlite")
    wal = path.with_name(path.name + "-wal")
    if wal.exists():
        shutil.copyfile(wal, tmp / "db.sqlite-wal")
    return tmp / "db.sqlite"


def q(ident: str) -> str:
    """Quote an SQL identifier that was read from the file's own schema."""
    return '"' + ident.replace('"', '""') + '"'


def _check_header(path: Path) -> None:
    """Refuse a file cut short: the SQLite header's page size x page count (valid when the
    "version-valid-for" field equals the change counter) must fit in the file."""
    with open(path, "rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return  # sqlite3 itself reports these
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise TraceError(path, f"corrupt SQLite header (page size {page_size})")
    counter, pages, valid_for = (int.from_bytes(head[i:i + 4], "big") for i in (24, 28, 92))
    size = path.stat().st_size
    if pages and counter == valid_for and page_size * pages > size:
        raise TraceError(path, f"truncated SQLite file: its header says {page_size * pages} "
                               f"bytes ({pages} pages), the file has {size}")
    if size % page_size:
        raise TraceError(path, f"truncated SQLite file: {size} bytes is not a whole number "
                               f"of {page_size}-byte pages")


class AdbcConnection:
    """A read-only ADBC SQLite connection used through the driver manager's own API: results
    come as Arrow C streams that polars imports directly, so neither pyarrow nor the DB-API
    layer is imported (about 0.15 s of a command's start). Other threads keep running while
    a read steps through SQLite (measured: the GIL is not held for the read).

    Args:
        uri: an SQLite ``file:`` URI.
    """

    def __init__(self, uri: str) -> None:
        import adbc_driver_manager
        import adbc_driver_sqlite

        self._manager = adbc_driver_manager
        self._db = adbc_driver_sqlite.connect(uri)
        try:
            self._con = adbc_driver_manager.AdbcConnection(self._db)
        except BaseException:
            self._db.close()
            raise

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pl.DataFrame:
        """Run ``sql`` with integer ``params`` bound to its ``?``; the result as a frame.

        Raises:
            TypeError: a parameter that is not an ``int`` (the caller uses ``sqlite3``).
        """
        if any(type(p) is not int for p in params):
            raise TypeError("the ADBC path binds int parameters only")
        stmt = self._manager.AdbcStatement(self._con)
        try:
            stmt.set_options(**{"adbc.sqlite.query.batch_rows": str(ADBC_BATCH_ROWS)})
            stmt.set_sql_query(sql)
            if params:
                stmt.bind_stream(pl.DataFrame({f"p{i}": [p] for i, p in enumerate(params)}))
            stream, _ = stmt.execute_query()
            return _utf8(pl.DataFrame(stream))
        finally:
            stmt.close()

    def close(self) -> None:
        """Close the connection and the database handle."""
        self._con.close()
        self._db.close()


def _utf8(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the invalid UTF-8 of its text columns replaced by U+FFFD, as the
    ``sqlite3`` path decodes it: SQLite stores TEXT as the writer gave it and the ADBC
    driver passes the bytes through, but a polars String must be UTF-8 (turning such a
    value into a Python string aborts the process). The bytes are checked by polars' own
    cast from Binary (importing pyarrow to validate them cost ~0.1 s a read)."""
    for c, dt in frame.schema.items():
        if dt != pl.String:
            continue
        if not _valid_utf8(frame[c]):
            fixed = [None if b is None else b.decode("utf-8", "replace")
                     for b in frame[c].cast(pl.Binary).to_list()]
            frame = frame.with_columns(pl.Series(c, fixed, dtype=pl.String))
    return frame


def _valid_utf8(col: pl.Series) -> bool:
    """Whether every value of the String ``col`` is valid UTF-8 (the cast from Binary
    raises, or gives null, on a value that is not)."""
    try:
        back = col.cast(pl.Binary).cast(pl.String, strict=False)
    except pl.exceptions.PolarsError:
        return False
    return back.null_count() == col.null_count()


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
        _check_header(self.path)
        self._copy: Path | None = None
        self._adbc: AdbcConnection | None = None
        self._columns: dict[str, list[str]] = {}
        self._counts: dict[str, int] = {}
        self.use_adbc = use_adbc
        if not is_wal(self.path):
            self.uri = _uri(self.path)
        elif not self.path.with_name(self.path.name + "-wal").exists():
            self.uri = _uri(self.path, immutable=True)  # nothing to replay: no side files
        else:  # committed pages may still sit in the -wal: read a private copy of both
            self._copy = _private_copy(self.path)
            self.uri = _uri(self._copy)
        try:
            self._connect()
        except BaseException:
            self._discard_copy()
            raise

    def _connect(self) -> None:
        try:
            self.con = sqlite3.connect(self.uri, uri=True)
            # text that is not UTF-8 (a corrupt or foreign file) decodes with U+FFFD
            self.con.text_factory = lambda b: b.decode("utf-8", "replace")
            rows = self.con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        except UnicodeDecodeError:  # SQLite's error message quoting non-UTF-8 schema text
            raise TraceError(self.path, "corrupt SQLite file (non-UTF-8 bytes in its "
                                        "schema)") from None
        except sqlite3.DatabaseError as exc:
            problem = "corrupt or truncated SQLite file" if "malformed" in str(exc) \
                else "not a readable SQLite database"
            raise TraceError(self.path, f"{problem} ({exc})") from None
        self.tables: set[str] = {r[0] for r in rows}
        if not self.tables & set(NSYS_MARKER_TABLES):
            raise NotATrace(self.path, "SQLite database without Nsight Systems tables "
                                        "(no StringIds, META_DATA_EXPORT or CUPTI_* table)")

    def _discard_copy(self) -> None:
        if self._copy is not None:
            shutil.rmtree(self._copy.parent, ignore_errors=True)
            self._copy = None

    # ------------------------------------------------------------------ probing
    def has(self, table: str) -> bool:
        """True if ``table`` exists (lazy exports omit empty tables)."""
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` from ``PRAGMA table_info`` ([] if absent)."""
        if table not in self.tables:
            return []
        if table not in self._columns:
            rows = self.fetchall(f"PRAGMA table_info({q(table)})", ())
            self._columns[table] = [r[1] for r in rows]
        return self._columns[table]

    def count(self, table: str) -> int:
        """Row count of ``table`` (0 if absent)."""
        if table not in self.tables:
            return 0
        if table not in self._counts:  # a scan of the whole table: once per table
            self._counts[table] = int(self.fetchall(f"SELECT COUNT(*) FROM {q(table)}", ())[0][0])
        return self._counts[table]

    def has_rows(self, table: str) -> bool:
        """True if ``table`` exists and holds a row (stops at the first; no count)."""
        if table not in self.tables:
            return False
        if table in self._counts:
            return self._counts[table] > 0
        return bool(self.fetchall(f"SELECT EXISTS (SELECT 1 FROM {q(table)})", ())[0][0])

    def meta(self) -> dict[str, str]:
        """Key/value pairs of the export-metadata table (either name), {} if none."""
        for t in META_TABLES:
            cols = self.columns(t)
            if "name" in cols and "value" in cols:
                return {str(k): str(v) for k, v in
                        self.fetchall(f"SELECT name, value FROM {q(t)}", ())}
        return {}

    def fetchall(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of ``sql`` with ``?`` parameters ``params``.

        Raises:
            TraceError: the file is corrupt or truncated.
        """
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise TraceError(self.path, f"corrupt or truncated SQLite file ({exc})") from None

    def require_activity(self, table: str) -> None:
        """Raise :class:`TraceError` unless GPU activity ``table`` (when it exists) has the
        columns of :data:`ACTIVITY_COLUMNS` (and a kernel table a name column), whether or
        not it holds rows."""
        if not self.has(table):
            return
        self.require(table, ACTIVITY_COLUMNS.get(table, ("start", "end")))
        if table.endswith("_KERNEL") and not set(KERNEL_NAME_COLUMNS) & set(
                self.columns(table)):
            raise TraceError(self.path, f"{table} has no kernel name column (one of "
                                        f"{', '.join(KERNEL_NAME_COLUMNS)}): not an nsys "
                                        "export layout this reader knows")

    def require(self, table: str, columns: Sequence[str]) -> None:
        """Raise :class:`TraceError` unless ``table`` has every column in ``columns``."""
        have = set(self.columns(table))
        for c in columns:
            if c not in have:
                raise TraceError(self.path, f"{table} has no {c!r} column (not an nsys export "
                                            "layout this reader knows)")

    def check_int(self, frame: pl.DataFrame, table: str, columns: Sequence[str]) -> None:
        """Raise :class:`TraceError` if a time column came back as anything but integers
        (SQLite is dynamically typed: an INT column can hold text or reals)."""
        for c in columns:
            if c in frame.columns and not (frame[c].dtype.is_integer()
                                           or frame[c].dtype == pl.Null):
                bad = [v for v in frame[c].drop_nulls().to_list()
                       if not (isinstance(v, int) or (isinstance(v, str)
                                                      and v.lstrip("-").isdigit()))]
                example = repr(bad[0])[:40] if bad else "?"
                raise TraceError(self.path, f"{table}: {c.removesuffix('_ns')} is not an "
                                            f"integer in some rows (e.g. {example})")

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
        """``SELECT {select} FROM {table}`` as one frame, read as :meth:`table_chunks`."""
        parts = self.table_chunks(table, select, lambda f: f, workers=workers)
        return parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical_relaxed",
                                                          rechunk=False)

    def table_chunks(self, table: str, select: str, transform: Callable[[pl.DataFrame], R],
                     *, workers: int | None = None) -> list[R]:
        """``transform`` of ``SELECT {select} FROM {table}`` in rowid order, chunk by chunk.

        A large table (a rowid span of :data:`PARALLEL_MIN_ROWS` or more) is read in
        contiguous rowid ranges of about :data:`BATCH_ROWS` rows by ``workers`` threads,
        each range on its own read-only ADBC connection (:class:`AdbcConnection`), and
        ``transform`` runs on each range as it arrives: only the transformed chunks and the
        ranges in flight are held, never the whole raw table. The chunks together are the
        rows of one plain SELECT, in its order. Otherwise (a small table, ``sqlite3`` only,
        or a chunk ADBC cannot read alike) the one result is the transform of one plain read.
        ``transform`` must work row by row (its result for a chunk must not depend on the
        other chunks); a :class:`TraceError` it raises is raised here.
        """
        sql = f"SELECT {select} FROM {q(table)}"
        workers = workers or min(os.cpu_count() or 1, 4)
        if not self.use_adbc or workers < 2:
            return [transform(self.frame(sql))]
        try:  # one aggregate per query: SQLite then seeks the rowid b-tree, no scan
            lo = self.fetchall(f"SELECT MIN(rowid) FROM {q(table)}", ())[0][0]
            hi = self.fetchall(f"SELECT MAX(rowid) FROM {q(table)}", ())[0][0]
        except TraceError:
            return [transform(self.frame(sql))]
        # the rowid span bounds the row count from above, without a COUNT(*) scan
        span = hi - lo + 1 if isinstance(lo, int) and isinstance(hi, int) else 0
        if span < PARALLEL_MIN_ROWS:
            return [transform(self.frame(sql))]
        n = max(workers, -(-span // BATCH_ROWS))
        step = -(-span // n)
        bounds = [(lo + i * step, min(lo + (i + 1) * step - 1, hi)) for i in range(n)]
        chunk_sql = sql + " WHERE rowid BETWEEN ? AND ?"

        def read(b: tuple[int, int]) -> R:
            con = AdbcConnection(self.uri)  # one connection per range, same (copied) file
            try:
                raw = con.frame(chunk_sql, b)
            finally:
                con.close()
            return transform(raw)

        try:
            with ThreadPoolExecutor(workers) as ex:
                return list(ex.map(read, bounds))
        except TraceError:
            raise
        except Exception:  # chunk type inference differs, odd schema: one plain read
            return [transform(self.frame(sql))]

    def _frame_adbc(self, sql: str, params: Sequence[Any]) -> pl.DataFrame:
        if self._adbc is None:
            self._adbc = AdbcConnection(self.uri)
        return self._adbc.frame(sql, params)

    def _frame_sqlite(self, sql: str, params: Sequence[Any]) -> pl.DataFrame:
        try:
            cur = self.con.execute(sql, tuple(params))
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
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
        """Close both connections (and remove the private copy of a WAL-mode file)."""
        if self._adbc is not None:
            self._adbc.close()
            self._adbc = None
        self.con.close()
        self._discard_copy()

    def __enter__(self) -> NsysDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
