"""Of two blocking rows that start together at a gap's start, the API call (with its
thread) names the gap (analyses/gaps.py ``_host_classes``; docs/analyses.md, cause
``host_sync``): a stable sort, not whichever row the sort happened to put first."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest
from conftest import TRACES

import traceparse
from traceparse.analyses.gaps import idle_gaps

CLOVER = TRACES / "nsys" / "pipit__perlmutter-cloverleaf-cuda.sqlite"


@pytest.mark.shared
def test_every_host_sync_gap_names_its_call_and_thread() -> None:
    """pipit cloverleaf (nsys): 407 host_sync gaps; at b2241ff 4 printed no thread (the
    same cudaMemcpy also found through its copy's classification, without a thread, won an
    unstable sort). Each named call is checked against the export's own runtime table."""
    if not CLOVER.is_file():
        pytest.skip(f"{CLOVER} missing (../shared corpus)")
    g = idle_gaps(traceparse.load(CLOVER)).filter(pl.col("cause") == "host_sync")
    assert g.height > 0
    assert g["cause_thread_id"].null_count() == 0
    con = sqlite3.connect(f"file:{CLOVER}?mode=ro", uri=True)
    rows = set(con.execute("SELECT start, globalTid % 16777216 FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
    con.close()
    for s, t in g.select("cause_start_ns", "cause_thread_id").iter_rows():
        assert (s, t) in rows, (s, t)
