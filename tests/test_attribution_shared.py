"""Attribution and summary on every real nsys export of the shared corpus."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import ids, shared_files
from traceparse.analyses.attribution import check_attribution
from traceparse.analyses.summary import summarize

NSYS = shared_files("nsys", "*.sqlite")


def _busy_by_plain_merge(gpu: pl.DataFrame) -> dict[tuple[int, int], int]:
    """Busy time per (rank, device) by a plain sort-and-merge, independent of analyses."""
    out: dict[tuple[int, int], int] = {}
    g = gpu.filter(pl.col("category").cast(pl.String) != "sync")
    for (rank, dev), part in g.group_by("rank", "device_id"):
        total, cur_s, cur_e = 0, None, None
        for s, e in sorted(part.select("start_ns", "end_ns").rows()):
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        out[(int(rank), int(dev))] = total  # type: ignore[call-overload]
    return out


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_summary_sum_checks_on_real_trace(path: Path) -> None:
    tl = traceparse.load(path)
    result = summarize(tl)
    bd = check_attribution(result["sections"]["breakdown"])
    devices = tl.gpu.filter(pl.col("category").cast(pl.String) != "sync").select(
        "rank", "device_id").unique()
    assert bd.height == devices.height
    busy = _busy_by_plain_merge(tl.gpu)
    for r in bd.iter_rows(named=True):
        assert r["compute_ns"] + r["communication_ns"] + r["memory_ns"] == busy[
            (r["rank"], r["device_id"])]
    assert isinstance(result["verdict"], str) and result["verdict"]
    gaps = result["sections"]["top_gaps"]
    assert (gaps["launch_overhead_ns"] + gaps["warmup_ns"] + gaps["host_sync_ns"]
            + gaps["idle_ns"] == gaps["dur_ns"]).all()
