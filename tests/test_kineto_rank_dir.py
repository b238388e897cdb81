"""A directory of per-rank Kineto traces that also holds JSON files which are no trace (a
capture's ``*.meta.json`` sidecar, ``ncu_kernels.json``): those files are not read, each
gets one ``ingest`` row saying why, and the ranks come from the trace files alone. A
damaged trace still fails the whole directory (it is a trace, just a broken one)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import TRACES

import traceparse.kineto.ranks
from traceparse.cli import main
from traceparse.errors import TraceError
from traceparse.kineto.ranks import read_dir
from traceparse.kineto.reader import read


def _kernel_trace(path: Path, dur_us: int) -> Path:
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10,
         "dur": dur_us}]}))
    return path


def _sidecar(path: Path) -> Path:
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "steps": 6, "torch": "2.11"}))
    return path


def _not_read(tl: traceparse.timeline.Timeline) -> list[tuple[str, str, str, int]]:
    rows = tl.ingest.filter(pl.col("table").cast(pl.String) == "files")
    return [(r["source"], str(r["outcome"]), r["reason"], r["count"])
            for r in rows.iter_rows(named=True)]


def test_sidecar_is_not_read_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    """rank_0 (a 1 us kernel), rank_1 (2 us) and run.meta.json: two ranks, 1000 and 2000 ns
    of kernels, one 'not read' row for the sidecar; the helper-process path (pool threshold
    lowered to 0) gives the same timeline, ingest included."""
    _kernel_trace(tmp_path / "rank_0.json", 1)
    _kernel_trace(tmp_path / "rank_1.json", 2)
    _sidecar(tmp_path / "run.meta.json")
    serial = read_dir(tmp_path, workers=1)
    assert serial.meta["ranks"] == [0, 1]
    assert serial.meta["files"] == ["rank_0.json", "rank_1.json"]
    assert serial.meta["not_read"] == ["run.meta.json"]
    assert serial.gpu.sort("rank")["dur_ns"].to_list() == [1000, 2000]
    assert _not_read(serial) == [
        ("run.meta.json", "not read", "not a Kineto/Chrome trace: no traceEvents key", 1)]
    monkeypatch.setattr(traceparse.kineto.ranks, "PARALLEL_MIN_BYTES", 0)
    shared = read_dir(tmp_path, workers=2)
    for table in ("gpu", "api", "ranges", "devices", "ingest", "sources"):
        assert getattr(shared, table).equals(getattr(serial, table)), table
    assert shared.meta == serial.meta


def test_file_order_ranks_skip_the_sidecar(tmp_path: Path) -> None:
    """a.json, b.meta.json, c.json carry no rank: by name order a is rank 0 and c rank 1
    (not 2: the sidecar between them is no rank). c's 3 us kernel is rank 1's."""
    _kernel_trace(tmp_path / "a.json", 1)
    _sidecar(tmp_path / "b.meta.json")
    _kernel_trace(tmp_path / "c.json", 3)
    tl = read_dir(tmp_path, workers=1)
    assert tl.meta["ranks"] == [0, 1]
    assert tl.sources.sort("rank")["file"].to_list() == ["a.json", "c.json"]
    assert set(tl.sources["rank_source"].cast(pl.String)) == {"file order"}
    assert tl.gpu.sort("rank")["dur_ns"].to_list() == [1000, 3000]


def test_no_trace_at_all_or_a_damaged_one_fails(tmp_path: Path) -> None:
    _sidecar(tmp_path / "a.meta.json")
    _sidecar(tmp_path / "b.meta.json")
    with pytest.raises(TraceError, match=r"none a trace \(a.meta.json: not a Kineto"):
        read_dir(tmp_path)
    (tmp_path / "rank_0.json").write_bytes(b'{"traceEvents": [')
    with pytest.raises(TraceError, match=r"rank_0\.json: .*invalid JSON"):
        read_dir(tmp_path)


def test_cli_info_and_summary_on_a_directory_with_a_sidecar(tmp_path: Path) -> None:
    _kernel_trace(tmp_path / "rank_0.json", 1)
    _kernel_trace(tmp_path / "rank_1.json", 2)
    _sidecar(tmp_path / "run.meta.json")
    res = CliRunner().invoke(main, ["--no-cache", "info", str(tmp_path), "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert ("not read run.meta.json,(not a Kineto/Chrome trace: no traceEvents key)"
            in res.output)
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(tmp_path)])
    assert res.exit_code == 0, res.output


@pytest.mark.shared
def test_real_capture_directory_reads_its_one_trace() -> None:
    """traces/gpu/h200 holds one trace and two JSON files that are none (the capture's
    meta sidecar and the ncu kernel list; each opened here: no traceEvents key). Read as a
    directory it is the trace alone, as rank 0, plus one 'not read' row per other file."""
    d = TRACES / "gpu" / "h200"
    others = sorted(p.name for p in d.glob("*.json"))
    for name in others:
        assert "traceEvents" not in json.loads((d / name).read_text())
    rest = sorted(p.name for p in d.iterdir() if not p.name.endswith((".json", ".json.gz")))
    assert "README.md" in rest and "ncu_kernels.raw.csv.gz" in rest
    tl = read_dir(d, workers=1)
    alone = read(d / "gpt_train_decode.json.gz")
    assert tl.meta["files"] == ["gpt_train_decode.json.gz"]
    assert others == ["gpt_train_decode.meta.json", "ncu_kernels.json"]
    assert tl.meta["not_read"] == sorted(others + rest)
    why = dict(_not_read(tl)[i][::2] for i in range(len(others + rest)))
    assert {why[n] for n in others} == {"not a Kineto/Chrome trace: no traceEvents key"}
    assert {why[n] for n in rest} == {"name not *.json or *.json.gz: not a Kineto trace"}
    for table in ("gpu", "api", "ranges", "devices"):
        assert getattr(tl, table).equals(getattr(alone, table)), table
    # the one difference: where its rank 0 came from (first trace in name order, not
    # the single file's default)
    assert tl.sources.drop("rank_source").equals(alone.sources.drop("rank_source"))
    assert tl.sources["rank_source"].cast(pl.String).to_list() == ["file order"]
    assert [r[0] for r in _not_read(tl)] == sorted(others + rest)
    trace_rows = tl.ingest.filter(pl.col("table").cast(pl.String) != "files")
    assert trace_rows.equals(alone.ingest)
    # every event of the file is accounted for: parsed + skipped = the events in the JSON
    n_events = len(json.loads(gzip.decompress((d / "gpt_train_decode.json.gz").read_bytes())
                              )["traceEvents"])
    assert int(trace_rows["count"].sum()) == n_events == 38_109


def _ranked(path: Path, rank: int, ts_us: int, gpu: str = "NVIDIA H200") -> Path:
    path.write_text(json.dumps({
        "distributedInfo": {"rank": rank, "world_size": 2},
        "deviceProperties": [{"id": 0, "name": gpu}],
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                         "ts": ts_us, "dur": 5, "args": {"device": 0, "stream": 7}}]}))
    return path


@pytest.mark.parametrize(("second", "message"), [
    # rank 1 starts 5 s after rank 0's 5 us kernel ended: 4.999995 s apart
    ({"ts_us": 5_000_010}, "rank_0.json and rank_1.json are not one job: their captures do "
                           "not overlap in time (5.00 s apart) (files of one directory, read "
                           "as its ranks); give --as-one-job to analyse them together anyway"),
    ({"ts_us": 12, "gpu": "NVIDIA H100 80GB HBM3"},
     "rank_0.json and rank_1.json are not one job: different GPUs (NVIDIA H200 vs NVIDIA "
     "H100 80GB HBM3) (files of one directory"),
])
def test_a_directory_of_runs_is_not_one_job(tmp_path: Path, second: dict, message: str
                                             ) -> None:
    """The files of a rank directory must be the ranks of one job, as several inputs must:
    else exit 2 with one line, and --as-one-job analyses them anyway."""
    _ranked(tmp_path / "rank_0.json", 0, 10)
    _ranked(tmp_path / "rank_1.json", 1, **second)
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(tmp_path)])
    assert res.exit_code == 2
    assert message in res.output and len(res.output.strip().splitlines()) == 1
    assert "Traceback" not in res.output
    res = CliRunner().invoke(main, ["--no-cache", "summary", "--as-one-job", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "2 devices" in res.output


def test_overlapping_ranks_are_one_job(tmp_path: Path) -> None:
    _ranked(tmp_path / "rank_0.json", 0, 10)
    _ranked(tmp_path / "rank_1.json", 1, 12)  # 12-17 us overlaps 10-15 us
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(tmp_path)])
    assert res.exit_code == 0, res.output


@pytest.mark.shared
def test_real_directories_one_job_or_not(tmp_path: Path) -> None:
    """The 8 DLRM ranks (captured together, each claims its rank) are one job; the 13 H200
    scenario captures (separate runs, seconds apart: the first two files' windows end and
    start 5.27 s apart) are not, and the report is not written."""
    from traceparse.jobcheck import rank_disagreement

    for f in (TRACES / "torch").glob("param__dlrm_8rank__worker*"):
        (tmp_path / f.name).symlink_to(f)
    assert rank_disagreement(read_dir(tmp_path)) is None
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(tmp_path)])
    assert res.exit_code == 0 and "8 devices" in res.output, res.output
    out = tmp_path.parent / "scn.html"
    res = CliRunner().invoke(main, ["--no-cache", "report", str(TRACES / "gpu" / "scenarios"),
                                    "-o", str(out)])
    assert res.exit_code == 2
    assert ("gemm_roofline-sweep.json.gz and host_sync-bottleneck.json.gz are not one job: "
            "their captures do not overlap in time (5.27 s apart)") in res.output
    assert not out.exists()


def test_report_lists_the_file_under_no_rank(tmp_path: Path) -> None:
    """The report's 'not read' table lists the sidecar with no rank (it belongs to none)
    and one row; the trace files' own sources are not in it (nothing of them unread)."""
    from traceparse.reports.payload import build_payload

    _kernel_trace(tmp_path / "rank_0.json", 1)
    _kernel_trace(tmp_path / "rank_1.json", 2)
    _sidecar(tmp_path / "run.meta.json")
    p = build_payload([read_dir(tmp_path, workers=1)])
    rows = p["unread_tables"]["rows"]
    assert [(r["rank"], r["source"], r["outcome"], r["count"]) for r in rows] == [
        (None, "run.meta.json", "not read", 1)]


def test_a_glob_leaves_out_what_is_no_trace(tmp_path: Path) -> None:
    """'DIR/run.*' matches the trace and its sidecar: the sidecar is left out with one
    line on stderr (as a rank directory leaves it out) and the trace is analysed; a glob
    that matches no trace at all, or a sidecar named as such, is exit 2 with one line."""
    _kernel_trace(tmp_path / "run.json", 4)
    _sidecar(tmp_path / "run.meta.json")
    runner = CliRunner()
    for cmd in (["summary"], ["info"], ["calibrate", "-o", str(tmp_path / "cal.json")]):
        res = runner.invoke(main, ["--no-cache", *cmd, str(tmp_path / "run.*")])
        assert res.exit_code == 0, (cmd, res.output)
        assert ("traceparse: not read, no trace (not a Kineto/Chrome trace: no traceEvents "
                "key): run.meta.json") in res.stderr
    res = runner.invoke(main, ["--no-cache", "summary", str(tmp_path / "run.*")])
    assert res.stdout.startswith("Trace: 4.00 µs, 1 device, 1 kernel, 0 memory ops")
    res = runner.invoke(main, ["--no-cache", "summary", str(tmp_path / "*.meta.json")])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"traceparse: error: {tmp_path / '*.meta.json'}: matches no trace (first: "
        "run.meta.json: not a Kineto/Chrome trace: no traceEvents key)")
    res = runner.invoke(main, ["--no-cache", "summary", str(tmp_path / "run.meta.json")])
    assert res.exit_code == 2 and "run.meta.json: not a Kineto/Chrome trace" in res.output
    out = tmp_path / "r.html"
    res = runner.invoke(main, ["--no-cache", "report", str(tmp_path / "run.*"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.exists()


def test_every_entry_of_the_directory_is_accounted_for(tmp_path: Path) -> None:
    """Besides the two ranks, a log file, a subdirectory and a sidecar: each is one
    'not read' row with its reason, so the directory's 5 entries are 2 read + 3 not read."""
    _kernel_trace(tmp_path / "rank_0.json", 1)
    _kernel_trace(tmp_path / "rank_1.json.gz", 2)
    (tmp_path / "rank_1.json.gz").write_bytes(gzip.compress((tmp_path / "rank_1.json.gz")
                                                            .read_bytes()))
    (tmp_path / "train.log").write_text("step 1\n")
    (tmp_path / "old").mkdir()
    _sidecar(tmp_path / "run.meta.json")
    tl = read_dir(tmp_path, workers=1)
    assert tl.meta["ranks"] == [0, 1]
    assert [(s, r) for s, _o, r, _n in _not_read(tl)] == [
        ("old", "a directory: the ranks are the files of this one"),
        ("run.meta.json", "not a Kineto/Chrome trace: no traceEvents key"),
        ("train.log", "name not *.json or *.json.gz: not a Kineto trace")]
    assert len(tl.meta["files"]) + len(tl.meta["not_read"]) == len(list(tmp_path.iterdir()))


def test_cached_directory_misses_when_an_unread_entry_comes(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """A rank directory read through the cache is a hit while nothing changes; a file that
    is no trace added beside the ranks is a miss (its 'not read' row is new), although no
    rank file changed."""
    import traceparse
    from traceparse import loader
    from traceparse.cache import Cache

    d = tmp_path / "ranks"
    d.mkdir()
    _kernel_trace(d / "rank_0.json", 1)
    _kernel_trace(d / "rank_1.json", 2)
    calls = []
    real = loader._parse
    monkeypatch.setattr(loader, "_parse",
                        lambda path, kind, tables=None: calls.append(path) or real(path, kind,
                                                                                    tables))
    store = Cache(tmp_path / "cache")
    traceparse.load(d, cache=store)
    traceparse.load(d, cache=store)
    assert len(calls) == 1
    _sidecar(d / "run.meta.json")
    tl = traceparse.load(d, cache=store)
    assert len(calls) == 2
    assert tl.meta["not_read"] == ["run.meta.json"]


def test_rank_spans_from_the_rows_when_sources_lack_them(tmp_path: Path) -> None:
    """The ranks' windows come from ``sources``; without them (nulls), from the rows: the
    same answer. Rank 0: 10-15 us, rank 1: 5,000,010-5,000,015 us."""
    from traceparse.jobcheck import _rank_spans, rank_disagreement

    _ranked(tmp_path / "rank_0.json", 0, 10)
    _ranked(tmp_path / "rank_1.json", 1, 5_000_010)
    tl = read_dir(tmp_path, workers=1)
    spans = _rank_spans(tl)
    assert {r: (b - a) for r, (a, b) in spans.items()} == {0: 5_000, 1: 5_000}
    assert spans[1][0] - spans[0][1] == 4_999_995_000
    why = rank_disagreement(tl)
    tl.sources = tl.sources.with_columns(pl.lit(None, pl.Int64).alias("start_ns"))
    assert _rank_spans(tl) == spans
    assert rank_disagreement(tl) == why and why is not None and "5.00 s apart" in why


def test_a_log_directory_names_its_run_directories(tmp_path: Path) -> None:
    """A TensorBoard-style log directory holds one subdirectory of trace files per run:
    pointed at the log directory, the error names the runs and how many files each has;
    an empty subdirectory and a hidden one are not named."""
    for run, n in (("resnet", 2), ("bert", 1)):
        (tmp_path / run).mkdir()
        for k in range(n):
            _kernel_trace(tmp_path / run / f"w{k}.pt.trace.json", 1)
    (tmp_path / "empty").mkdir()
    (tmp_path / ".cache").mkdir()
    _kernel_trace(tmp_path / ".cache" / "x.json", 1)
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == (
        f"traceparse: error: {tmp_path}: no Kineto trace files (*.json, *.json.gz) in the "
        "directory; subdirectories with trace files: bert (1), resnet (2): give one of them")
