"""A stream capture is warm-up (issue 24's host classes; docs/analyses.md, warm-up).

Between ``*StreamBeginCapture`` and ``*StreamEndCapture`` the host records launches into a
graph; they do not run, so the GPU idles while the graph is built, once per shape. Before
this rule that time was ``idle`` (cause ``unknown``): SGLang's batch-32 capture step read
"idle 96.4%" of a step in which the host was capturing for 30.6 ms.

* generated Kineto-style timeline, attribution and gap cause by hand;
* generated nsys export: the chunked gaps fall back to memory (a capture window may cross a
  span) and equal it;
* the real SGLang capture step: its warm-up equals the capture window of the file's own
  ``hipStreamBeginCapture`` / ``hipStreamEndCapture`` calls.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TRACES
from test_diagnoses import LAUNCH, _parts, _tl

from traceparse.analyses.gaps import idle_gaps
from traceparse.analyses.summary import summarize
from traceparse.cli import main as cli
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import Activity, Call, Scenario

# K1 [10,20) (call [0,5)); cudaStreamBeginCapture [30,32); two captured launches [40,45)
# and [50,55) (no GPU work: recorded into the graph); cudaStreamEndCapture [900,910); K2
# call [950,955) -> [960,970). Window [10,970) = 960: compute 10 + 10 = 20; warm-up = the
# capture window [30,910) = 880 (the GPU is idle in all of it); launch [950,955) = 5; idle
# [20,30) + [910,950) + [955,960) = 10 + 40 + 5 = 55. 20 + 880 + 5 + 55 = 960.
CAPTURE = ([{"stream": 7, "start": 10, "end": 20, "corr": 1},
            {"stream": 7, "start": 960, "end": 970, "corr": 4}],
           [{"name": LAUNCH, "start": 0, "end": 5, "corr": 1},
            {"name": "cudaStreamBeginCapture", "start": 30, "end": 32},
            {"name": LAUNCH, "start": 40, "end": 45, "corr": 2},
            {"name": LAUNCH, "start": 50, "end": 55, "corr": 3},
            {"name": "cudaStreamEndCapture", "start": 900, "end": 910},
            {"name": LAUNCH, "start": 950, "end": 955, "corr": 4}])


def test_a_stream_capture_is_warmup() -> None:
    tl = _tl(*CAPTURE)
    assert _parts(tl) == (960, 20, 0, 5, 880, 0, 55)
    g = idle_gaps(tl).row(0, named=True)  # [20,960): the capture covers 880 of 940
    assert (g["kind"], g["cause"]) == ("warmup", "warmup")
    assert g["cause_name"] == "stream capture (2 launches recorded into a graph)"
    assert summarize(tl)["verdict"].startswith(
        "warm-up-dominated: 91.7% of the window is warm-up (module loading, compilation, "
        "graph capture)")  # 880 / 960


def test_without_the_capture_calls_the_time_is_idle() -> None:
    # the same calls without the begin and end: nothing explains [20,960) but the launches
    acts, calls = CAPTURE
    tl = _tl(acts, [c for c in calls if "Capture" not in c["name"]])
    assert _parts(tl)[4] == 0


def _capture_export(path: Path) -> Path:
    # the generated timeline above as an nsys export (ns: x 1,000)
    k = 1_000
    sc = Scenario("capture", "stream capture between two kernels", (
        Call("cudaLaunchKernel_v7000", 0, 5 * k, Activity("kernel", 7, 10 * k, 10 * k, "K1")),
        Call("cudaStreamBeginCapture_v10000", 30 * k, 32 * k),
        Call("cudaLaunchKernel_v7000", 40 * k, 45 * k),
        Call("cudaLaunchKernel_v7000", 50 * k, 55 * k),
        Call("cudaStreamEndCapture_v10000", 900 * k, 910 * k),
        Call("cudaLaunchKernel_v7000", 950 * k, 955 * k,
             Activity("kernel", 7, 960 * k, 10 * k, "K2"))))
    return samplegen_sqlite.write(sc, path)


def test_nsys_capture_is_warmup_and_not_explained_in_pieces(tmp_path: Path) -> None:
    path = str(_capture_export(tmp_path / "capture.sqlite"))
    run = CliRunner().invoke
    mem = run(cli, ["--no-cache", "gaps", path, "--format", "csv", "--min-gap-us", "1"])
    chk = run(cli, ["--no-cache", "gaps", "--executor", "chunks", "--chunk-rows", "1", path,
                    "--format", "csv", "--min-gap-us", "1"])
    assert (mem.exit_code, chk.exit_code) == (0, 0)
    assert chk.stdout == mem.stdout
    assert chk.stderr == (f"traceparse: {path}: gaps computed in memory, not in chunks: a "
                          "stream capture (warm-up from its begin to its end call) may cross "
                          "the span\n")
    row = next(r for r in csv.DictReader(io.StringIO(mem.stdout)) if r["start_ns"] == "20000")
    assert (row["kind"], row["warmup_ns"]) == ("warmup", str(880 * 1_000))


@pytest.mark.shared
def test_sglang_capture_step_is_warmup() -> None:
    import gzip
    import json

    from traceparse import load
    from traceparse.analyses.steps import step_table

    path = TRACES / "torch/tracelens__sglang_decode_capture_bs_32_rank0.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    ev, base = doc["traceEvents"], doc.get("baseTimeNanoseconds", 0)
    # the file's own capture window, begin call start to end call end, in ns
    b = next(e for e in ev if e.get("name") == "hipStreamBeginCapture")
    e = next(e for e in ev if e.get("name") == "hipStreamEndCapture")
    window = round((e["ts"] + e["dur"] - b["ts"]) * 1_000)
    assert 30_000_000 < window < 31_000_000
    # GPU work inside it: only the tails of the two fill kernels launched before it
    # (11 us of kernels in the whole file); the launches inside it ran nothing
    t0, t1 = b["ts"], e["ts"] + e["dur"]
    busy = round(sum(max(0.0, min(k["ts"] + k["dur"], t1) - max(k["ts"], t0))
                     for k in ev if k.get("cat") == "kernel") * 1_000)
    assert busy < 11_000
    st = step_table(load(path)).row(0, named=True)
    # the step holds the whole window, and the GPU was idle in the rest of it: warm-up is
    # at least that (plus the aiter JIT ranges before it); under a tenth of the step stays
    # idle (it was 96.4% before the rule)
    assert st["start_ns"] <= base + round(t0 * 1_000)
    assert st["end_ns"] >= base + round(t1 * 1_000)
    assert st["warmup_ns"] >= window - busy
    assert st["idle_ns"] < 0.1 * st["wall_ns"]
