"""Names as dictionary codes (issue 28): :func:`traceparse.analyses.codes.matches` selects
the rows a regex selects row by row, and the stream waits computed on codes and narrow
columns equal the string-per-row computation they replaced (kept below as the reference)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal, assert_series_equal

import traceparse
from tests.conftest import ids, shared_files
from traceparse import links
from traceparse.analyses import attribution, graphs, mechanisms, streamwait, warmup
from traceparse.analyses.codes import matches
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

PATTERNS = (streamwait.WAIT_API_RE, streamwait.RECORD_API_RE, warmup.WARMUP_API_RE,
            attribution.BLOCKING_API_RE, graphs.LAUNCH_API_RE, mechanisms.FUSIBLE_RE, "GraphLaunch")


def _rowwise(s: pl.Series, pattern: str) -> pl.Series:
    return s.cast(pl.String).str.contains(pattern).fill_null(False)


def test_matches_codes_nulls_and_strings() -> None:
    values = ["cudaStreamWaitEvent", "cudaLaunchKernel_v7000", None, "cudaEventRecord",
              "cudaStreamWaitEvent", "hipStreamWaitEvent", ""]
    for dtype in (pl.Categorical, pl.String):
        f = pl.DataFrame({"name": pl.Series(values, dtype=dtype)})
        got = f.select(matches(f["name"], streamwait.WAIT_API_RE)).to_series()
        assert got.to_list() == [True, False, False, False, True, True, False]
        # a pattern no name has
        assert not f.select(matches(f["name"], "^nothing$")).to_series().any()


def _check_matches(tl: Timeline) -> None:
    for frame in (tl.api, tl.gpu):
        if frame.height == 0:
            continue
        for pattern in PATTERNS:
            got = frame.select(matches(frame["name"], pattern)).to_series()
            assert_series_equal(got, _rowwise(frame["name"], pattern).alias("name"))


def _ref_stream_waits(tl: Timeline) -> pl.DataFrame:
    """The stream waits as computed before issue 28 (every gpu column through the joins
    and sorts, names as strings per row)."""
    api = tl.api
    if api.height == 0 or tl.gpu.height == 0:
        return streamwait._empty()
    names = api["name"].cast(pl.String)
    waits = api.filter(names.str.contains(streamwait.WAIT_API_RE)).select(
        "rank", "process_id", "thread_id", pl.col("name").cast(pl.String).alias("wait_name"),
        pl.col("start_ns").alias("wait_start_ns"), pl.col("end_ns").alias("wait_end_ns"))
    if waits.height == 0:
        return streamwait._empty()
    acts = (links.launch_join(tl).filter(pl.col("kind").cast(pl.String) != "sync")
            .filter(pl.col("api_start_ns").is_not_null()))
    if acts.height == 0:
        return streamwait._empty()
    acts = (acts.sort("start_ns")
            .with_columns(pl.col("end_ns").cum_max().shift(1)
                          .over(["rank", "device_id", "stream_id"]).alias("_prev_end")))
    first = (acts.sort("api_start_ns", "start_ns")
             .group_by(["rank", "process_id", "api_thread_id", "api_start_ns"],
                       maintain_order=True).first()
             .select("rank", "process_id", pl.col("api_thread_id").alias("thread_id"),
                     "api_start_ns", "api_end_ns", "device_id", "stream_id", "start_ns",
                     "_prev_end", pl.col("name").cast(pl.String).alias("blocked_name"))
             .sort("api_start_ns"))
    j = waits.sort("wait_end_ns").join_asof(
        first, left_on="wait_end_ns", right_on="api_start_ns",
        by=["rank", "process_id", "thread_id"], strategy="forward", check_sortedness=False)
    j = j.filter(pl.col("start_ns").is_not_null()).with_columns(
        pl.max_horizontal("wait_end_ns", "api_end_ns", pl.col("_prev_end").fill_null(0))
        .alias("_from"))
    j = (j.filter(pl.col("start_ns") > pl.col("_from"))
         .sort("wait_start_ns").unique(["rank", "process_id", "thread_id", "api_start_ns"],
                                       keep="last"))
    if j.height == 0:
        return streamwait._empty()
    rec = api.filter(names.str.contains(streamwait.RECORD_API_RE)).select(
        "rank", "process_id", pl.col("thread_id").alias("_rec_tid"),
        pl.col("name").cast(pl.String).alias("_rec_name"),
        pl.col("start_ns").alias("_rec_ns")).sort("_rec_ns")
    j = j.sort("wait_start_ns").join_asof(rec, left_on="wait_start_ns", right_on="_rec_ns",
                                           by=["rank", "process_id"], strategy="backward",
                                           check_sortedness=False)
    launched = acts.select("rank", "process_id", pl.col("api_thread_id").alias("_rec_tid"),
                           pl.col("api_start_ns").alias("_p_ns"),
                           pl.col("name").cast(pl.String).alias("_p_name"),
                           pl.col("stream_id").alias("_p_stream"),
                           pl.col("end_ns").alias("_p_end")).sort("_p_ns")
    j = j.sort("_rec_ns").join_asof(launched, left_on="_rec_ns", right_on="_p_ns",
                                     by=["rank", "process_id", "_rec_tid"],
                                     strategy="backward", check_sortedness=False)
    j = j.with_columns(pl.min_horizontal("start_ns", pl.col("_p_end").fill_null(
        pl.col("start_ns"))).alias("_to")).filter(pl.col("_to") > pl.col("_from"))
    if j.height == 0:
        return streamwait._empty()
    # the producer by its base name, as streamwait names it since issue 25's ids
    base = (pl.col("_p_name").str.replace(r"^void ", "")
            .str.replace_all(r"\(anonymous namespace\)::", "")
            .str.replace(r"[<(].*$", "").str.slice(0, 60))
    producer = (pl.when(pl.col("_p_name").is_not_null())
                .then(pl.format("{} (stream {})", base, pl.col("_p_stream")))
                .otherwise(pl.lit(streamwait.NO_PRODUCER)))
    return (j.select(
        pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int32),
        pl.col("stream_id").cast(pl.Int64), pl.col("_from").cast(pl.Int64).alias("start_ns"),
        pl.col("_to").cast(pl.Int64).alias("end_ns"), "wait_name", "wait_start_ns",
        "wait_end_ns", pl.col("thread_id").cast(pl.Int64), pl.col("process_id").cast(pl.Int64),
        "blocked_name",
        pl.when(pl.col("_rec_name").is_not_null())
        .then(pl.format("{} at {} ns", pl.col("_rec_name"), pl.col("_rec_ns")))
        .otherwise(pl.lit(None, pl.String)).alias("event"),
        producer.alias("producer"))
        .cast(pl.Schema({k: v for k, v in streamwait._COLS.items()
                         if k not in ("event_id", "stream_source")})).sort("start_ns"))


def _check(tl: Timeline) -> None:
    _check_matches(tl)
    # the reference is the inferred path (no recorded stream/event ids): compare on it
    api = tl.api.with_columns(pl.lit(None, pl.Int64).alias("stream_id"),
                              pl.lit(None, pl.Int64).alias("event_id"))
    tl0 = Timeline(**{**tl.tables(), "api": api}, meta=tl.meta)
    got = streamwait._stream_waits(tl0)
    assert set(got["stream_source"].to_list()) <= {streamwait.INFERRED}
    ref = _ref_stream_waits(tl0)
    assert_frame_equal(got.drop("event_id", "stream_source"),
                       ref.drop([c for c in ("event_id", "stream_source") if c in ref.columns]))


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_codes_on_sample_scenarios(name: str) -> None:
    _check(samplegen.scenario_timeline(name))


SHARED = shared_files("nsys", "*.sqlite")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_codes_on_shared_traces(path: Path) -> None:
    _check(traceparse.load(path))


def test_stream_waits_found_on_a_shared_trace() -> None:
    """The comparison above is not vacuous: some shared export has blocked intervals."""
    if not SHARED:
        pytest.skip("../shared is missing (the real-trace corpus)")
    assert any(streamwait._stream_waits(traceparse.load(p)).height for p in SHARED)
