"""``fixes`` and the report payload on the chunked executors (traceparse/payload_chunks.py,
traceparse/payload_facts.py) against the in-memory :func:`build_payload` (its ``timeline``
lanes left out: built apart).

* a generated export (one device of unknown SM count, no blocking call) cut one GPU row
  per piece, two, and all in one: the whole payload equals memory's and the fixes are
  the hand-computed ones; the CLI prints memory's bytes in table, csv and json, no stderr
  (one with host-sync time: tests/test_chunked_host_sync.py);
* every shared nsys export and bundled sample: the CLI prints memory's bytes and names
  the section it computed in memory (listed per export: a new one fails); the exports
  that run in pieces give memory's bytes with no stderr line of their own;
* where the payload runs in pieces (:data:`IN_PIECES`), every section equals memory's, the
  underfilled launches (tests/test_chunked_underfilled.py) and the host-sync ops
  (tests/test_chunked_host_sync.py) included.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from chunked_exports import LAUNCH, pieces_export
from click.testing import CliRunner
from conftest import REPO, ids, shared_files

from traceparse import payload_chunks as pc
from traceparse.cli import main
from traceparse.nsys.reader import read
from traceparse.reports.fixes import fixes_of
from traceparse.reports.payload import build_payload
from traceparse.samplegen.scenarios import US, Activity, Call

NSYS = shared_files("nsys", "*.sqlite")
SAMPLES = sorted((REPO / "sample_traces").glob("*.sqlite"))
FILES = NSYS + SAMPLES
HAVE_DASK = importlib.util.find_spec("distributed") is not None
#: The section each export's fixes are computed in memory for (stderr); None: computed in
#: pieces, or no GPU activity (the memory path words it): memory's stderr only. The
#: sections named are the summary's own (test_chunked_summary).
FALLBACKS = {
    "abacus__report2": None, "casio__nerf_output-file": None,
    "darknet-thesis__keras_darknet53": None, "dlprof__nsys_profile": None,
    "fuser__report1_h200": None, "instant-ngp__report13": None,
    "memfusion__report1": None, "nsys-ai__mfu_2gpu_after": "savings",
    "nsys-ai__mfu_2gpu_before": "savings", "openacc__report12": None,
    "p2p-acc__mpiV100": "savings", "pipit__perlmutter-cloverleaf-cuda": None,
    "pipit__saxpy-mpi-cuda_nsys_perlmutter0": None, "qcu__report10": None,
    "resest__report2": "gpu_metrics", "rodinia__report2": None,
    "sc23omp__report3": None, "sglang__baseline-report": None,
    "uvm-pytorch__report4": "memory",
    "comm_bound": "savings", "compute_bound": None, "launch_bound": None,
    "memory_bound": None, "mini_train": "verdict", "sync_bound": None}
#: Exports whose payload runs in pieces.
IN_PIECES = [p for p in FILES if p.stem in FALLBACKS and FALLBACKS[p.stem] is None
             and p.stem != "qcu__report10"]


def _export(path: Path) -> Path:
    """:func:`~chunked_exports.pieces_calls`, a 3 us elementwise kernel [99, 102) us and
    an 8 KiB device-to-pinned copy [113, 118): four kernels and two pinned copies on one
    device whose SM count the export does not give (so no launch can be underfilled) and
    no blocking call (no host-sync time)."""
    more = (
        Call(LAUNCH, 96 * US, 97 * US, Activity("kernel", 7, 99 * US, 3 * US,
                                                "vectorized_elementwise_kernel")),
        Call("cudaMemcpyAsync", 110 * US, 112 * US,
             Activity("memcpy", 7, 113 * US, 5 * US, bytes=8192, copy_kind="DtoH",
                      src_kind="Device", dst_kind="Pinned")),
    )
    pieces_export(path, "fixes_edges", "fixes pieces", more)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET smCount = 0, name = 'Test GPU'")
    return path


@cache
def _memory(path: Path) -> dict[str, Any]:
    out = dict(build_payload(read(path)))
    out.pop("timeline")
    return out


def _cli(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["--no-cache", "fixes", *args])


def _same(got: dict[str, Any], want: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Section by section (``skip``: ``section.key`` left out)."""
    assert sorted(got) == sorted(want)
    for name in want:
        a, b = dict(got[name]) if isinstance(got[name], dict) else got[name], want[name]
        if isinstance(b, dict):
            b = dict(b)
            for s in skip:
                sec, _, key = s.partition(".")
                if sec == name:
                    a.pop(key), b.pop(key)
        assert a == b, f"section {name} differs"


@pytest.mark.parametrize("rows", [1, 2, 100])
def test_generated_export_in_pieces(tmp_path: Path, rows: int) -> None:
    path = _export(tmp_path / "fixes.sqlite")
    got = pc.payload(str(path), chunk_rows=rows)
    assert got is not None and "timeline" not in got
    _same(got, _memory(path))
    fixes, why = fixes_of(got)
    # CUDA graphs: the replay without issuing time, 113 -> 96 us; copies: the 15 us of
    # copies with nothing beside them (under the 43 us of kernels)
    assert [(f["id"], f["saving_ns"], f["window_ns"]) for f in fixes] == [
        ("cuda-graphs", 17 * US, 113 * US), ("overlap-copies", 15 * US, 113 * US)]
    assert why == ""
    # every kernel, copy and launch counted once across the pieces
    assert (got["kernels"]["instances"], got["kernels"]["total_ns"]) == (4, 43 * US)
    assert got["devices"][0]["activities"] == 6 and got["devices"][0]["busy_ns"] == 58 * US
    assert got["evidence"]["pageable_copies"]["pinned"]["bytes"] == 12288
    assert got["evidence"]["tiny_memory_kernels"]["top"] == [
        {"name": "vectorized_elementwise_kernel", "count": 1, "total_ns": 3 * US}]
    assert got["launches"]["linked"] == 4
    assert {r["table"]: r["count"] for r in got["provenance"]["parsed"]}["gpu"] == 6


def test_generated_export_cli(tmp_path: Path) -> None:
    path = str(_export(tmp_path / "fixes.sqlite"))
    for fmt in ("table", "csv", "json"):
        mem = _cli([path, "--format", fmt])
        got = _cli([path, "--format", fmt, "--executor", "chunks", "--chunk-rows", "1"])
        assert (got.exit_code, got.stderr) == (0, ""), got.output
        assert got.stdout == mem.stdout and "cuda-graphs" in got.stdout


@pytest.mark.skipif(not HAVE_DASK, reason="needs distributed")
def test_generated_export_dask(tmp_path: Path) -> None:
    path = str(_export(tmp_path / "fixes.sqlite"))
    got = _cli([path, "--format", "json", "--executor", "dask", "-j", "2", "--chunk-rows",
                "2"])
    assert (got.exit_code, got.stderr) == (0, ""), got.output
    assert got.stdout == _cli([path, "--format", "json"]).stdout


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_cli_falls_back_as_listed(path: Path) -> None:
    section = FALLBACKS[path.stem]
    rows = "3" if path in SAMPLES else "1000"
    mem = _cli([str(path), "--format", "json"])
    got = _cli([str(path), "--format", "json", "--executor", "chunks", "--chunk-rows", rows])
    assert got.exit_code == 0, got.output
    assert got.stdout == mem.stdout
    line = f"traceparse: {path}: fixes computed in memory, not in chunks: {section}: "
    # then memory's own line (why no fix, or the fixes withheld), if any
    first, _, rest = got.stderr.partition("\n")
    assert (first.startswith(line) and rest == mem.stderr) if section \
        else got.stderr == mem.stderr


@pytest.mark.parametrize("path", IN_PIECES, ids=ids(IN_PIECES))
def test_payload_in_pieces_equals_memory(path: Path) -> None:
    """Every section of the payload composed in pieces equals memory's, the
    recommendations (the fixes) included."""
    rows = 3 if path in SAMPLES else 300
    got = pc.payload(str(path), chunk_rows=rows)
    assert got is not None
    _same(got, _memory(path))


def test_cli_refuses(tmp_path: Path) -> None:
    got = _cli(["a.sqlite", "b.sqlite", "--executor", "chunks"])
    assert got.exit_code != 0 and "reads one nsys SQLite export" in got.output
    path = _export(tmp_path / "fixes.sqlite")
    got = _cli([str(path), "--executor", "chunks", "--gpu", "H100"])
    assert got.exit_code == 2 and "takes no --gpu" in got.output


def _report(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["--no-cache", "report", *args])


@pytest.mark.parametrize("rows", [1, 100])
def test_generated_export_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 rows: int) -> None:
    """``report --executor chunks``: the payload in pieces plus the overview lanes in
    pieces, the same HTML bytes as memory's; the lanes' counts come from the payload's
    pass 1 (the lanes' own first pass is not run)."""
    from traceparse import lanes_chunks

    def again(*args: Any) -> None:
        raise AssertionError("the lanes' counts read apart from the payload's pass 1")

    monkeypatch.setattr(lanes_chunks, "counts_task", again)
    path = str(_export(tmp_path / "fixes.sqlite"))
    mem, got = tmp_path / "mem.html", tmp_path / "got.html"
    assert _report([path, "-o", str(mem)]).exit_code == 0
    run = _report([path, "-o", str(got), "--executor", "chunks", "--chunk-rows", str(rows)])
    assert run.exit_code == 0 and run.stderr.startswith(f"wrote {got} "), run.output
    assert "not in chunks" not in run.stderr
    assert got.read_bytes() == mem.read_bytes()
    lanes = pc.report_payload(path, chunk_rows=rows)
    assert lanes is not None
    # one lane (device 0, stream 7): 4 kernels + 2 copies drawn exactly, 58 us busy
    (lane,) = lanes["timeline"]["lanes"]
    assert (lanes["timeline"]["mode"], lane["events"], lane["busy_ns"]) == ("exact", 6, 58 * US)


def test_report_falls_back_and_refuses(tmp_path: Path) -> None:
    sample = REPO / "sample_traces" / "mini_train.sqlite"
    mem, got = tmp_path / "mem.html", tmp_path / "got.html"
    assert _report([str(sample), "-o", str(mem)]).exit_code == 0
    run = _report([str(sample), "-o", str(got), "--executor", "chunks", "--chunk-rows", "3"])
    assert run.exit_code == 0, run.output
    assert run.stderr.startswith(f"traceparse: {sample}: report computed in memory, not in "
                                 f"chunks: {FALLBACKS['mini_train']}: ")
    assert got.read_bytes() == mem.read_bytes()
    path = str(_export(tmp_path / "fixes.sqlite"))
    run = _report([path, "-o", str(tmp_path / "x.html"), "--executor", "chunks", "--ncu",
                   str(REPO / "sample_traces" / "mini_train.ncu.csv")])
    assert run.exit_code == 2 and "takes no --ncu" in run.output
    assert not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("path", IN_PIECES, ids=ids(IN_PIECES))
def test_report_in_pieces_equals_memory(path: Path, tmp_path: Path) -> None:
    """``report --executor chunks`` on a real export whose payload runs in pieces: no
    stderr line of its own and memory's HTML bytes (the overview lanes in pieces too)."""
    rows = "3" if path in SAMPLES else "300"
    mem, got = tmp_path / "mem.html", tmp_path / "got.html"
    assert _report([str(path), "-o", str(mem)]).exit_code == 0
    run = _report([str(path), "-o", str(got), "--executor", "chunks", "--chunk-rows", rows])
    assert run.exit_code == 0 and "not in chunks" not in run.stderr, run.output
    assert got.read_bytes() == mem.read_bytes()
