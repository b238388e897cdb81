"""nsys SQLite access: WAL-mode files are read without side files, and an activity table is
checked for its required columns even when it holds no rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.nsys.db import NsysDB, is_wal
from traceparse.nsys.reader import read
from traceparse.samplegen import scenarios as samplegen

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def _sample(tmp_path: Path, name: str = "compute_bound") -> Path:
    (tmp_path / "in").mkdir()
    return samplegen.write_sqlite(name, tmp_path / "in" / "trace.sqlite")


def _kernel_count(path: Path) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(con.execute(f"SELECT COUNT(*) FROM {KERNEL}").fetchone()[0])
    finally:
        con.close()


def test_wal_file_without_wal_journal_leaves_no_side_files(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=wal").fetchone()[0] == "wal"
    con.close()  # the last connection checkpoints and deletes -wal/-shm
    assert is_wal(path)
    before = sorted(p.name for p in path.parent.iterdir())
    assert before == ["trace.sqlite"]
    n = _kernel_count(path)
    tl = read(path)
    assert tl.kernels.height == n > 0
    assert sorted(p.name for p in path.parent.iterdir()) == before


def test_wal_file_with_live_journal_is_read_from_a_private_copy(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    writer = sqlite3.connect(path)
    try:
        writer.execute("PRAGMA journal_mode=wal")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        n = int(writer.execute(f"SELECT COUNT(*) FROM {KERNEL}").fetchone()[0])
        # one more kernel, committed but only in the -wal file
        writer.execute(f"INSERT INTO {KERNEL} SELECT * FROM {KERNEL} LIMIT 1")
        writer.commit()
        assert path.with_name("trace.sqlite-wal").stat().st_size > 0
        before = {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()}
        db = NsysDB(path)
        try:
            assert db.count(KERNEL) == n + 1  # the committed row in the -wal is seen
            assert db.uri.find(str(path.parent)) == -1  # read from elsewhere
        finally:
            db.close()
        after = {p.name: p.stat().st_mtime_ns for p in path.parent.iterdir()}
        assert after == before
    finally:
        writer.close()


def test_rollback_journal_file_opens_plain_read_only(tmp_path: Path) -> None:
    path = _sample(tmp_path)
    assert not is_wal(path)
    read(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["trace.sqlite"]


def _empty_kernel_table(tmp_path: Path, columns: str) -> Path:
    path = _sample(tmp_path)
    con = sqlite3.connect(path)
    con.execute(f"DROP TABLE {KERNEL}")
    con.execute(f"CREATE TABLE {KERNEL} ({columns})")
    con.commit()
    con.close()
    return path


def test_empty_kernel_table_without_required_columns_is_rejected(tmp_path: Path) -> None:
    path = _empty_kernel_table(tmp_path, "foo INTEGER")
    with pytest.raises(TraceError, match=f"{KERNEL} has no 'start' column"):
        read(path)
    res = CliRunner().invoke(main, ["--no-cache", "kernels", str(path)])
    assert res.exit_code == 2
    assert res.output.count("\n") == 1 and str(path) in res.output


def test_empty_kernel_table_without_a_name_column_is_rejected(tmp_path: Path) -> None:
    path = _empty_kernel_table(
        tmp_path, "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER")
    with pytest.raises(TraceError, match="no kernel name column"):
        read(path)


def test_empty_kernel_table_with_the_columns_is_an_empty_kernel_list(tmp_path: Path) -> None:
    path = _empty_kernel_table(
        tmp_path, "start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, "
                  "correlationId INTEGER, demangledName INTEGER, shortName INTEGER")
    tl = read(path)
    assert tl.kernels.height == 0
    assert tl.gpu.height > 0  # the sample's copies are still there
