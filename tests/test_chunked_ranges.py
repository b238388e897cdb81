"""``summary --executor chunks`` of exports with NVTX ranges (traceparse/ranges_chunks.py,
analyses/chunked_ranges.py): the ranges read whole, each kernel's owner folded per piece.

* a generated export whose ranges cross every piece edge, cut one GPU row per piece, two,
  and all in one: every section and the verdict equal memory's, and the op tree and the
  layer group are the hand-computed ones;
* ranges that give steps: the verdict's step clause (the steps' attribution) is not
  computed in pieces, and the CLI says so in its one line;
* every shared export with NVTX ranges: the op tree (whole, every depth), ``op_tree``,
  ``layers``, ``phases`` and ``phase_mix`` from the pieces equal memory's, also where a
  later section falls back (fusion chains, collectives);
* the report payload (``fixes``, ``report``) of the generated export: memory's, section
  for section (the shared exports: tests/test_chunked_fixes.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import REPO, ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import ranges_chunks as rc
from traceparse import summary_chunks as sc
from traceparse.analyses import chunked_ranges as cr
from traceparse.analyses import optree, summary
from traceparse.analyses.gaps import DEFAULT_MIN_NS
from traceparse.cli import main
from traceparse.nsys.db import NsysDB
from traceparse.nsys.reader import read
from traceparse.nsys.spans import span_plan
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Range, Scenario

K = "cudaLaunchKernel"
RANGED = ("phases", "phase_mix", "layers", "op_tree")


def _export(path: Path, ranges: tuple[Range, ...]) -> Path:
    """Five kernels on one stream: launched in ``layer 0`` (10 us), ``layer 1`` (20 us),
    ``layer 2`` (30 us), in ``forward`` after the layers (4 us) and outside any range
    (5 us)."""
    calls = (
        Call(K, 2 * US, 3 * US, Activity("kernel", 7, 5 * US, 10 * US, "k0")),
        Call(K, 31 * US, 32 * US, Activity("kernel", 7, 35 * US, 20 * US, "k1")),
        Call(K, 61 * US, 62 * US, Activity("kernel", 7, 65 * US, 30 * US, "k2")),
        Call(K, 95 * US, 96 * US, Activity("kernel", 7, 100 * US, 4 * US, "tail")),
        Call(K, 110 * US, 111 * US, Activity("kernel", 7, 112 * US, 5 * US, "late")),
    )
    return samplegen_sqlite.write(Scenario("ranged", "ranges across pieces", calls, ranges),
                                  path)


LAYERS = (Range("forward", 0, 100 * US), Range("layer 0", 1 * US, 30 * US),
          Range("layer 1", 30 * US, 60 * US), Range("layer 2", 60 * US, 90 * US))


def _same(got: dict, mem: dict) -> None:
    assert list(got["sections"]) == list(mem["sections"])
    for name, frame in mem["sections"].items():
        try:
            assert_frame_equal(got["sections"][name], frame, check_exact=True)
        except AssertionError as exc:
            raise AssertionError(f"section {name}: {exc}") from None
    assert (got["verdict"], got["untraced_gpu_work"]) == (mem["verdict"],
                                                         mem["untraced_gpu_work"])


@pytest.mark.parametrize("rows", [1, 2, 100])
def test_generated_ranges_across_pieces(tmp_path: Path, rows: int) -> None:
    path = _export(tmp_path / "ranged.sqlite", LAYERS)
    mem = summary.summarize(read(path))
    plan = span_plan(path, block_rows=rows)
    assert len(plan.windows(rows)) == (5 if rows == 1 else 3 if rows == 2 else 1)
    got = sc.summary(str(path), top=10, min_gap_ns=DEFAULT_MIN_NS, chunk_rows=rows)
    assert got is not None
    _same(got, mem)
    s = got["sections"]
    # 69 us of kernels: forward holds 64 (its own 4 after the layers), 5 outside any range
    tree = s["op_tree"].select("depth", "name", "calls", "inclusive_ns", "exclusive_ns",
                               "kernels").rows()
    assert tree == [(0, "[all kernels]", 0, 69 * US, 0, 5),
                    (1, "forward", 1, 64 * US, 4 * US, 4),
                    (2, "layer 2", 1, 30 * US, 30 * US, 1),
                    (2, "layer 1", 1, 20 * US, 20 * US, 1),
                    (2, "layer 0", 1, 10 * US, 10 * US, 1),
                    (1, "[outside any range]", 0, 5 * US, 5 * US, 1)]
    # one group of 3 layers: 10, 20, 30 us -> mean = median 20, spread (30-10)/20 = 100 %,
    # the slowest layer 2, 50 % over the median
    lay = s["layers"].row(0, named=True)
    assert s["layers"].height == 1
    assert (lay["parent"], lay["layer"], lay["layers"], lay["total_ns"], lay["median_ns"],
            lay["spread_pct"], lay["slowest"], lay["slowest_vs_median_pct"]) == (
        "forward", "layer {N}", 3, 60 * US, 20_000.0, 100.0, 2, 50.0)
    assert s["phases"].height == s["phase_mix"].height == 0


def test_owner_part_hand_computed(tmp_path: Path) -> None:
    """One window's partial: per owning path node, the kernels' count and time."""
    path = _export(tmp_path / "ranged.sqlite", LAYERS)
    plan = span_plan(path, block_rows=100)
    ranged = rc.prepare(plan)
    (t0, t1), = plan.windows(100)
    rows, api, _ = sc.read1(plan, (t0, t1))
    part = cr.owner_part(ranged.tree, rows, api, t0, t1)
    # nodes: 3 forward, 4..6 layer 0..2 (made in start order); 2 outside any range
    names = ["[all kernels]", "[no launch call]", "[outside any range]", "forward",
             "layer 0", "layer 1", "layer 2"]
    got = sorted((names[n], k, d) for n, k, d in
                 part.select("node", "kernels", "dur_ns").iter_rows())
    assert got == [("[outside any range]", 1, 5 * US), ("forward", 1, 4 * US),
                   ("layer 0", 1, 10 * US), ("layer 1", 1, 20 * US), ("layer 2", 1, 30 * US)]
    assert not part["other"].any()


def test_steps_fall_back_at_the_verdict(tmp_path: Path) -> None:
    """Numbered step ranges: the phases are unknown (no serving annotation, name or
    shape), so phases and phase mix are empty, but the verdict's step clause reads the
    steps' attribution: named, and memory's bytes printed."""
    steps = (Range("step 1", 0, 50 * US), Range("step 2", 50 * US, 100 * US))
    path = _export(tmp_path / "steps.sqlite", steps)
    with pytest.raises(sc.SectionNotInPieces) as exc:
        sc.summary(str(path), top=10, min_gap_ns=DEFAULT_MIN_NS, chunk_rows=1)
    assert exc.value.section == "verdict" and "2 steps" in exc.value.why
    mem = CliRunner().invoke(main, ["--no-cache", "summary", str(path)])
    got = CliRunner().invoke(main, ["--no-cache", "summary", str(path), "--executor",
                                    "chunks", "--chunk-rows", "1"])
    assert got.stdout == mem.stdout
    assert got.stderr.startswith(f"traceparse: {path}: summary computed in memory, not in "
                                 "chunks: verdict: the ranges give 2 steps")


def _has_nvtx(path: Path) -> bool:
    with NsysDB(path) as db:
        return rc.has_nvtx_ranges(db)


NVTX = [p for p in [*shared_files("nsys", "*.sqlite"),
                    *sorted((REPO / "sample_traces").glob("*.sqlite"))] if _has_nvtx(p)]


@pytest.mark.parametrize("path", NVTX, ids=ids(NVTX))
def test_ranged_sections_equal_memory(path: Path) -> None:
    """The whole tree and the four sections from pass 1's owner sums (300 GPU rows per
    piece, 3 for the samples), checked before any other section can fall back."""
    tl = read(path)
    rows = 3 if path.parent.name == "sample_traces" else 300
    opts = summary.SummaryOptions()
    by_rank = optree.splits_by_rank(tl)
    plan = span_plan(path, block_rows=rows)
    ranged = rc.prepare(plan)
    part = sc.pass1(plan, plan.windows(rows), DEFAULT_MIN_NS, ranges=ranged.tree)[3]
    assert part.owners is not None
    assert_frame_equal(cr.tree(ranged.tree, part.owners),
                       optree.op_tree(tl, view=rc.VIEW, by_rank=by_rank), check_exact=True)
    got = rc.sections(ranged, part.owners, int(part.counts["kernels"][0]), by_rank, opts)
    for name in RANGED:
        assert_frame_equal(got[name], summary.SECTIONS[name](tl, opts), check_exact=True)
    assert ranged.steps == (3 if path.stem == "mini_train" else 0) and ranged.known == 0


def test_nvtx_exports_found() -> None:
    """The list above is not empty by accident: the samples with NVTX ranges."""
    assert {"mini_train", "sync_bound"} <= {p.stem for p in NVTX}
    assert pl.Series([p.stem for p in NVTX]).n_unique() == len(NVTX)


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="needs distributed")
def test_dask_equals_memory(tmp_path: Path) -> None:
    """The whole ranges travel to the workers with pass 1's task: Dask prints memory's
    bytes too."""
    path = _export(tmp_path / "ranged.sqlite", LAYERS)
    args = ["--no-cache", "summary", str(path), "--format", "csv"]
    mem = CliRunner().invoke(main, args)
    got = CliRunner().invoke(main, [*args, "--executor", "dask", "-j", "2", "--chunk-rows",
                                    "2"])
    assert (got.exit_code, got.stderr) == (0, ""), got.output
    assert got.stdout == mem.stdout


@pytest.mark.parametrize("rows", [1, 100])
def test_generated_payload_in_pieces(tmp_path: Path, rows: int) -> None:
    """``fixes`` / ``report``'s payload with the same ranges: every section (the icicle
    from the owner sums, the provenance with NVTX_EVENTS' accounting) equals memory's,
    and ``fixes`` prints memory's bytes without a line of its own."""
    from traceparse import payload_chunks as pc
    from traceparse.reports.payload import build_payload

    path = _export(tmp_path / "ranged.sqlite", LAYERS)
    got = pc.payload(str(path), chunk_rows=rows)
    want = dict(build_payload(read(path)))
    want.pop("timeline")
    assert got is not None and sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], f"section {name} differs"
    args = ["--no-cache", "fixes", str(path), "--format", "json"]
    mem = CliRunner().invoke(main, args)
    run = CliRunner().invoke(main, [*args, "--executor", "chunks", "--chunk-rows", str(rows)])
    assert run.exit_code == 0 and run.stdout == mem.stdout and run.stderr == mem.stderr
