"""``tree`` / ``layers`` on several ranks: one row per rank and path (``--by rank``)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse.analyses.layers import layer_groups, layer_table
from traceparse.analyses.optree import check_tree, op_tree, rank_count
from traceparse.cli import main
from traceparse.timeline import Timeline


def _two_ranks() -> Timeline:
    # Each rank (pid 10 + rank, thread 2) runs blocks.0 .. blocks.2 once: [100 i, 100 i + 50).
    # One kernel per block, launched at 100 i + 10, lasting 10 * (i + 1) ns on rank 0 and
    # 10 * (i + 1) + 5 on rank 1; rank 1 has one more kernel with no launch call (7 ns).
    # rank 0: blocks 10, 20, 30 (total 60); rank 1: 15, 25, 35 (75) + 7 unlinked = 82.
    # Merged by path: blocks.i calls 2, time 25, 45, 65 (both GPUs summed).
    rs, calls, ks = [], [], []
    for rank in (0, 1):
        pid = 10 + rank
        for i in range(3):
            rs.append({"rank": rank, "process_id": pid, "name": f"blocks.{i}",
                       "start_ns": 100 * i, "end_ns": 100 * i + 50})
            corr = 10 * rank + i
            calls.append({"rank": rank, "process_id": pid, "start_ns": 100 * i + 10,
                          "end_ns": 100 * i + 12, "correlation_id": corr})
            ks.append({"rank": rank, "process_id": pid, "device_id": rank, "name": "k",
                       "start_ns": 1000 + 100 * i,
                       "end_ns": 1000 + 100 * i + 10 * (i + 1) + 5 * rank,
                       "correlation_id": corr})
    ks.append({"rank": 1, "process_id": 11, "device_id": 1, "name": "u", "start_ns": 2000,
               "end_ns": 2007, "correlation_id": 99})
    return timeline(ranges=ranges(rs), api=api(calls), gpu=gpu(ks))


def test_tree_by_rank_hand_made() -> None:
    tl = _two_ranks()
    assert rank_count(tl) == 2
    merged = op_tree(tl)
    assert merged.filter(pl.col("name") == "blocks.2").select("calls", "inclusive_ns").row(0) \
        == (2, 65)
    t = check_tree(op_tree(tl, by_rank=True))
    rows = t.select("depth", "rank", "name", "calls", "inclusive_ns").rows()
    assert rows == [
        (0, None, "[all kernels]", 0, 142),            # 60 + 82
        (1, 0, "blocks.2", 1, 30), (1, 0, "blocks.1", 1, 20), (1, 0, "blocks.0", 1, 10),
        (1, 1, "blocks.2", 1, 35), (1, 1, "blocks.1", 1, 25), (1, 1, "blocks.0", 1, 15),
        (1, 1, "[no launch call]", 0, 7)]


def test_layers_by_rank_hand_made() -> None:
    tl = _two_ranks()
    g = layer_groups(tl, view="ops", by_rank=True)
    # rank 0: 10, 20, 30 -> median 20, spread (30 - 10) / 20 = 100 %, slowest 2;
    # rank 1: 15, 25, 35 -> median 25, spread 80 %; calls 1 each (not 2)
    assert g.select("rank", "layers", "calls", "total_ns", "median_ns", "max_ns", "slowest",
                    "spread_pct").rows() == [(0, 3, 1, 60, 20.0, 30, 2, 100.0),
                                             (1, 3, 1, 75, 25.0, 35, 2, 80.0)]
    # merged: one group, calls 2, per layer 25, 45, 65
    m = layer_groups(tl, view="ops")
    assert "rank" not in m.columns
    assert m.select("layers", "calls", "max_ns").row(0) == (3, 2, 65)
    assert layer_table(tl, view="ops", by_rank=True)["rank"].to_list() == [0, 0, 0, 1, 1, 1]


def test_single_rank_same_either_way(tmp_path: Path) -> None:
    # one rank: --by rank and --by path print the same bytes, with no rank column
    import json

    from traceparse.samplegen.llm import LLMStep, serving_trace

    p = tmp_path / "s.pt.trace.json"
    p.write_text(json.dumps(serving_trace("sglang", [LLMStep("decode", 4, 4, (10, 20))])))
    for cmd in (["tree"], ["layers"], ["layers", "--per-layer"]):
        a = CliRunner().invoke(main, [*cmd, str(p), "--format", "csv"], catch_exceptions=False)
        b = CliRunner().invoke(main, [*cmd, str(p), "--format", "csv", "--by", "path"],
                               catch_exceptions=False)
        assert a.exit_code == 0 and a.output == b.output
        assert not a.output.startswith("rank") and ",rank," not in a.output.splitlines()[0]


FSDP = shared_files("nsys", "nsys-ai__mfu_2gpu_*.sqlite")


def _raw_blocks(path: Path) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Independent SQL: per (process, block index) of the ``FSDP::pre_forward (blocks.N``
    NVTX ranges, (instances, kernels, kernel ns) of the kernels whose runtime launch call
    (same thread, same process and correlationId) starts inside the range."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("""
        SELECT (n.globalTid >> 24) & 16777215, n.text,
          (SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
             JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
              AND (k.globalPid >> 24) = (r.globalTid >> 24)
           WHERE r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end),
          (SELECT COALESCE(SUM(k.end - k.start), 0) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
             JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
              AND (k.globalPid >> 24) = (r.globalTid >> 24)
           WHERE r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end)
        FROM NVTX_EVENTS n WHERE n.text LIKE 'FSDP::pre_forward (blocks.%'""").fetchall()
    con.close()
    out: dict[tuple[int, int], tuple[int, int, int]] = {}
    for pid, text, nk, ns in rows:
        m = re.search(r"blocks\.(\d+)", text)
        assert m
        c, k, t = out.get((pid, int(m[1])), (0, 0, 0))
        out[(pid, int(m[1]))] = (c + 1, k + nk, t + ns)
    return out


@pytest.mark.shared
@pytest.mark.parametrize("path", FSDP, ids=ids(FSDP))
def test_fsdp_layers_per_rank_match_sql(path: Path) -> None:
    raw = _raw_blocks(path)
    pids = sorted({p for p, _ in raw})
    assert len(pids) == 2
    tl = traceparse.load(path)
    t = layer_table(tl, view="modules", by_rank=True).filter(
        pl.col("layer").str.starts_with("FSDP::pre_forward (blocks."))
    rank_pid = dict(tl.ranges.select("rank", "process_id").unique().iter_rows())
    got = {(rank_pid[r["rank"]], r["index"]): (r["calls"], r["kernels"], r["inclusive_ns"])
           for r in t.iter_rows(named=True)}
    assert got == raw
    # each GPU ran each block once: the merged view's calls 2 was both ranks together
    assert {c for c, _, _ in raw.values()} == {1}
