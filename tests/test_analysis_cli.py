"""CLI: breakdown, gaps, summary on the generated samples (numbers from the hand-worked
goldens in test_attribution_golden.py)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import REPO
from traceparse.cli import main

SAMPLES = REPO / "sample_traces"


def _run(*args: str) -> str:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_breakdown_csv_matches_golden() -> None:
    out = _run("breakdown", str(SAMPLES / "launch_bound.sqlite"), "--format", "csv")
    row = next(csv.DictReader(io.StringIO(out)))
    assert (int(row["window_ns"]), int(row["compute_ns"]), int(row["launch_overhead_ns"]),
            int(row["idle_ns"])) == (103_000, 40_000, 61_000, 2_000)


def test_breakdown_steps_json() -> None:
    out = json.loads(_run("breakdown", str(SAMPLES / "mini_train.sqlite"), "--steps",
                          "^step", "--format", "json"))
    assert [r["window_name"] for r in out] == ["step 0", "step 1", "step 2"]


def test_gaps_min_us() -> None:
    out = _run("gaps", str(SAMPLES / "sync_bound.sqlite"), "--min-us", "170", "--format",
               "json")
    assert [(g["start_ns"], g["dur_ns"], g["cause"]) for g in json.loads(out)] == [
        (520_000, 190_000, "host_sync")]  # began while cudaMemcpy waited (golden tests)


def test_summary_text_and_verdict() -> None:
    out = _run("summary", str(SAMPLES / "launch_bound.sqlite"))
    assert "Verdict: launch-bound: 59.2% of the window is launch overhead" in out
    assert "Top kernels" in out and "Largest idle gaps" in out
    out = json.loads(_run("summary", str(SAMPLES / "comm_bound.sqlite"), "--format", "json"))
    assert out["verdict"] == ("communication-bound: 57.1% of the window is exposed "
                              "communication")
    assert set(out["sections"]) >= {"window", "breakdown", "top_kernels", "top_gaps"}


def test_summary_without_trace_uses_sample(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "traceparse", "summary", "--format", "csv"],
                         cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert "# breakdown" in res.stdout and "# verdict" in res.stdout


def test_bad_inputs_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["breakdown", str(tmp_path / "missing.sqlite")],
                 ["breakdown", str(SAMPLES / "mini_train.sqlite"), "--window", "9:3"]):
        res = subprocess.run([sys.executable, "-m", "traceparse", *args], cwd=REPO, env=env,
                             capture_output=True, text=True, check=False)
        assert res.returncode == 2, res.stderr
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr


def test_summary_has_launch_and_communication_sections() -> None:
    from traceparse.analyses.summary import summarize
    from traceparse.samplegen import scenarios as samplegen

    # mini_train: 3 steps x 2 all-reduce kernels of 260 us each (samplegen scenario data)
    s = summarize(samplegen.scenario_timeline("mini_train"))
    comm = s["sections"]["communication"].row(0, named=True)
    assert (comm["collective"], comm["count"], comm["time_ns"]) == ("allreduce", 6, 6 * 260_000)
    launches = {r["metric"]: r for r in s["sections"]["launches"].iter_rows(named=True)}
    tl = samplegen.scenario_timeline("mini_train")
    assert launches["kernel_ns"]["count"] == tl.kernels.height
