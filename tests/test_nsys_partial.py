"""Partial nsys reads (``traceparse.nsys.reader.read(tables=...)``): the tables read equal the whole
read's, the tables left out are empty and accounted as ``not read`` with their exact row
counts, and a partial timeline is never cached."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import ids, shared_files
from traceparse.cache import Cache
from traceparse.cli import main
from traceparse.loader import load
from traceparse.nsys import reader as nsys
from traceparse.samplegen.scenarios import default_sample
from traceparse.timeline import NOT_REQUESTED

NSYS = shared_files("nsys", "*.sqlite")
LEFT_OUT = sorted(nsys.OPTIONAL_TABLES)


def _count(path: Path, table: str) -> int:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(con.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0])
    finally:
        con.close()


def _check_partial(path: Path) -> None:
    full = nsys.read(path)
    part = nsys.read(path, tables=("gpu",))
    if full.gpu.height == 0:  # read whole: nothing to save, "no events" must stay exact
        assert nsys.not_read_tables(part) == []
        for name, frame in full.tables().items():
            assert part.table(name).equals(frame), name
        return
    assert nsys.not_read_tables(part) == LEFT_OUT
    for name in ("gpu", "devices", "ncu"):
        assert part.table(name).equals(full.table(name)), name
    for name in LEFT_OUT:
        assert part.table(name).height == 0, name
    left_sources = {s for name in LEFT_OUT for s in nsys.OPTIONAL_TABLES[name]}
    # every row of the whole read's ingest not about a left-out source is there, in order
    kept = full.ingest.filter(~pl.col("source").is_in(sorted(left_sources)))
    assert part.ingest.filter(pl.col("reason").ne_missing(NOT_REQUESTED)).equals(kept)
    # each left-out source present in the file: one "not read" row with its exact row count
    skipped = part.ingest.filter(pl.col("reason").eq_missing(NOT_REQUESTED))
    got = {src: n for _, _, src, _, _, n in skipped.iter_rows()}
    present = set(full.ingest["source"].to_list()) & left_sources
    assert set(got) >= present
    for src, n in got.items():
        assert n == _count(path, src), src
        assert skipped.filter(pl.col("source") == src)["outcome"].to_list() == ["not read"]


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_partial_read_real(path: Path) -> None:
    _check_partial(path)


def test_partial_read_generated() -> None:
    _check_partial(default_sample())


def test_unknown_table_name() -> None:
    with pytest.raises(ValueError, match="unknown timeline tables"):
        nsys.read(default_sample(), tables=("kernels",))


def test_partial_never_cached(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c")
    part = nsys.read(default_sample(), tables=("gpu",))
    assert not cache.store({"path": str(default_sample())}, part)
    assert not (tmp_path / "c").exists()
    # through load(): with a cache the whole timeline is read and cached
    tl = load(default_sample(), cache=cache, tables=("gpu",))
    assert nsys.not_read_tables(tl) == [] and tl.api.height
    assert load(default_sample(), cache=cache).api.equals(tl.api)


@pytest.mark.parametrize("cmd", ["kernels", "memops"])
def test_cli_output_same_with_and_without_cache(cmd: str, tmp_path: Path) -> None:
    sample = str(default_sample())
    runner = CliRunner()
    cached = runner.invoke(main, ["--cache-dir", str(tmp_path), cmd, sample])
    partial = runner.invoke(main, ["--no-cache", cmd, sample])
    assert cached.exit_code == partial.exit_code == 0, partial.output
    assert cached.output == partial.output


@pytest.mark.parametrize("use_adbc", [True, False])
def test_kernel_name_fallbacks_in_chunks(tmp_path: Path, use_adbc: bool,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel names (read in several rowid chunks): demangled -> short -> mangled name
    (also when an id is not in StringIds) -> placeholder."""
    from traceparse.nsys import db as nsys_db

    monkeypatch.setattr(nsys_db, "PARALLEL_MIN_ROWS", 2)  # several rowid chunks
    monkeypatch.setattr(nsys_db, "BATCH_ROWS", 2)
    path = tmp_path / "mangled.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
    CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL(start INT, "end" INT, deviceId INT, streamId INT,
      demangledName INT, shortName INT, mangledName INT);
    INSERT INTO StringIds VALUES (1, 'void k<int>(int*)'), (2, 'k'), (3, '_Z1kPi');
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
      (0, 1, 0, 7, 1, 2, NULL), (1, 2, 0, 7, NULL, 2, 3), (2, 3, 0, 7, NULL, NULL, 3),
      (3, 4, 0, 7, 99, NULL, 3), (4, 5, 0, 7, NULL, NULL, NULL), (5, 6, 0, 7, 1, 2, 3);
    """)
    con.close()
    k = nsys.read(path, use_adbc=use_adbc).kernels
    assert k["name"].cast(pl.String).to_list() == [
        "void k<int>(int*)", "k", "_Z1kPi", "_Z1kPi", "<unnamed kernel>", "void k<int>(int*)"]
    assert k["short_name"].cast(pl.String).to_list() == ["k", "k", None, None, None, "k"]
