"""The full ``breakdown`` on the chunked executors (traceparse/executor_breakdown.py)
against the in-memory path.

* a generated export with hand-computed parts where a launch window, a blocking call and
  a lazy warm-up launch each cross a window edge (edges made by another device's kernels,
  so the crossing calls lie in free time);
* every shared nsys export and the bundled samples, cut into at least ~10 windows (at most
  300 GPU rows each): the frame equals ``attribution.breakdown`` exactly, or the file must
  fall back and says why;
* the CLI: stdout byte-identical to ``--executor memory`` in every format, the fallback's
  one stderr line, refused options; Dask once (skipped without ``distributed``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO, ids, shared_files
from polars.testing import assert_frame_equal

from traceparse import executor_breakdown as eb
from traceparse.analyses import attribution
from traceparse.cli import main
from traceparse.nsys import chunks, spancheck
from traceparse.nsys.reader import read
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Scenario, write_sqlite

NSYS = shared_files("nsys", "*.sqlite")
SAMPLES = sorted((REPO / "sample_traces").glob("*.sqlite"))
#: the lookups a span may fail (traceparse/nsys/spancheck.py), and a device without
#: activity in a span its window crosses
REASONS = ("the processes with work on device", "makes CUDA calls in the trace but none",
           "framework-op ranges", spancheck.NO_RECORD, spancheck.HELD_BACK,
           "a process spawn's next CUDA call", "a host range around a gap holds CUDA calls",
           spancheck.NEXT_CALL, "has no activity in a span its window crosses")
B = 1_000 * US  # the generated export's clock starts at 1 ms
LAUNCH, SYNC = "cudaLaunchKernel_v7000", "cudaDeviceSynchronize_v3020"


def _k(name: str, start_us: int, dev: int = 0) -> Activity:
    return Activity("kernel", 7 + dev, B + start_us * US, 10 * US, name=name, device=dev)


def _c(api: str, start_us: int, end_us: int, act: Activity | None = None, tid: int = 0,
       **kw: object) -> Call:
    return Call(api, B + start_us * US, B + end_us * US, act, tid=tid, **kw)  # type: ignore[arg-type]


def _edge_export(path: Path) -> Path:
    """One process. Device 0: kernels ``a`` [0, 10) and [310, 320) us, ``w`` [1010,
    1020), ``a`` [1020, 1030); in the free time between them the launch call of the
    second ``a`` [100, 300), a cudaDeviceSynchronize [400, 600), the first launch of
    ``w`` [700, 1000) (300 us: at least 100 us and ten times the process's median launch
    call, 1 us: lazy loading) and, from thread 1, the launch of the third ``a``
    [820, 990) (170 us, not the name's first launch: launch overhead, which wins over
    the warm-up it overlaps). Device 1 (launched from thread 1): kernels ``e`` at 200,
    500 and 800 us, 10 us each, whose starts are window edges at one GPU row per
    window: the first three calls each cross one. The span of the window [800, 1010)
    reaches back the deepest queue (310 us) only: it holds neither the first ``a`` nor
    enough short calls for the median, so its parts need the carried call state."""
    a1, a2, w, a3 = _k("a", 0), _k("a", 310), _k("w", 1010), _k("a", 1020)
    e = [_k("e", t, dev=1) for t in (200, 500, 800)]
    calls = (_c(LAUNCH, -5, -4, a1), _c(LAUNCH, 100, 300, a2),
             _c(LAUNCH, 190, 191, e[0], tid=1), _c(SYNC, 400, 600, sync="context"),
             _c(LAUNCH, 490, 491, e[1], tid=1), _c(LAUNCH, 700, 1000, w),
             _c(LAUNCH, 790, 791, e[2], tid=1), _c(LAUNCH, 820, 990, a3, tid=1))
    pid = 4242
    return samplegen_sqlite.write(
        Scenario("edges", "calls across window edges", calls,
                 threads=((pid, "python3"), (pid + 1, "launcher"))), path)


#: (device) -> parts in us, by hand (module docstring of traceparse/analyses/attribution.py)
WANT = {
    # window [0, 1030): compute 40; free [10, 310) and [320, 1010): launch [100, 300)
    # and [820, 990), host sync [400, 600), warm-up [700, 1000) less the launch inside
    # it, the rest idle (990 - 370 - 130 - 200)
    0: {"window_ns": 1030, "compute_ns": 40, "launch_overhead_ns": 370, "host_sync_ns": 200,
        "warmup_ns": 130, "idle_ns": 290},
    # window [200, 810): compute 30; the sync call counts on device 1 too (same process):
    # [400, 500) and [510, 600) less the launch window [490, 491) inside it; launch windows
    # [490, 491) and [790, 791) (the first, [190, 191), is before the window)
    1: {"window_ns": 610, "compute_ns": 30, "launch_overhead_ns": 2, "host_sync_ns": 189,
        "warmup_ns": 0, "idle_ns": 389},
}


def test_generated_calls_across_window_edges(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    mem = attribution.breakdown(read(path))
    for dev, parts in WANT.items():
        row = mem.filter(mem["device_id"] == dev).row(0, named=True)
        assert {k: row[k] for k in parts} == {k: v * US for k, v in parts.items()}, dev
    p = chunks.plan(path, block_rows=1)
    starts = [t - B for t, _ in p.windows(1)]
    # each call of the docstring crosses an edge: 200 (launch), 500 (sync), 800 (warm-up)
    assert {200 * US, 500 * US, 800 * US} <= set(starts)
    for rows in (1, 2, 3, 100):
        got = eb.breakdown(path, chunk_rows=rows)
        assert got is not None
        assert_frame_equal(got[0], mem, check_exact=True)
        assert got[1] == B - 5 * US  # the first event: a1's launch call
    # the spans' own first launches and median call are not the trace's: without the
    # carried state the warm-up of device 0 is lost
    from traceparse import executor
    from traceparse.analyses.callparts import STATE_SLOT

    def stateless(*a: object) -> object:
        tl = executor.local_span(*a)  # type: ignore[arg-type]
        del tl.__dict__[STATE_SLOT]
        return tl

    monkeypatch.setattr(eb, "local_span", stateless)
    got = eb.breakdown(path, chunk_rows=1)
    assert got is not None and not got[0].equals(mem)


def _rows(path: Path) -> int:
    """Window size for ``path``: about ten windows, at most 300 GPU rows each."""
    n = sum(b.rows for b in chunks.plan(path, block_rows=1 << 40).blocks)
    return max(1, min(300, n // 10))


@pytest.mark.parametrize("path", NSYS + SAMPLES, ids=ids(NSYS + SAMPLES))
def test_exports_chunks_equal_memory(path: Path) -> None:
    tl = read(path)
    mem = attribution.breakdown(tl)
    try:
        got = eb.breakdown(str(path), chunk_rows=_rows(path))
    except eb.NotLocal as exc:  # the file falls back to memory: it says why
        assert any(r in exc.why for r in REASONS), exc.why
        return
    if got is None:
        assert mem.height == 0
        return
    assert_frame_equal(got[0], mem, check_exact=True)
    span = tl.span_ns()
    assert span is not None and got[1] == span[0]


def _cli(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["--no-cache", *args])
    return r.exit_code, r.stdout, r.stderr


def _shared(name: str) -> Path:
    hit = [p for p in NSYS if p.name == name]
    if not hit:
        pytest.skip(f"{name} not in ../shared/traces/nsys")
    return hit[0]


@pytest.mark.parametrize("name", ["mini_train", "comm_bound", "nsys-ai__mfu_2gpu_before"])
def test_cli_byte_identical(tmp_path: Path, name: str) -> None:
    # two devices with a stream wait and issuing stretches (nsys-ai), and the samples
    path = str(_shared(f"{name}.sqlite") if "__" in name
               else write_sqlite(name, tmp_path / f"{name}.sqlite"))
    for fmt in ("table", "csv", "json"):
        mem = _cli("breakdown", path, "--format", fmt)
        got = _cli("breakdown", path, "--format", fmt, "--executor", "chunks",
                   "--chunk-rows", "300" if "__" in name else "3")
        assert mem[0] == 0 and got == mem, (name, fmt)


def test_not_local_falls_back_to_memory(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(write_sqlite("mini_train", tmp_path / "mini.sqlite"))
    mem = _cli("breakdown", path, "--format", "csv")
    monkeypatch.setattr(spancheck, "_cpu_ops", lambda *a: "framework-op ranges are judged "
                        "against every call of the op")
    got = _cli("breakdown", "--executor", "chunks", "--chunk-rows", "3", path, "--format",
               "csv")
    assert got[:2] == mem[:2]
    assert got[2] == (f"traceparse: {path}: breakdown computed in memory, not in chunks: "
                      "framework-op ranges are judged against every call of the op\n")


def test_refused_options_one_line(tmp_path: Path) -> None:
    path = str(write_sqlite("compute_bound", tmp_path / "c.sqlite"))
    for extra in (["--by-stream"], ["--window", "0:9"], ["--steps", "step"]):
        rc, out, err = _cli("breakdown", path, "--executor", "chunks", *extra)
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (extra, err)
        assert "own window" in err


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                    reason="--executor dask needs the optional 'distributed' package")
def test_dask_executor_equals_memory(tmp_path: Path) -> None:
    path = str(_edge_export(tmp_path / "edges.sqlite"))
    mem = _cli("breakdown", path, "--format", "csv")
    got = _cli("breakdown", "--executor", "dask", "--workers", "2", "--chunk-rows", "1",
               path, "--format", "csv")
    assert mem[0] == 0 and got == mem


@pytest.mark.parametrize("seed", range(4))
def test_overlap_lookup_equals_pairwise(seed: int) -> None:
    # spancheck._over finds the rows that overlap a stretch of their group by one as-of
    # join on the merged stretches (a span has as many free stretches as kernels); the
    # same rows as testing every (row, stretch) pair, for disjoint stretches per device
    # and overlapping ones (rank only: several devices' stretches)
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    n, m = 300, 120
    rows = pl.DataFrame({"rank": rng.integers(0, 2, n).astype(np.int32),
                         "device_id": rng.integers(0, 2, n).astype(np.int32),
                         "start_ns": (s := rng.integers(0, 10_000, n)),
                         "end_ns": s + rng.integers(1, 300, n)})
    gs = rng.integers(0, 10_000, m)
    g = pl.DataFrame({"rank": rng.integers(0, 2, m).astype(np.int32),
                      "device_id": rng.integers(0, 2, m).astype(np.int32),
                      "start_ns": gs, "end_ns": gs + rng.integers(1, 200, m)})
    for on in (["rank", "device_id"], ["rank"], []):
        want = [any((not on or all(r[c] == x[c] for c in on))
                    and r["start_ns"] < x["end_ns"] and r["end_ns"] > x["start_ns"]
                    for x in g.iter_rows(named=True)) for r in rows.iter_rows(named=True)]
        assert spancheck._over(rows, g, on).equals(rows.filter(pl.Series(want))), on


def test_held_back_span_starts_at_the_previous_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    # nsys-ai mfu_2gpu_after at 300 rows: a span's first launch on a waited stream is
    # queued across a free stretch, so a wait before the span might hold it back; the span
    # is widened to just before that stream's (thread's) previous launch, taken from the
    # latest launch per window of pass 1 (not to the file's start), and the frame is
    # still memory's. Checked: the widened start is below the span's and above the
    # file's start, and the previous launch it names is a launch call of the export
    path = _shared("nsys-ai__mfu_2gpu_after.sqlite")
    seen: list[tuple[int, int]] = []
    orig = spancheck.held_back_start

    def spy(*a: object) -> int:
        got = orig(*a)  # type: ignore[arg-type]
        seen.append((int(a[3]), got))  # type: ignore[call-overload]
        return got

    monkeypatch.setattr(spancheck, "held_back_start", spy)
    got = eb.breakdown(str(path), chunk_rows=300)
    assert got is not None
    assert_frame_equal(got[0], attribution.breakdown(read(path)), check_exact=True)
    targeted = [(lo, new) for lo, new in seen if -chunks.END < new < lo]
    assert targeted, seen
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for lo, new in targeted:
        # new + 1 is a call start below lo that launched GPU work (a kernel's call)
        (n,) = con.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
            "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
            "AND (k.globalPid >> 24) = (r.globalTid >> 24) WHERE r.start = ?",
            (new + 1,)).fetchone()
        assert n >= 1 and new + 1 < lo
    con.close()
