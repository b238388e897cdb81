"""One launch-link table per timeline (issue 16): every analysis that joined ``gpu`` with
``api`` now reads :func:`traceparse.links.launch_links`. The joins they ran before are
written out here as reference definitions; the outputs of breakdown, gaps, launches,
savings (replay), ranges and the whole summary must not change on any shared trace or
sample scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceparse
from tests.conftest import ids, shared_files
from traceparse import links
from traceparse.analyses import attribution, gaps, launches, optree, replay
from traceparse.analyses.summary import summarize
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

KEY = ["rank", "process_id", "correlation_id"]
API_COLS = {"name": "api_name", "kind": "api_kind", "start_ns": "api_start_ns",
            "end_ns": "api_end_ns", "thread_id": "api_thread_id"}


def ref_launch_join(tl: Timeline, *, kinds: Any = None, unique_calls: bool = True
                    ) -> pl.DataFrame:
    """The join launch_join ran before: earliest call by start per key, hash join."""
    gpu = tl.gpu
    if kinds is not None:
        gpu = gpu.filter(pl.col("kind").cast(pl.String).is_in(list(kinds)))
    api = tl.api.filter(pl.col("correlation_id").is_not_null()).sort("start_ns",
                                                                        maintain_order=True)
    if unique_calls:
        api = api.unique(subset=KEY, keep="first", maintain_order=True)
    api = api.select(KEY + list(API_COLS)).rename(API_COLS)
    return gpu.join(api, on=KEY, how="left", nulls_equal=False, maintain_order="left")


def ref_launched_activities(tl: Timeline, kinds: Any = ("kernel",), columns: Any = None
                            ) -> pl.DataFrame:
    """launched_activities before it narrowed the rows: launch_join's whole frame, then a
    select (then the ``columns`` asked for)."""
    out = ref_launch_join(tl, kinds=list(kinds)).select(
        "rank", pl.col("process_id").fill_null(-1), "correlation_id", "dur_ns", "start_ns",
        pl.col("category").cast(pl.String), pl.col("name").cast(pl.String),
        pl.col("kind").cast(pl.String), pl.col("api_thread_id").fill_null(-1).alias("thread_id"),
        "api_start_ns")
    return out if columns is None else out.select(c for c in out.columns if c in columns)


def ref_busy(tl: Timeline) -> pl.DataFrame:
    return (tl.gpu.filter(pl.col("category").cast(pl.String) != "sync")
            .with_columns(pl.col("category").cast(pl.String)))


def ref_classify_calls(tl: Timeline, acts: pl.DataFrame | None = None, *,
                       columns: Any = None) -> pl.DataFrame:
    """The classification before: its own join, first call per key in file order."""
    if acts is None:
        acts = ref_busy(tl)
    api = (tl.api.filter(pl.col("correlation_id").is_not_null())
           .select(*KEY, pl.col("name").cast(pl.String).alias("call_name"),
                   pl.col("start_ns").alias("api_start_ns"), pl.col("end_ns").alias("api_end_ns"))
           .unique(subset=KEY, keep="first", maintain_order=True))
    j = acts.filter(pl.col("correlation_id").is_not_null()).join(api, on=KEY, how="inner",
                                                                  maintain_order="left")
    pageable = pl.lit(False)
    for c in ("src_kind", "dst_kind"):
        if c in j.columns:
            pageable = pageable | (pl.col(c).cast(pl.String).fill_null("") == "Pageable")
    blocking = (pl.col("call_name").str.contains(attribution.BLOCKING_API_RE)
                | (pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"]) & pageable))
    dur = pl.col("api_end_ns") - pl.col("api_start_ns")
    j = j.with_columns(_first=pl.col("api_start_ns").rank("ordinal")
                       .over("rank", "process_id", pl.col("name").cast(pl.String)) == 1,
                       _med=dur.filter(~blocking).median().over("rank", "process_id"))
    lazy = (pl.col("_first") & ~blocking & (dur >= attribution.LAZY_LOAD_MIN_NS)
            & (dur >= 10 * pl.col("_med").fill_null(0)))
    part = pl.when(blocking).then(pl.lit("host_sync")).when(lazy).then(pl.lit("warmup")) \
        .otherwise(pl.lit("launch"))
    j = j.with_columns(part.alias("call_part")).drop("_first", "_med")
    if columns is not None:
        j = j.select(*dict.fromkeys(columns), "call_name", "api_start_ns", "api_end_ns",
                     "call_part")
    return j


def _outputs(tl: Timeline) -> dict[str, Any]:
    s = summarize(tl)
    out: dict[str, Any] = {f"summary.{k}": v for k, v in s["sections"].items()}
    out["verdict"] = s["verdict"]
    out["launches"] = launches.launch_table(tl)
    out["launches_all_calls"] = launches.launch_table(tl, unique_calls=False)
    out["gaps"] = gaps.idle_gaps(tl, min_ns=0)
    out["classify"] = attribution.classify_calls(tl).with_columns(
        pl.col("call_name", "call_part").cast(pl.String))  # codes / Enum, values compared
    out["replay"] = replay.replay(tl, no_launch_overhead=True)
    out["kernel_ranges"] = links.kernel_ranges(tl)
    out["launched_activities"] = optree.launched_activities(tl, ("kernel", "memcpy", "memset"))
    out["launched_narrow"] = optree.launched_activities(tl, columns=("dur_ns", "thread_id"))
    out["op_tree"] = optree.op_tree(tl)
    return out


def _old(tl: Timeline, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        for mod in (links, launches, replay):
            m.setattr(mod, "launch_join", ref_launch_join)
        m.setattr(optree.links, "launch_join", ref_launch_join)
        m.setattr(optree, "launched_activities", ref_launched_activities)
        m.setattr(attribution, "classify_calls", ref_classify_calls)
        m.setattr(attribution, "busy_activities", ref_busy)
        m.setattr(gaps, "busy_activities", ref_busy)
        return _outputs(tl)


def _fresh(tl: Timeline) -> Timeline:
    return Timeline(**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__})


def _check(tl: Timeline, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _old(_fresh(tl), monkeypatch)
    new = _outputs(_fresh(tl))
    assert old.keys() == new.keys()
    for k, v in old.items():
        if isinstance(v, pl.DataFrame):
            try:
                assert_frame_equal(new[k], v, check_row_order=k != "classify")
            except AssertionError as e:
                raise AssertionError(f"{k}: {e}") from None
        else:
            assert new[k] == v, k


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_same_outputs_on_sample_scenarios(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(samplegen.scenario_timeline(name), monkeypatch)


SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_same_outputs_on_shared_traces(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _check(traceparse.load(path), monkeypatch)


def test_link_table_keeps_both_duplicate_rules() -> None:
    # two calls with the key (r0, pid 7, corr 5): row 0 starts at 40, row 1 at 30 (earlier)
    tl = samplegen.scenario_timeline("launch_bound")
    api = pl.DataFrame({"rank": [0, 0, 0], "process_id": [7, 7, 8], "correlation_id": [5, 5, 5],
                        "start_ns": [40, 30, 10]}).cast(tl.api.select(
                            "rank", "process_id", "correlation_id", "start_ns").schema)
    gpu = pl.DataFrame({"rank": [0, 0, 0], "process_id": [7, 9, None],
                        "correlation_id": [5, 5, 5]}).cast(tl.gpu.select(
                            "rank", "process_id", "correlation_id").schema)
    t = Timeline(gpu=gpu, api=api)
    got = links.launch_links(t)
    assert got["api_row"].to_list() == [1, None, None]
    assert got["api_row_file"].to_list() == [0, None, None]
    assert links.launch_links(t) is got  # computed once
    t.api = api.head(1)
    assert links.launch_links(t)["api_row"].to_list() == [0, None, None]  # new table: again


def _same_links(tl: Timeline) -> bool:
    """The sorted (numpy) link table equals the grouped join's; True if it was taken."""
    fast = links._launch_links_sorted(tl)
    if fast is not None:
        assert_frame_equal(fast, links._launch_links_grouped(tl))
    return fast is not None


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_sorted_links_equal_grouped_on_sample_scenarios(name: str) -> None:
    _same_links(samplegen.scenario_timeline(name))


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_sorted_links_equal_grouped_on_shared_traces(path: Path) -> None:
    _same_links(traceparse.load(path))


def test_sorted_links_duplicates_nulls_and_processes() -> None:
    # keys repeated with earlier and equal starts, two processes and two ranks, null keys
    tl = samplegen.scenario_timeline("launch_bound")
    api = pl.DataFrame({
        "rank": [0, 0, 0, 0, 1, 0, None, 0, 0],
        "process_id": [7, 7, 7, 8, 7, 7, 7, None, 7],
        "correlation_id": [5, 5, 5, 5, 5, 6, 6, 6, None],
        "start_ns": [40, 30, 30, 10, 20, 50, 1, 1, 1]}).cast(tl.api.select(
            "rank", "process_id", "correlation_id", "start_ns").schema)
    gpu = pl.DataFrame({"rank": [0, 0, 1, 0, 0, None, 2, 0],
                        "process_id": [7, 8, 7, 7, 9, 7, 7, None],
                        "correlation_id": [5, 5, 5, 6, 5, 5, 5, 6]}).cast(tl.gpu.select(
                            "rank", "process_id", "correlation_id").schema)
    t = Timeline(gpu=gpu, api=api)
    assert _same_links(t)
    got = links.launch_links(t)
    assert got["api_row"].to_list() == [1, 3, 4, 5, None, None, None, None]
    assert got["api_row_file"].to_list() == [0, 3, 4, 5, None, None, None, None]
    t2 = Timeline(gpu=gpu, api=api.with_columns(pl.lit(None, pl.Int64).alias("start_ns")))
    assert links._launch_links_sorted(t2) is None  # a call without start: grouped join
