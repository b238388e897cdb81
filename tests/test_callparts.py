"""``call_part`` by codes (analyses/callparts.py) equals the row-wise string rules it
replaced, on the joined frames of every sample scenario and shared trace (busy activities
through the launch-link table, all activities and half of them through the join) and on
a small frame with nulls, ties and pageable copies."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

import traceparse
from tests.conftest import ids, shared_files
from traceparse.analyses import attribution, hostrows
from traceparse.analyses.callparts import call_parts
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


def ref_call_parts(j: pl.DataFrame) -> pl.Series:
    """The rules before: regex and string tests on every row, rank over every row."""
    j = j.with_columns(pl.col("call_name").cast(pl.String))
    pageable = pl.lit(False)
    for c in ("src_kind", "dst_kind"):
        if c in j.columns:
            pageable = pageable | (pl.col(c).cast(pl.String).fill_null("") == "Pageable")
    blocking = (pl.col("call_name").str.contains(attribution.BLOCKING_API_RE)
                | (pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"]) & pageable))
    dur = pl.col("api_end_ns") - pl.col("api_start_ns")
    j = j.with_columns(_first=pl.col("api_start_ns").rank("ordinal")
                       .over("rank", "process_id", "name") == 1,
                       _med=dur.filter(~blocking).median().over("rank", "process_id"))
    lazy = (pl.col("_first") & ~blocking & (dur >= attribution.LAZY_LOAD_MIN_NS)
            & (dur >= 10 * pl.col("_med").fill_null(0)))
    part = pl.when(blocking).then(pl.lit("host_sync")).when(lazy).then(pl.lit("warmup")) \
        .otherwise(pl.lit("launch"))
    return j.select(part.alias("call_part")).to_series()


def _joined(tl: Timeline, acts: pl.DataFrame) -> pl.DataFrame:
    """``acts`` joined to their calls as ``classify_calls`` joins them (first call per key)."""
    key = ["rank", "process_id", "correlation_id"]
    api = (tl.api.filter(pl.col("correlation_id").is_not_null())
           .select(*key, pl.col("name").alias("call_name"),
                   pl.col("start_ns").alias("api_start_ns"),
                   pl.col("end_ns").alias("api_end_ns"))
           .unique(subset=key, keep="first", maintain_order=True))
    return (acts.filter(pl.col("correlation_id").is_not_null())
            .join(api, on=key, how="inner", maintain_order="left"))


def _check(tl: Timeline) -> None:
    busy = attribution.busy_activities(tl)
    for acts in (busy, tl.gpu, tl.gpu.head(tl.gpu.height // 2)):
        j = _joined(tl, acts)
        assert_series_equal(call_parts(j, attribution.BLOCKING_API_RE,
                                       attribution.LAZY_LOAD_MIN_NS), ref_call_parts(j))
    calls = attribution.classify_calls(tl)
    ref = _joined(tl, busy)
    # call_name stays the api name's codes and call_part an Enum: compared as strings
    assert_frame_equal(calls.select(pl.col("call_name").cast(pl.String), "api_start_ns",
                                    "api_end_ns", pl.col("call_part").cast(pl.String)),
                       ref.select(pl.col("call_name").cast(pl.String), "api_start_ns",
                                  "api_end_ns", ref_call_parts(ref)))


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_call_parts_equal_rows_on_sample_scenarios(name: str) -> None:
    _check(samplegen.scenario_timeline(name))


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_call_parts_equal_rows_on_shared_traces(path: Path) -> None:
    _check(traceparse.load(path))


def test_call_parts_nulls_ties_and_pageable_copies() -> None:
    cat = pl.Categorical
    j = pl.DataFrame({
        "rank": [0, 0, 0, 0, 0, 0, 0, 1, 0],
        "process_id": [1, 1, 1, 1, None, None, 1, 1, 1],
        "name": pl.Series(["k", "k", "k2", "c", "k", "k", "c", None, "k"], dtype=cat),
        "kind": pl.Series(["kernel", "kernel", "kernel", "memcpy", "kernel", "kernel",
                           "memcpy", None, "kernel"], dtype=cat),
        "src_kind": pl.Series([None, None, None, "Pageable", None, None, "Device", None, None],
                              dtype=cat),
        "call_name": pl.Series(["cudaLaunchKernel", "cudaLaunchKernel", None,
                                "cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernel",
                                "cudaStreamSynchronize", "cudaLaunchKernel",
                                "cudaLaunchKernel"], dtype=cat),
        "api_start_ns": [100, 100, None, 50, 10, 10, 0, 5, 200],
        "api_end_ns": [500_100, 105, 200_000, 60, 20, 300_010, 1_000_000, 400_005, 205],
    })
    got = call_parts(j, attribution.BLOCKING_API_RE, attribution.LAZY_LOAD_MIN_NS)
    assert_series_equal(got, ref_call_parts(j))
    assert got.to_list() == ["warmup", "launch", "launch", "host_sync", "launch", "launch",
                             "host_sync", "launch", "launch"]
    assert call_parts(j.head(0), attribution.BLOCKING_API_RE, 1).len() == 0


def _ref_name_matches(frame: pl.DataFrame, pattern: str) -> pl.Expr:
    """The name test before: every name cast to a string, then looked up."""
    names = frame.get_column("name")
    if names.dtype != pl.Categorical:
        return pl.col("name").cast(pl.String).str.contains(pattern)
    distinct = names.unique().drop_nulls().cast(pl.String)
    return pl.col("name").cast(pl.String).is_in(distinct.filter(distinct.str.contains(pattern))
                                               .implode())


def _check_names(tl: Timeline) -> None:
    for frame in (tl.api, tl.api.with_columns(pl.col("name").cast(pl.String)), tl.ranges):
        for pattern in (attribution.BLOCKING_API_RE, attribution.WARMUP_API_RE,
                        attribution.WARMUP_RANGE_RE):
            assert_frame_equal(
                frame.filter(hostrows.name_matches(frame, pattern)),
                frame.filter(_ref_name_matches(frame, pattern)))


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_name_matches_by_codes_on_sample_scenarios(name: str) -> None:
    _check_names(samplegen.scenario_timeline(name))


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_name_matches_by_codes_on_shared_traces(path: Path) -> None:
    _check_names(traceparse.load(path))
