"""One CLI: the same inputs, option names, output rule and units in every command
(docs/cli.md). Numbers are checked against the generated samples' hand-built events
(traceparse.samplegen) or against the trace files read directly."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import stat
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from tests.conftest import REPO, TRACES, shared_files
from traceparse import units
from traceparse.cli import main
from traceparse.samplegen import scenarios as samplegen
from traceparse.samplegen import sqlite as samplegen_sqlite

SAMPLES = REPO / "sample_traces"
COMPUTE = str(SAMPLES / "compute_bound.sqlite")
MINI = str(SAMPLES / "mini_train.sqlite")
COMM = str(SAMPLES / "comm_bound.sqlite")

#: commands that analyse traces (take TRACE...)
ANALYSIS = ["info", "summary", "breakdown", "gaps", "launches", "comm", "steps", "nvtx",
            "kernels", "memops", "api", "roofline", "report", "convert", "calibrate",
            "predict", "whatif"]
#: commands that print data (--format, -o, --force)
DATA = ["info", "summary", "breakdown", "gaps", "launches", "comm", "steps", "nvtx",
        "kernels", "memops", "api", "roofline", "gpus", "predict", "whatif", "diff"]
CEILINGS = ["summary", "report", "roofline", "calibrate", "predict", "whatif"]
STEPS = ["breakdown", "steps", "predict", "whatif", "diff"]


def _run(*args: str, code: int = 0) -> Result:
    res = CliRunner().invoke(main, ["--no-cache", *args])
    assert res.exit_code == code, res.output
    return res


def _options(name: str) -> dict[str, click.Parameter]:
    cmd = main.commands[name]
    return {o: p for p in cmd.params for o in p.opts if not getattr(p, "hidden", False)}


@pytest.mark.parametrize("name", ANALYSIS)
def test_analysis_commands_take_several_traces(name: str) -> None:
    args = [p for p in main.commands[name].params if isinstance(p, click.Argument)]
    assert [(a.name, a.nargs) for a in args] == [("traces", -1)]


@pytest.mark.parametrize("name", DATA)
def test_data_commands_share_output_options(name: str) -> None:
    opts = _options(name)
    assert {"--format", "-o", "--output", "--force"} <= set(opts)
    assert {"table", "csv", "json"} <= set(opts["--format"].type.choices)  # type: ignore[attr-defined]


def test_one_name_per_concept_in_help() -> None:
    for name in CEILINGS:
        assert "--gpu" in _options(name), name
    for name in STEPS:
        assert "--steps" in _options(name), name
    for name in ("gaps", "summary"):
        assert "--min-gap-us" in _options(name), name
    shown = {o for name in main.commands for o in _options(name)}
    assert not shown & {"--step", "--step-regex", "--min-us"}
    help_text = _run("whatif", "--help").stdout
    assert "--steps REGEX" in help_text and "--step-regex" not in help_text


def test_summary_of_two_traces_is_one_two_rank_summary() -> None:
    # two sample runs captured one after the other are not one job (issue 25): exit 2 with
    # one line, unless --as-one-job says they are
    refused = _run("summary", MINI, COMM, code=2)
    assert "are not one job" in refused.output and refused.output.count("\n") == 1
    res = _run("summary", "--as-one-job", MINI, COMM, "--format", "json")
    out = json.loads(res.stdout)
    bd = out["sections"]["breakdown"]
    assert [(r["rank"], r["device_id"]) for r in bd] == [(0, 0), (1, 0)]
    # each rank's window is its own trace's: the first to last GPU activity of the sample
    for row, name in zip(bd, ("mini_train", "comm_bound"), strict=True):
        sc = samplegen.scenario(name)
        acts = [c.activity for c in sc.calls if c.activity is not None]
        assert row["window_ns"] == max(a.end_ns for a in acts) - min(a.start_ns for a in acts)
    text = _run("summary", "--as-one-job", MINI, COMM).stdout
    assert "2 devices," in text


def test_glob_and_old_spellings(tmp_path: Path) -> None:
    one = _run("gaps", str(SAMPLES / "sync_b*.sqlite"), "--min-gap-us", "170", "--format",
               "csv").stdout
    old = _run("gaps", str(SAMPLES / "sync_bound.sqlite"), "--min-us", "170", "--format",
               "csv").stdout
    assert one == old
    rows = list(csv.DictReader(io.StringIO(one)))
    assert rows and all(int(r["dur_ns"]) >= 170_000 for r in rows)
    res = _run("gaps", str(tmp_path / "nothing*.sqlite"), code=2)
    assert "matches no file" in res.output and res.output.count("\n") == 1
    a = _run("breakdown", MINI, "--steps", "^step", "--format", "csv").stdout
    b = _run("breakdown", MINI, "--step-regex", "^step", "--format", "csv").stdout
    assert a == b and a.count("\n") == 4  # header + 3 steps


def test_overwrite_rule_and_wrote_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "k.csv"
    first = _run("kernels", COMPUTE, "--format", "csv", "-o", str(out))
    assert first.stdout == "" and first.stderr == f"wrote {out}\n"
    assert out.read_text().startswith("Time (%),Total Time (ns)")
    out.write_text("mine")
    again = _run("kernels", COMPUTE, "-o", str(out), code=2)
    assert "exists; use --force" in again.stderr and out.read_text() == "mine"
    _run("kernels", COMPUTE, "--format", "csv", "-o", str(out), "--force")
    assert out.read_text().startswith("Time (%)")
    cal = tmp_path / "cal.json"
    cal.write_text("{}")
    _run("calibrate", COMPUTE, "-o", str(cal), code=2)
    assert cal.read_text() == "{}"


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_outputs_honour_the_umask(tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        _run("kernels", COMPUTE, "-o", str(tmp_path / "k.txt"))
        _run("convert", COMPUTE, "-o", str(tmp_path / "tl"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "k.txt").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "tl").stat().st_mode) == 0o777 & ~mask


def test_convert_to_gzip_chrome(tmp_path: Path) -> None:
    out = tmp_path / "t.json.gz"
    res = _run("convert", COMPUTE, "--to", "chrome", "-o", str(out))
    assert res.stderr.startswith(f"wrote {out} (")
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    gpu = [e for e in events if e.get("ph") == "X"
           and not str(e.get("cat")).startswith(("api", "attribution"))]
    sc = samplegen.scenario("compute_bound")
    assert len(gpu) == sum(1 for c in sc.calls if c.activity is not None) == 6


@pytest.mark.parametrize(("args", "words"), [
    (["comm", COMPUTE], "no NCCL/RCCL collective kernels"),
    (["steps", COMPUTE], "no step markers"),
    (["nvtx", COMPUTE], "no NVTX ranges"),
    (["breakdown", MINI, "--steps", "nomatch"], "no host range matches"),
])
def test_empty_results_say_why_in_one_line(args: list[str], words: str) -> None:
    out = _run(*args).stdout
    assert out.count("\n") == 1 and words in out


def test_empty_trace_events(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": []}')
    for name in ("summary", "breakdown", "gaps", "comm", "steps", "nvtx", "launches"):
        out = _run(name, str(path)).stdout
        assert out == ("empty.json: no events in the trace (no GPU activity, API calls or "
                       "ranges), nothing to analyse\n"), name


def test_whatif_speedup_matching_nothing_exits_2() -> None:
    res = _run("whatif", COMPUTE, "--speedup", "no_such_kernel=2", code=2)
    assert "matches no kernel" in res.stderr and res.stderr.count("\n") == 1
    ok = _run("whatif", COMPUTE, "--speedup", "gemm=2", "--format", "json")
    assert json.loads(ok.stdout)


def test_unknown_gpu_exits_2() -> None:
    res = _run("summary", COMPUTE, "--gpu", "Voodoo 3", code=2)
    assert "not in the GPU table" in res.stderr


def test_gpu_override_reaches_the_ceilings(tmp_path: Path) -> None:
    table = list(csv.DictReader(io.StringIO(_run("gpus", "--format", "csv").stdout)))
    a100 = next(r for r in table if r["name"] == "A100 SXM4 80GB")
    plain, forced = tmp_path / "plain.json", tmp_path / "a100.json"
    _run("calibrate", COMPUTE, "-o", str(plain))
    _run("calibrate", COMPUTE, "-o", str(forced), "--gpu", "A100 SXM4 80GB")
    dev = json.loads(plain.read_text())["devices"]
    assert [d["device_model"] for d in dev] == [samplegen_sqlite.GPU_INFO["name"]]
    dev = json.loads(forced.read_text())["devices"]
    assert [(d["device_model"], d["ceiling_table_row"]) for d in dev] == [
        ("A100 SXM4 80GB", "A100 SXM4 80GB")]
    mem = [c for c in dev[0]["ceilings"] if c["kind"] == "memory"]
    assert mem and mem[0]["value"] == pytest.approx(float(a100["mem_bandwidth_gbs"]) * 1e9)


def test_tables_use_human_units() -> None:
    text = _run("summary", MINI).stdout
    sc = samplegen.scenario("mini_train")
    t0 = sc.span_ns()[0]
    assert "µs" in text and " us" not in text and "device(s)" not in text
    assert str(t0) not in text  # no raw clock values
    gaps = _run("gaps", str(SAMPLES / "sync_bound.sqlite")).stdout
    header = gaps.splitlines()[0].split()
    assert header[:5] == ["rank", "device_id", "start", "end", "dur"]
    assert "+" in gaps.splitlines()[2]


TORCH_AMD = shared_files("torch", "hta__mi250_*.json.gz")


@pytest.mark.parametrize("path", TORCH_AMD, ids=lambda p: p.name)
def test_amd_trace_speaks_amd(path: Path) -> None:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        props = json.load(fh)["deviceProperties"]
    info = _run("info", str(path)).stdout
    for p in props:
        assert f"{p['numSms']} compute units" in info
        # the device memory the trace states (totalGlobalMem), in powers of 1000
        assert f", {units.size(p['totalGlobalMem'])} memory" in info
    assert " SMs" not in info
    text = _run("summary", str(path)).stdout
    assert "CUDA graph" not in text


def test_roofline_gpu_override_sets_the_roofs() -> None:
    ncu = str(REPO / "tests" / "corpus_bad" / "ncu_good.csv")
    table = list(csv.DictReader(io.StringIO(_run("gpus", "--format", "csv").stdout)))
    a100 = next(r for r in table if r["name"] == "A100 SXM4 80GB")
    plain = list(csv.DictReader(io.StringIO(_run("roofline", ncu, "--format", "csv").stdout)))
    assert plain and all(r["peak_dram_bytes_per_s"] == "" for r in plain)  # GPU unnamed
    forced = list(csv.DictReader(io.StringIO(
        _run("roofline", ncu, "--format", "csv", "--gpu", "A100 SXM4 80GB").stdout)))
    assert [float(r["peak_dram_bytes_per_s"]) for r in forced] == [
        float(a100["mem_bandwidth_gbs"]) * 1e9] * len(plain)


def test_gap_times_are_one_figure_in_summary_and_gaps() -> None:
    path = str(SAMPLES / "sync_bound.sqlite")
    t0 = samplegen.scenario("sync_bound").span_ns()[0]  # first call/activity of the sample
    rows = list(csv.DictReader(io.StringIO(_run("gaps", path, "--format", "csv").stdout)))
    rel = sorted(int(r["start_ns"]) - t0 for r in rows)
    assert rel == [160_000, 430_000]
    summary = _run("summary", path).stdout
    table = _run("gaps", path).stdout
    for us in (160, 430):
        assert f"at +{us} µs" in summary and f"+{us} µs" in table


def test_statistics_tables_show_durations() -> None:
    walls = sorted(r.end_ns - r.start_ns for r in samplegen.scenario("mini_train").ranges
                   if r.name.startswith("step "))
    assert walls == [1_757_000, 1_767_000, 1_777_000]
    lines = _run("steps", MINI, "--steps", "^step", "--summary").stdout.splitlines()
    wall = next(line.split() for line in lines if line.startswith("wall "))
    # metric steps outliers mean p50 p95 p99 min max, durations as "value unit"; 3 steps
    # are too few to call one an outlier (steps.MIN_OUTLIER_STEPS): the count is blank
    assert wall[:2] == ["wall", "3"]
    assert wall[2:4] == ["1.77", "ms"] and wall[4:6] == ["1.77", "ms"]  # mean, p50
    assert wall[-4:] == ["1.76", "ms", "1.78", "ms"]  # min 1.757 ms, max 1.777 ms


@pytest.mark.shared
def test_info_names_an_unnamed_amd_device_as_the_roofline_identifies_it() -> None:
    """``tracelens__vllm_prefilldecode_piecewise_graph_execution``: deviceProperties name
    '' with computeMajor 9, computeMinor 4 (gfx94x), 304 CUs and 206,141,652,992 bytes
    (192 GiB): the signature of an MI300X in ``roofline/gpus.py``; ``info`` said
    "unknown device" while the roofline used the MI300X's ceilings."""
    path = TRACES / "torch" / "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz"
    if not path.exists():
        pytest.skip(f"real-trace corpus not present: {path}")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        props = json.load(fh)["deviceProperties"]
    assert {(p["name"], p["computeMajor"], p["computeMinor"], p["numSms"],
             round(p["totalGlobalMem"] / 2**30)) for p in props} == {("", 9, 4, 304, 192)}
    info = _run("info", str(path)).stdout
    lines = [ln for ln in info.splitlines() if ln.startswith("device ")]
    assert len(lines) == len(props)
    assert all("MI300X (identified)" in ln for ln in lines)
    assert "unknown device" not in info
