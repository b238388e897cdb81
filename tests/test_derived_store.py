"""The analysis set kept beside a cached timeline (traceparse/derived_store.py): a second
command reads it instead of computing, gets the same answer, and never uses a value that
its tables, code or files no longer back."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceparse
from traceparse import derived_store, schema
from traceparse.analyses import summary as summary_mod
from traceparse.cache import Cache
from traceparse.cli import main
from traceparse.derived_store import DerivedStore, store_of
from traceparse.reports.payload import build_payload
from traceparse.timeline import LazyTimeline, Timeline

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    """A private copy of the bundled training-step sample (the cache entry is per path)."""
    dst = tmp_path / "mini_train.sqlite"
    shutil.copyfile(SAMPLES / "mini_train.sqlite", dst)
    return dst


def _refuse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every summary section fail if computed; return the list of those called."""
    called: list[str] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        def fn(tl: Timeline, opts: summary_mod.SummaryOptions) -> pl.DataFrame:
            called.append(name)
            raise AssertionError(f"section {name} computed again")
        return fn

    monkeypatch.setattr(summary_mod, "SECTIONS", {k: make(k) for k in summary_mod.SECTIONS})
    return called


def _assert_same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a["verdict"] == b["verdict"]
    sa, sb = a["sections"], b["sections"]
    assert isinstance(sa, dict) and isinstance(sb, dict) and list(sa) == list(sb)
    for name in sa:
        assert_frame_equal(sa[name], sb[name], check_exact=True)


def test_second_load_reads_the_sections_without_reading_a_table(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    first = traceparse.load(trace, cache=cache)  # a miss: parsed, stored, store attached
    assert store_of(first) is not None
    want = summary_mod.summarize(first)
    stored = list((cache.entry(trace) / "derived").glob("*/*.json"))
    # one file per section (16) + host sets, breakdown, gaps, savings, links ... all small
    assert len(stored) >= len(summary_mod.SECTIONS)

    again = traceparse.load(trace, cache=cache)
    assert isinstance(again, LazyTimeline)
    called = _refuse(monkeypatch)
    got = summary_mod.summarize(again)
    assert called == []
    _assert_same(want, got)
    # the gpu and api tables were never read: sections, breakdown and verdict came from disk
    assert "gpu" not in again.__dict__ and "api" not in again.__dict__
    # their rows are counted from the Parquet metadata
    assert again.rows("gpu") == first.gpu.height > 0
    assert again.rows("api") == first.api.height > 0
    # reading a table on first use gives the stored rows
    assert_frame_equal(again.gpu, first.gpu)


def test_replaced_table_is_computed_not_read(trace: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    summary_mod.summarize(traceparse.load(trace, cache=cache))
    tl = traceparse.load(trace, cache=cache)
    tl.gpu = tl.gpu.filter(pl.col("kind") == "kernel")  # no memcpy/memset any more
    called = _refuse(monkeypatch)
    with pytest.raises(AssertionError, match="computed again"):
        summary_mod.summarize(tl)
    assert called  # the first section was computed, not read from the store


def test_a_table_read_but_not_replaced_still_uses_the_store(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    want = summary_mod.summarize(traceparse.load(trace, cache=cache))
    tl = traceparse.load(trace, cache=cache)
    assert tl.gpu.height  # read on first use: still the entry's table
    _refuse(monkeypatch)
    _assert_same(want, summary_mod.summarize(tl))


def test_other_code_is_a_miss_and_its_store_is_deleted(
        trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    summary_mod.summarize(traceparse.load(trace, cache=cache))
    derived = cache.entry(trace) / "derived"
    old = [d.name for d in derived.iterdir()]
    assert old == [derived_store.code_digest()]
    monkeypatch.setattr(derived_store, "code_digest", lambda: "0" * 32)
    tl = traceparse.load(trace, cache=cache)
    calls = []
    real = summary_mod.SECTIONS["window"]
    monkeypatch.setitem(summary_mod.SECTIONS, "window",
                        lambda t, o: calls.append(1) or real(t, o))  # type: ignore[func-returns-value]
    summary_mod.summarize(tl)
    assert calls == [1]
    assert [d.name for d in derived.iterdir()] == ["0" * 32]


def test_unreadable_value_is_recomputed_and_rewritten(trace: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache(tmp_path / "cache")
    want = summary_mod.summarize(traceparse.load(trace, cache=cache))
    store = store_of(traceparse.load(trace, cache=cache))
    assert store is not None
    key = "summary:top_kernels:top=10:min_gap_ns=10000"
    arrow = derived_store._frame_path(store.directory / derived_store._file_name(key), 0)
    arrow.write_bytes(arrow.read_bytes()[:40])  # truncated
    assert store.read(key) is None
    assert not arrow.exists()  # dropped, so the next run rewrites it
    tl = traceparse.load(trace, cache=cache)
    _assert_same(want, summary_mod.summarize(tl))
    assert arrow.exists()
    assert_frame_equal(store.read(key), want["sections"]["top_kernels"])


def test_no_cache_has_no_store(trace: Path) -> None:
    tl = traceparse.load(trace)
    assert store_of(tl) is None
    summary_mod.summarize(tl)
    assert not (trace.parent / "derived").exists()


def test_only_frames_small_values_and_exact_json_are_written(tmp_path: Path) -> None:
    store = DerivedStore(tmp_path, {})
    assert not store.write("tuple", (1, 2))
    assert not store.write("json with a tuple", {"a": (1, 2)})
    assert not store.write("nan", {"a": float("nan")})
    assert store.write("json", {"a": [1, 2.5, None, "x"]})
    assert store.read("json") == {"a": [1, 2.5, None, "x"]}
    frames = {"x": pl.DataFrame({"a": [1, 2]}), "y": pl.DataFrame({"b": ["u"]})}
    assert store.write("frames", frames)
    got = store.read("frames")
    assert list(got) == ["x", "y"]
    assert_frame_equal(got["x"], frames["x"])
    big = pl.DataFrame({"a": pl.zeros(derived_store.MAX_VALUE_BYTES // 8 + 1, dtype=pl.Int64,
                                       eager=True)})
    assert not store.write("big", big)
    assert store.read("never written") is None


def test_report_from_the_store_is_byte_identical(trace: Path, tmp_path: Path) -> None:
    env = {"TRACEPARSE_CACHE_DIR": str(tmp_path / "cache")}
    runner = CliRunner()
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.html"
        res = runner.invoke(main, ["report", str(trace), "-o", str(out)], env=env)
        assert res.exit_code == 0, res.output
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    tl = traceparse.load(trace, cache=tmp_path / "cache")
    assert build_payload(tl) == build_payload(traceparse.load(trace))


def test_lazy_timeline_matches_the_eager_load(trace: Path, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    eager = traceparse.load(trace, cache=cache)
    lazy = traceparse.load(trace, cache=cache)
    assert isinstance(lazy, LazyTimeline) and not isinstance(eager, LazyTimeline)
    assert lazy.meta == eager.meta
    for name in schema.TABLES:
        assert lazy.rows(name) == eager.rows(name)
        assert_frame_equal(lazy.table(name), eager.table(name))
    with pytest.raises(AttributeError):
        lazy.not_a_table  # noqa: B018


def test_unreadable_table_of_a_lazy_entry_parses_the_input_again(trace: Path,
                                                                 tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    summary_mod.summarize(traceparse.load(trace, cache=cache))
    entry = cache.entry(trace)
    gpu_file = entry / "timeline" / "gpu.parquet"
    lazy = traceparse.load(trace, cache=cache)
    assert isinstance(lazy, LazyTimeline)
    gpu_file.write_bytes(gpu_file.read_bytes()[: gpu_file.stat().st_size // 2])  # truncated
    assert lazy.sources.height == 1  # read from the entry before the damage showed
    parsed = traceparse.load(trace)
    assert lazy.rows("gpu") == parsed.gpu.height  # the footer is gone: parsed again
    assert_frame_equal(lazy.gpu, parsed.gpu)
    assert store_of(lazy) is None  # nothing derived from the damaged entry is used
    assert not entry.exists()  # dropped: the next load rebuilds it
    assert_frame_equal(summary_mod.summarize(lazy)["sections"]["window"],
                       summary_mod.summarize(traceparse.load(trace))["sections"]["window"])
    assert isinstance(traceparse.load(trace, cache=cache), Timeline) and entry.exists()


def test_released_drops_only_what_the_computation_stored() -> None:
    """``derived.released``: a value the computation stored is dropped when it returns, one
    stored before is kept, and the savings engine leaves no replay preparation behind
    (a later replay computes it again, with the same answer)."""
    from traceparse import derived
    from traceparse.analyses import replay, savings
    from traceparse.loader import load

    tl = load(SAMPLES / "launch_bound.sqlite", cache=None)
    built: list[int] = []

    def value(name: str) -> int:
        built.append(1)
        return len(built)

    kept = derived.cached(tl, "kept", ("gpu",), lambda: value("kept"))
    got = derived.released(tl, ("kept", "inner"), lambda: (
        derived.cached(tl, "inner", ("gpu",), lambda: value("inner"))
        + derived.cached(tl, "kept", ("gpu",), lambda: value("kept"))))
    assert (kept, got, len(built)) == (1, 2 + 1, 2)
    store = tl.__dict__["_derived"]
    assert "kept" in store and "inner" not in store

    sv = savings.savings(tl)
    assert sv.height > 0 and "replay_prep" not in store and "savings" in store
    again = replay.predicted(tl, no_launch_overhead=True)
    assert "replay_prep" in store
    w = savings.windows(again).filter(pl.col("rank") == sv["rank"][0])
    row = sv.filter(pl.col("change") == "no_launch_overhead").row(0, named=True)
    assert w["measured_ns"][0] == row["measured_ns"]
