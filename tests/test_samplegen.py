"""samplegen: the generated nsys exports parse back to exactly the ground-truth timelines,
match the real nsys 2024.2 table layouts, and the committed samples are up to date."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import REPO, ids, shared_files
from traceparse.samplegen import scenarios as samplegen
from traceparse.samplegen import sqlite as samplegen_sqlite

SAMPLES = REPO / "sample_traces"
NAMES = sorted(samplegen.SCENARIOS)
SORT = {"gpu": ["start_ns", "correlation_id"], "api": ["start_ns", "correlation_id"],
        "ranges": ["start_ns", "thread_id", "name"], "devices": ["rank", "device_id"],
        "sources": ["rank", "file"], "ingest": ["table", "source", "outcome"]}


def _norm(frame: pl.DataFrame, table: str) -> pl.DataFrame:
    f = frame.with_columns(pl.col(c).cast(pl.String) for c, t in frame.schema.items()
                           if t == pl.Categorical)
    if table == "ranges":
        f = f.drop("range_id")  # a parser-assigned row id
    if table == "ingest":
        # tables the readers do not map ('lookup' / 'not read') are accounted by
        # nsys_tables from the file itself; test_nsys_accounting checks those counts
        f = f.filter(pl.col("outcome").is_in(["parsed", "skipped"]))
    return f.sort(SORT[table], nulls_last=True)


def _assert_same(got: traceparse.Timeline, want: traceparse.Timeline) -> None:
    for table in SORT:
        g, w = _norm(got.table(table), table), _norm(want.table(table), table)
        assert g.columns == w.columns, table
        assert g.height == w.height, (table, g.height, w.height)
        for col in g.columns:
            assert g[col].to_list() == w[col].to_list(), (table, col)


@pytest.mark.parametrize("name", NAMES)
def test_parser_reads_back_ground_truth(name: str, tmp_path: Path) -> None:
    path = samplegen.write_sqlite(name, tmp_path / f"{name}.sqlite")
    _assert_same(traceparse.load(path), samplegen.scenario_timeline(name))


@pytest.mark.parametrize("name", NAMES)
def test_committed_samples_are_current(name: str) -> None:
    committed = SAMPLES / f"{name}.sqlite"
    assert committed.stat().st_size < 200 * 1024
    _assert_same(traceparse.load(committed), samplegen.scenario_timeline(name))


def test_ground_truth_shapes() -> None:
    tl = samplegen.scenario_timeline("mini_train")
    k = tl.kernels
    # 3 steps x (4 fwd x 2 + 4 bwd x 3 + 2 NCCL + 1 optimizer) kernels
    assert k.height == 3 * (8 + 12 + 2 + 1)
    nccl = k.filter(pl.col("category") == "communication")
    assert nccl.height == 6 and set(nccl["stream_id"]) == {20}
    assert set(nccl["name"].cast(pl.String)) == {samplegen.NCCL}
    assert tl.ranges.filter(pl.col("depth") == 0)["name"].cast(pl.String).to_list() == [
        "step 0", "step 1", "step 2"]
    assert set(tl.ranges.filter(pl.col("depth") == 1)["name"].cast(pl.String)) == {
        "dataloader", "forward", "backward", "optimizer"}
    # every launch precedes its activity
    j = tl.gpu.join(tl.api, on=["rank", "process_id", "correlation_id"], suffix="_api")
    assert j.height == tl.gpu.height
    assert (j["start_ns_api"] <= j["start_ns"]).all()
    # streams never run two activities at once
    for _, s in tl.gpu.sort("start_ns").group_by("stream_id"):
        assert (s["start_ns"][1:] >= s["end_ns"][:-1]).all()


def test_deterministic(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = samplegen.write_sqlite("mini_train", tmp_path / "a" / "s.sqlite").read_bytes()
    b = samplegen.write_sqlite("mini_train", tmp_path / "b" / "s.sqlite").read_bytes()
    assert a == b


def test_default_sample_is_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEPARSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    p = samplegen.default_sample()
    assert p.parent == tmp_path / "traceparse" and p.is_file()
    mtime = p.stat().st_mtime_ns
    assert samplegen.default_sample() == p and p.stat().st_mtime_ns == mtime
    assert traceparse.load(p).kernels.height == 69


def test_default_sample_follows_traceparse_cache_dir(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRACEPARSE_CACHE_DIR", str(tmp_path / "tp"))
    assert samplegen.default_sample().parent == tmp_path / "tp"


def test_unknown_scenario() -> None:
    with pytest.raises(ValueError, match="unknown scenario"):
        samplegen.scenario("nope")


def _layout(db: sqlite3.Connection, table: str) -> list[tuple[str, str, int]]:
    return [(r[1], r[2], r[3]) for r in db.execute(f"PRAGMA table_info({table})")]


REAL_2024 = [p for p in shared_files("nsys", "*.sqlite")
             if p.stat().st_size < 20_000_000]


@pytest.mark.shared
@pytest.mark.parametrize("real", REAL_2024, ids=ids(REAL_2024))
def test_ddl_matches_real_nsys_2024_2(real: Path) -> None:
    """Every table the generator writes has exactly the columns (name, type, NOT NULL) of
    the same table in real nsys 2024.2.3 exports."""
    db = sqlite3.connect(f"file:{real}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "META_DATA_EXPORT" not in tables:
            pytest.skip("pre-2023 export")
        version = dict(db.execute("SELECT name, value FROM META_DATA_EXPORT").fetchall())
        if not version.get("EXPORT_PRODUCT_VERSION", "").startswith("2024.2"):
            pytest.skip(f"nsys {version.get('EXPORT_PRODUCT_VERSION')}, not 2024.2")
        mine = sqlite3.connect(":memory:")
        compared = 0
        for table in samplegen_sqlite.DDL:
            samplegen_sqlite.create_table(mine, table)
            if table in tables:
                assert _layout(mine, table) == _layout(db, table), table
                compared += 1
        assert compared >= 8
    finally:
        db.close()
