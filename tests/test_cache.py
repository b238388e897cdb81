"""Timeline cache: hits, misses on every identity change, --no-cache, corrupt entries."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceparse
from tests.conftest import shared_files
from traceparse import cache as cache_mod
from traceparse import loader, schema
from traceparse.cache import Cache, content_hash, identity
from traceparse.cli import main
from traceparse.timeline import Timeline

BASE = 1_735_632_360_000_000_000


def _kineto(path: Path, kernel_dur_us: int = 5) -> Path:
    """A two-event Kineto trace: one launch (1 us at 10 us) and one kernel (``kernel_dur_us``
    at 12 us), relative to BASE. ``kernel_dur_us`` is one digit so rewrites keep the size."""
    doc = {"baseTimeNanoseconds": BASE, "traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 12,
         "dur": kernel_dur_us, "args": {"device": 0, "stream": 7, "correlation": 7}},
    ]}
    path.write_text(json.dumps(doc))
    return path


class _Counter:
    """Wrap loader._parse to count real parses (a hit does not parse)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = loader._parse

        def counted(path, kind, tables=None):  # type: ignore[no-untyped-def]
            self.calls += 1
            return real(path, kind, tables)

        monkeypatch.setattr(loader, "_parse", counted)


def _same(a: Timeline, b: Timeline) -> None:
    for name in schema.TABLES:
        assert a.table(name).equals(b.table(name)), name
    assert a.meta == b.meta


def test_hit_returns_the_parsed_timeline_without_parsing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    first = traceparse.load(trace, cache=store)
    second = traceparse.load(trace, cache=store)
    assert parses.calls == 1
    _same(first, second)
    # the kernel: 12 us .. 17 us relative -> BASE + 12_000 .. BASE + 17_000 ns
    k = second.kernels.row(0, named=True)
    assert (k["start_ns"], k["dur_ns"]) == (BASE + 12_000, 5_000)
    assert len(list((tmp_path / "cache").iterdir())) == 1


def test_no_cache_argument_parses_every_time(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    parses = _Counter(monkeypatch)
    traceparse.load(trace)
    traceparse.load(trace, cache=None)
    traceparse.load(trace, cache=False)
    assert parses.calls == 3


def test_miss_on_mtime_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    traceparse.load(trace, cache=store)
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    traceparse.load(trace, cache=store)
    traceparse.load(trace, cache=store)  # rebuilt entry is a hit again
    assert parses.calls == 2
    assert len(list((tmp_path / "cache").iterdir())) == 1  # replaced in place, not added


def test_miss_on_content_change_with_same_size_and_mtime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json", kernel_dur_us=5)
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    assert traceparse.load(trace, cache=store).kernels["dur_ns"].to_list() == [5_000]
    st = trace.stat()
    _kineto(trace, kernel_dur_us=8)  # same size: one digit changed
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace.stat().st_size == st.st_size
    assert traceparse.load(trace, cache=store).kernels["dur_ns"].to_list() == [8_000]
    assert parses.calls == 2


def test_miss_on_size_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    traceparse.load(trace, cache=store)
    st = trace.stat()
    with open(trace, "a") as fh:
        fh.write("\n")  # still valid JSON, one byte longer
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    traceparse.load(trace, cache=store)
    assert parses.calls == 2


def test_miss_on_schema_version_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    traceparse.load(trace, cache=store)
    monkeypatch.setattr(schema, "SCHEMA_VERSION", "999.0")
    tl = traceparse.load(trace, cache=store)
    assert parses.calls == 2
    saved = json.loads(next((tmp_path / "cache").glob("*/timeline/timeline.json")).read_text())
    assert saved["schema_version"] == "999.0"  # the entry was rebuilt under the new version
    assert tl.kernels.height == 1


def test_directory_identity_covers_each_member(tmp_path: Path) -> None:
    d = tmp_path / "ranks"
    d.mkdir()
    _kineto(d / "rank0.json")
    before = identity(d, "kineto-dir")
    assert [f[0] for f in before["files"]] == ["rank0.json"]
    _kineto(d / "rank1.json")
    after = identity(d, "kineto-dir")
    assert [f[0] for f in after["files"]] == ["rank0.json", "rank1.json"]
    assert before != after


@pytest.mark.parametrize("damage", ["parquet", "key", "missing"])
def test_corrupt_entry_is_ignored_and_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              damage: str) -> None:
    trace = _kineto(tmp_path / "t.json")
    store = Cache(tmp_path / "cache")
    parses = _Counter(monkeypatch)
    good = traceparse.load(trace, cache=store)
    entry = store.entry(trace)
    if damage == "parquet":
        (entry / "timeline" / "gpu.parquet").write_bytes(b"not parquet at all")
    elif damage == "key":
        (entry / "key.json").write_text("{truncated")
    else:
        (entry / "timeline" / "api.parquet").unlink()
    again = traceparse.load(trace, cache=store)
    assert parses.calls == 2
    _same(good, again)
    traceparse.load(trace, cache=store)  # the rebuilt entry is sound: a hit
    assert parses.calls == 2


def test_unwritable_cache_never_fails_the_load(tmp_path: Path) -> None:
    trace = _kineto(tmp_path / "t.json")
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    tl = traceparse.load(trace, cache=blocker / "cache")
    assert tl.kernels.height == 1


def test_saved_timeline_input_is_not_cached_again(tmp_path: Path) -> None:
    tl = traceparse.load(_kineto(tmp_path / "t.json"))
    saved = tl.save(tmp_path / "saved")
    store = tmp_path / "cache"
    traceparse.load(saved, cache=store)
    assert not store.exists()


def test_sampled_hash_of_large_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 blocks of 16 bytes over a 1,000-byte file: offsets (1000-16)*i//3 = 0, 328, 656, 984
    monkeypatch.setattr(cache_mod, "FULL_HASH_BYTES", 100)
    monkeypatch.setattr(cache_mod, "SAMPLE_BLOCKS", 4)
    monkeypatch.setattr(cache_mod, "SAMPLE_BLOCK_BYTES", 16)
    f = tmp_path / "big.bin"
    data = bytearray(range(256)) * 4
    del data[1000:]
    f.write_bytes(bytes(data))
    base = content_hash(f, 1000)

    def flipped(offset: int) -> str:
        d = bytearray(data)
        d[offset] ^= 0xFF
        f.write_bytes(bytes(d))
        return content_hash(f, 1000)

    for sampled in (0, 15, 328, 343, 656, 984, 999):
        assert flipped(sampled) != base, sampled
    # bytes between blocks are not read: size and mtime must catch such edits
    for unsampled in (16, 327, 344, 983):
        assert flipped(unsampled) == base, unsampled


def _cli(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(main, args)
    return res.exit_code, res.output


def test_cli_cache_dir_and_no_cache(tmp_path: Path) -> None:
    trace = _kineto(tmp_path / "t.json")
    d = tmp_path / "c"
    code, out = _cli(["--cache-dir", str(d), "--no-cache", "info", str(trace)])
    assert code == 0, out
    assert "gpu kernel" in out
    assert not d.exists()
    code, out = _cli(["--cache-dir", str(d), "info", str(trace)])
    assert code == 0, out
    assert len(list(d.glob("*/key.json"))) == 1
    code, again = _cli(["--cache-dir", str(d), "info", str(trace)])
    assert again == out


def test_cli_cache_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _kineto(tmp_path / "t.json")
    monkeypatch.setenv("TRACEPARSE_CACHE_DIR", str(tmp_path / "envcache"))
    code, out = _cli(["kernels", str(trace), "--format", "csv"])
    assert code == 0, out
    assert len(list((tmp_path / "envcache").glob("*/key.json"))) == 1


def test_default_dir_prefers_env_then_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEPARSE_CACHE_DIR", str(tmp_path / "a"))
    assert cache_mod.default_dir() == tmp_path / "a"
    monkeypatch.delenv("TRACEPARSE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_mod.default_dir() == tmp_path / "xdg" / "traceparse"


REAL = [*shared_files("nsys", "*.sqlite")[:1], *shared_files("torch", "*dlrm*worker0*")[:1],
        *shared_files("ncu", "fuzigrad__output.raw.csv")]


@pytest.mark.shared
@pytest.mark.parametrize("path", REAL, ids=[p.name for p in REAL])
def test_real_traces_round_trip_through_the_cache(tmp_path: Path, path: Path) -> None:
    direct = traceparse.load(path)
    store = tmp_path / "cache"
    traceparse.load(path, cache=store)
    cached = traceparse.load(path, cache=store)
    _same(direct, cached)
    assert cached.gpu.height + cached.ncu.height > 0
    assert pl.read_parquet(next(store.glob("*/timeline/gpu.parquet"))).height == direct.gpu.height
