"""``summary`` and ``report`` on several ranks show the per-rank tree and layer groups of
``traceparse tree`` / ``layers`` (``--by rank``): one computation, one figure."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files
from test_tree_by_rank import _two_ranks

import traceparse
from traceparse.analyses import llm_summary
from traceparse.analyses.layers import layer_groups
from traceparse.analyses.optree import op_tree
from traceparse.analyses.summary import summarize
from traceparse.cli import main
from traceparse.reports.payload import ReportOptions, build_payload
from traceparse.reports.summary_text import render_text
from traceparse.timeline import Timeline

_TREE = ["rank", "depth", "name", "calls", "inclusive_ns", "kernels"]
_LAYERS = ["rank", "layer", "layers", "calls", "total_ns", "median_ns", "max_ns", "slowest"]


def _sections(tl: Timeline, top: int) -> dict[str, pl.DataFrame]:
    return summarize(tl, top=top, sections=("layers", "op_tree"))["sections"]


def _pick(records: list[dict[str, object]], cols: list[str]) -> list[tuple[object, ...]]:
    return [tuple(r[c] for c in cols) for r in records]


def test_summary_and_report_tree_per_rank_hand_made() -> None:
    tl = _two_ranks()
    # rank 0: blocks 10, 20, 30 ns; rank 1: 15, 25, 35 ns + 7 ns without a launch call;
    # root 142 ns. Every node is one GPU's: calls 1 (merged by path it was calls 2, 65 ns)
    want = [(None, 0, "[all kernels]", 0, 142, 7),
            (0, 1, "blocks.2", 1, 30, 1), (0, 1, "blocks.1", 1, 20, 1),
            (0, 1, "blocks.0", 1, 10, 1),
            (1, 1, "blocks.2", 1, 35, 1), (1, 1, "blocks.1", 1, 25, 1),
            (1, 1, "blocks.0", 1, 15, 1), (1, 1, "[no launch call]", 0, 7, 1)]
    tree = op_tree(tl, view="ops", max_depth=llm_summary.TREE_DEPTH, by_rank=True)
    assert tree.select(_TREE).rows() == want  # what `traceparse tree` prints
    sec = _sections(tl, top=10)["op_tree"]
    assert sec.select(_TREE).rows() == want
    # top=1: a budget of 2 rows would have shown rank 0 only; each rank keeps its first
    # RANK_MIN_ROWS (3) rows: rank 1's [no launch call] (its 4th) is cut, not rank 1
    assert _sections(tl, top=1)["op_tree"].select(_TREE).rows() == want[:7]
    p = build_payload(tl, options=ReportOptions(top_n=10))
    table = p["op_tree"]["table"]
    assert [c["key"] for c in table["columns"]][:2] == ["rank", "depth"]
    got = [(r["rank"], r["depth"], r["name"].lstrip("\u2003"), r["calls"], r["inclusive_ns"],
            r["kernels"]) for r in table["rows"]]
    assert got == want
    # the icicle nodes are the same per-rank tree: rank 0's blocks.2 is 30 ns, not 65 ns
    nodes = {(n["rank"], n["name"]): n["inclusive_ns"] for n in p["op_tree"]["nodes"]}
    assert nodes[(0, "blocks.2")] == 30 and nodes[(1, "blocks.2")] == 35
    text = render_text(summarize(tl, top=10, sections=("op_tree",)))
    assert "one subtree per rank" in text
    assert any(ln.split()[:2] == ["r1", "blocks.2"] for ln in text.splitlines())


def test_summary_and_report_layers_per_rank_hand_made() -> None:
    tl = _two_ranks()
    # rank 0: 10, 20, 30 -> total 60, median 20, slowest #2 30; rank 1: 75, 25, #2 35
    want = [(0, "blocks.{N}", 3, 1, 60, 20.0, 30, 2), (1, "blocks.{N}", 3, 1, 75, 25.0, 35, 2)]
    assert layer_groups(tl, view="ops", by_rank=True).select(_LAYERS).rows() == want
    sec = _sections(tl, top=10)["layers"]
    assert sec.select(_LAYERS).rows() == want
    lay = build_payload(tl, options=ReportOptions(top_n=10))["layers"]["table"]
    assert lay["columns"][0]["key"] == "rank"
    assert _pick(lay["rows"], _LAYERS) == want
    text = render_text(summarize(tl, top=10, sections=("layers",)))
    assert "Repeated layers per rank" in text and "r1  blocks.{N}" in text


def _cli_frame(args: list[str]) -> pl.DataFrame:
    res = CliRunner().invoke(main, [*args, "--format", "csv"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return pl.read_csv(io.StringIO(res.output))


def _per_rank_prefix(frame: pl.DataFrame, n: int) -> pl.DataFrame:
    return frame.filter(pl.col("rank").is_null() | (pl.int_range(pl.len()).over("rank") < n))


FSDP = shared_files("nsys", "nsys-ai__mfu_2gpu_after.sqlite")


@pytest.mark.shared
@pytest.mark.parametrize("path", FSDP, ids=ids(FSDP))
def test_fsdp_summary_and_report_equal_tree_and_layers(path: Path) -> None:
    tl = traceparse.load(path)
    view = llm_summary.tree_view(tl)
    tree = _cli_frame(["tree", str(path), "--view", view, "--depth",
                       str(llm_summary.TREE_DEPTH), "--min-pct",
                       str(llm_summary.TREE_MIN_PCT)])
    lay = _cli_frame(["layers", str(path), "--view", view])
    secs = _sections(tl, top=10)
    # summary: 2 * 10 - 1 rows shared by 2 ranks = each rank's first 9 rows of `tree`
    assert secs["op_tree"].select(_TREE).rows() == _per_rank_prefix(tree, 9).select(
        _TREE).rows()
    assert sorted(set(secs["op_tree"]["rank"].drop_nulls())) == [0, 1]
    p = build_payload(tl, options=ReportOptions(top_n=50))
    got = [(r["rank"], r["depth"], r["name"].lstrip("\u2003"), r["calls"], r["inclusive_ns"],
            r["kernels"]) for r in p["op_tree"]["table"]["rows"]]
    assert got == _per_rank_prefix(tree, 49).select(_TREE).rows()
    want = _per_rank_prefix(lay, llm_summary.LAYER_GROUPS).select(_LAYERS).rows()
    assert secs["layers"].select(_LAYERS).rows() == want
    assert _pick(p["layers"]["table"]["rows"], _LAYERS) == want
    # FSDP::pre_forward (blocks.N): each GPU ran each block once; rank 0's slowest is
    # blocks.21 (140 us vs its 131 us median), which the merged group (calls 2) diluted
    fsdp = {r[0]: r for r in want if str(r[1]).startswith("FSDP::pre_forward (blocks.")}
    assert fsdp[0][3] == fsdp[1][3] == 1 and fsdp[0][7] == 21
