"""Gzipped Nsight Systems exports (``*.sqlite.gz``): read like the export itself, through a
decompressed copy in the cache directory; a broken stream is one line and exit 2."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceparse
from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.loader import SQLITE_MAGIC, detect

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "mini_train.sqlite"


@pytest.fixture()
def gz(tmp_path: Path) -> Path:
    out = tmp_path / "mini_train.sqlite.gz"
    out.write_bytes(gzip.compress(SAMPLE.read_bytes(), mtime=0))
    return out


def test_gzipped_export_reads_like_the_export(gz: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEPARSE_CACHE_DIR", str(tmp_path / "cache"))
    before = (gz.stat().st_mtime_ns, gz.read_bytes())
    assert detect(gz) == "nsys-sqlite-gz"
    a, b = traceparse.load(SAMPLE), traceparse.load(gz)
    for table in ("gpu", "api", "ranges", "devices"):
        assert_frame_equal(getattr(a, table), getattr(b, table))
    assert b.gpu.height == a.gpu.height > 0
    assert b.meta["file"] == "mini_train.sqlite.gz"
    assert b.meta["exported_from"] == "nsys-sqlite-gz"
    copies = list((tmp_path / "cache" / "nsys-gunzip").glob("*/mini_train.sqlite"))
    assert len(copies) == 1 and copies[0].read_bytes() == SAMPLE.read_bytes()
    assert (gz.stat().st_mtime_ns, gz.read_bytes()) == before  # read-only


def test_truncated_gzip_is_one_line_exit_2(gz: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite.gz"
    cut.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with pytest.raises(TraceError, match="truncated gzip stream"):
        traceparse.load(cut)
    res = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c"), "info", str(cut)])
    assert res.exit_code == 2
    msg = res.output.strip()
    assert msg.splitlines() == [msg] and "cut.sqlite.gz" in msg and "Traceback" not in msg
    assert not list((tmp_path / "c").rglob("*.sqlite"))  # no partial copy left behind


def test_gzip_bomb_is_refused_without_a_copy(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """An SQLite header followed by 80 MiB of zeros inflates ~1000x: refused once 64 MiB are
    out, and no partial copy is left in the cache directory."""
    bomb = tmp_path / "bomb.sqlite.gz"
    bomb.write_bytes(gzip.compress(SQLITE_MAGIC + bytes(80 << 20), mtime=0))
    monkeypatch.setenv("TRACEPARSE_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(TraceError, match="refusing a possible gzip bomb"):
        traceparse.load(bomb)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
