"""``summary`` on the chunked executors (traceparse/summary_chunks.py,
analyses/chunked_summary.py) against the in-memory :func:`summarize`.

* every shared nsys export cut into windows of at most 300 GPU rows (the bundled samples
  of 3): each section the pieces compute (window, breakdown, top kernels, top gaps,
  launches with the memory engine's savings) equals memory's frame for frame; where the
  whole-file facts hold, the whole dict (every section, the verdict; with NVTX ranges
  read whole, traceparse/ranges_chunks.py) does too, the savings taken from memory
  (the CUDA-graph saving is not computed in pieces yet: ``summary_chunks._savings``);
* the facts matter: without them the GPU-metrics and memory exports differ;
* the CLI: stdout byte-identical to ``--executor memory`` in text, csv and json, with the
  expected fallback line (listed per export: a new one fails), and byte-identical when
  composed (savings from memory); Dask once (skipped without ``distributed``);
* a generated export cut one row per piece, with hand-computed sections.
"""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from chunked_exports import pieces_export
from click.testing import CliRunner
from conftest import REPO, ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import summary_chunks as sc
from traceparse.analyses import chunked_summary as cs
from traceparse.analyses import savings, summary
from traceparse.analyses.gaps import DEFAULT_MIN_NS
from traceparse.cli import main
from traceparse.nsys.reader import read
from traceparse.nsys.spans import span_plan
from traceparse.samplegen.scenarios import US

NSYS = shared_files("nsys", "*.sqlite")
SAMPLES = sorted((REPO / "sample_traces").glob("*.sqlite"))
HAVE_DASK = importlib.util.find_spec("distributed") is not None
ROWS = 300
#: Why each shared export's summary is computed in memory (the section named on stderr);
#: None: no GPU activity (the memory path words it, no stderr line). "savings": a change
#: the replays in pieces do not compute (``savings_chunks.savings``: communication
#: activity, ``overlap_comm``, for p2p-acc, comm_bound and both nsys-ai mfu_2gpu exports,
#: whose communication and stragglers sections are read in pieces; fusion chains are
#: replayed in pieces); "verdict": the NVTX ranges give steps (mini_train). Every other
#: export is composed in pieces.
FALLBACKS = {
    "nsys-ai__mfu_2gpu_after": "savings", "nsys-ai__mfu_2gpu_before": "savings",
    "p2p-acc__mpiV100": "savings", "resest__report2": "gpu_metrics",
    "uvm-pytorch__report4": "memory", "qcu__report10": None,
    # the bundled samples (generated; 3 GPU rows per piece)
    "comm_bound": "savings", "mini_train": "verdict"}
FILES = NSYS + SAMPLES
#: Of them, those whose whole dict the pieces compose given the savings frame.
COMPOSED = [p for p in FILES if FALLBACKS.get(p.stem, "savings") == "savings"]


@cache
def _memory(path: Path) -> tuple[dict[str, Any], pl.DataFrame]:
    tl = read(path)
    return summary.summarize(tl), savings.savings(tl)


def _rows(path: Path) -> int:
    return 3 if path in SAMPLES else ROWS


@cache
def _ranged(path: Path) -> Any:
    """The export's NVTX ranges read whole (traceparse/ranges_chunks.py), None without."""
    from traceparse.ranges_chunks import ranged_of

    return ranged_of(span_plan(path, block_rows=_rows(path)))


@cache
def _pieces(path: Path) -> Any:
    rows = _rows(path)
    plan = span_plan(path, block_rows=rows)
    wins = plan.windows(rows)
    ranged = _ranged(path)
    return plan, (sc.read_pieces(plan, wins, DEFAULT_MIN_NS,
                                 ranges=ranged.tree if ranged else None) if wins else None)


def _composed(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The chunked dict, the savings frame taken from memory."""
    monkeypatch.setattr(sc, "_savings", lambda *_: _memory(path)[1])
    got = _pieces(path)[1]
    assert got is not None
    return sc.compose(str(path), _rows(path), 10, *got, ranged=_ranged(path))


def _same(got: pl.DataFrame, want: pl.DataFrame, name: str) -> None:
    try:
        assert_frame_equal(got, want, check_exact=True)
    except AssertionError as exc:
        raise AssertionError(f"section {name}: {exc}") from None


def _span(spans: list[sc.SpanPart]) -> tuple[int, int]:
    seen = [s.span for s in spans if s.span is not None]
    return min(s[0] for s in seen), max(s[1] for s in seen)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_sections_equal_memory(path: Path) -> None:
    mem = _memory(path)[0]["sections"]
    got = _pieces(path)[1]
    if got is None:  # no GPU activity: the memory path words it
        assert mem["breakdown"].height == 0
        return
    bd, every, _, part, spans = got
    assert_frame_equal(cs.window(part, _span(spans), sum(s.api_calls for s in spans)),
                       mem["window"], check_exact=True)
    assert_frame_equal(summary.check_attribution(bd), mem["breakdown"], check_exact=True)
    assert_frame_equal(cs.top_kernels(part, 10), mem["top_kernels"], check_exact=True)
    assert_frame_equal(every.head(10), mem["top_gaps"], check_exact=True)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_launches_equal_memory(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The launches section composed from the pass-1 partials and the savings frame."""
    from traceparse.analyses import chunked_launches as cl

    got = _pieces(path)[1]
    if got is None:
        return
    launches = got[2]
    rec = cl.graph_recoverable_from_part(launches[0])
    frame = cl.launch_summary_from_part(
        launches[1], launch_bound_kernels=int(rec["launch_bound_kernels"].sum()),
        saving=savings.best(_memory(path)[1], "no_launch_overhead"))
    assert_frame_equal(frame, _memory(path)[0]["sections"]["launches"], check_exact=True)


@pytest.mark.parametrize("path", COMPOSED, ids=ids(COMPOSED))
def test_whole_summary_equals_memory(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every section (op tree, the sections proven empty) and the verdict."""
    mem = _memory(path)[0]
    got = _composed(path, monkeypatch)
    assert list(got["sections"]) == list(mem["sections"])
    for name, frame in mem["sections"].items():
        _same(got["sections"][name], frame, name)
    assert (got["verdict"], got["untraced_gpu_work"]) == (mem["verdict"],
                                                         mem["untraced_gpu_work"])
    assert sc.whole_file_facts(_pieces(path)[0]) is None


@pytest.mark.shared
@pytest.mark.parametrize("stem, section", [("resest__report2", "gpu_metrics"),
                                           ("uvm-pytorch__report4", "memory")])
def test_facts_matter(stem: str, section: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Composed without the whole-file facts, the section differs from memory's: the
    fact, not luck, keeps the output exact."""
    path = next((p for p in NSYS if p.stem == stem), None)
    if path is None:
        pytest.skip(f"{stem} not in the shared corpus")
    why = sc.whole_file_facts(_pieces(path)[0])
    assert why is not None and why.section == section
    got = _composed(path, monkeypatch)["sections"][section]
    assert not got.equals(_memory(path)[0]["sections"][section])


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["--no-cache", "summary", *args])


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_cli_falls_back_as_listed(path: Path) -> None:
    section = FALLBACKS.get(path.stem)
    for fmt in ("table", "csv", "json"):
        mem = _cli([str(path), "--format", fmt])
        got = _cli([str(path), "--format", fmt, "--executor", "chunks", "--chunk-rows",
                    str(_rows(path) if path in SAMPLES else 1000)])
        assert got.exit_code == 0, got.output
        assert got.stdout == mem.stdout
        line = (f"traceparse: {path}: summary computed in memory, not in chunks: "
                f"{section}: ")
        assert (got.stderr.startswith(line) and got.stderr.count("\n") == 1) \
            if section else got.stderr == ""


@pytest.mark.shared
@pytest.mark.parametrize("path", COMPOSED[:3], ids=ids(COMPOSED[:3]))
def test_cli_composed_byte_identical(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sc, "_savings", lambda *_: _memory(path)[1])
    for fmt in ("table", "csv", "json"):
        mem = _cli([str(path), "--format", fmt])
        got = _cli([str(path), "--format", fmt, "--executor", "chunks", "--chunk-rows",
                    "1000"])
        assert (got.exit_code, got.stderr) == (0, "")
        assert got.stdout == mem.stdout


@pytest.mark.shared
@pytest.mark.skipif(not HAVE_DASK, reason="needs distributed")
def test_dask_equals_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    path = COMPOSED[0]
    monkeypatch.setattr(sc, "_savings", lambda *_: _memory(path)[1])
    args = [str(path), "--format", "csv", "--chunk-rows", "1000", "--executor"]
    got = _cli([*args, "dask", "-j", "2"])
    assert (got.exit_code, got.stderr) == (0, ""), got.output
    assert got.stdout == _cli([*args, "chunks"]).stdout == _cli([str(path), "--format",
                                                                  "csv"]).stdout


def test_cli_refuses(tmp_path: Path) -> None:
    got = _cli(["a.sqlite", "b.sqlite", "--executor", "chunks"])
    assert got.exit_code != 0 and "reads one nsys SQLite export" in got.output
    path = _export(tmp_path / "edges.sqlite")
    got = _cli([str(path), "--executor", "chunks", "--gpu", "H100"])
    assert got.exit_code == 2 and "takes no --gpu" in got.output


# ---------------------------------------------------------------- a generated export
B = 0  # the generated export keeps the scenario's clock


def _export(path: Path) -> Path:
    """:func:`~chunked_exports.pieces_calls` alone."""
    return pieces_export(path, "summary_edges", "summary pieces")


def test_generated_export_hand_computed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    path = _export(tmp_path / "edges.sqlite")
    tl = read(path)
    mem = summary.summarize(tl)
    # end to end, the savings' replays in pieces too (one GPU row per piece)
    whole = sc.summary(str(path), top=10, min_gap_ns=DEFAULT_MIN_NS, chunk_rows=1)
    assert whole is not None
    for name, frame in mem["sections"].items():
        _same(whole["sections"][name], frame, name)
    assert whole["verdict"] == mem["verdict"]
    monkeypatch.setattr(sc, "_savings", lambda *_: savings.savings(tl))
    for rows in (1, 2, 100):  # one GPU row per piece, two, all in one
        plan = span_plan(path, block_rows=rows)
        assert len(plan.windows(rows)) == 4 // rows or rows == 100
        got = sc.compose(str(path), rows, 10,
                         *sc.read_pieces(plan, plan.windows(rows), DEFAULT_MIN_NS))  # type: ignore[misc]
        for name, frame in mem["sections"].items():
            _same(got["sections"][name], frame, name)
        assert got["verdict"] == mem["verdict"]
    s = got["sections"]
    # first event: the first call at +0; last: k1's end at +95 us; 4 calls, 1 device
    assert s["window"].row(0) == (B, B + 95 * US, 95 * US, 1, 3, 1, 4)
    # k1: 10 + 20 us of 40 us of kernels (75%), k2 10 us (25%)
    assert s["top_kernels"].rows() == [("k1", 2, 30 * US, 15_000.0, 75.0),
                                       ("k2", 1, 10 * US, 10_000.0, 25.0)]
    # every kernel has its call and no range holds one: the root and [outside any range]
    tree = s["op_tree"].select("name", "inclusive_ns", "kernels", "compute_ns").rows()
    assert tree == [("[all kernels]", 40 * US, 3, 40 * US),
                    ("[outside any range]", 40 * US, 3, 40 * US)]
    # the device window +5..+95 us: 40 us of kernels, 10 us of copy, the rest host time
    bd = s["breakdown"].row(0, named=True)
    assert (bd["window_ns"], bd["compute_ns"], bd["memory_ns"]) == (90 * US, 40 * US, 10 * US)
    # the gaps of at least 10 us: k1's end to k2's start (25 us), k2's end to the copy
    assert s["top_gaps"].select("start_ns", "dur_ns").rows() == [(B + 15 * US, 25 * US),
                                                                 (B + 50 * US, 10 * US)]
    assert all(s[n].height == 0 for n in ("communication", "stragglers", "gpu_metrics",
                                          "memory", "graphs", "phases", "layers"))
