"""The known-cause scenario runner (issue 19, sample_traces/capture/scenarios.py) on the CPU.

The runner is run once, for real, with the ``tiny`` sizes on the CPU (about 20 s): every
scenario and variant writes a genuine torch.profiler trace and its sidecar. No GPU means no
diagnosis (``tests/test_capture_scenarios_gpu.py`` checks those on real captures); here the
tests check the plumbing against numbers worked out by hand from the tiny sizes:

* every run of ``planted.EXPECTATIONS`` is written, its sidecar has every key, names the
  planted cause (the twin none), carries the expectation verbatim, and lists exactly the
  CUDA-only parts the CPU could not run (with a reason) so it is marked not diagnosable;
* every trace ingests with traceparse (``load``, and the CLI's ``info``, ``summary`` and
  ``batch``) with 3 ``ProfilerStep#N`` ranges, the profiler options asked for visible in
  the raw JSON (Python stacks, ``nn.Module`` ranges, ``[memory]`` events), and the planted
  work in the counts its sizes imply;
* the GEMM sweep's sidecar shapes give the FLOPs that the profiler counted and that
  ``traceparse.roofline.estimate.op_flops`` computes;
* the nsys and ncu command lines the runner builds for a GPU machine (not run here).

Finding while writing these: traceparse does not ingest Kineto's ``[memory]`` instant events
(``profile_memory=True``) into the ``memory`` table yet; the raw events are checked instead.

torch is not a traceparse dependency: without it these tests skip, except under ``.ci/run``
(which installs the CPU build and sets ``TRACEPARSE_REQUIRE_TORCH=1``).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import needs_torch
from traceparse.roofline.estimate import op_flops

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "sample_traces" / "capture"
pytestmark = needs_torch("the scenario runner")

sys.path.insert(0, str(CAPTURE))
import planted  # noqa: E402  (sample_traces/capture/planted.py: standard library only)

RUNS = [(s, v) for s, e in planted.EXPECTATIONS.items() for v in e.variants]
#: tiny preset (scenario_work.SIZES["tiny"]), written out so the counts below are by hand.
STEPS, SYNC_ITERS, TINY_KERNELS, CHAIN_OPS, GEMM_SIZES = 3, 2, 40, 16, (32, 64)
NO_TOOLS = "nsys and ncu captures"
#: The CUDA-only parts each CPU run must report as skipped (besides nsys/ncu).
CPU_SKIPS = {
    ("pageable_copy", "bottleneck"): {"device-to-host copy"},
    ("pageable_copy", "twin"): {"pinned non_blocking copy on a side stream"},
    ("host_sync", "bottleneck"): {".item() / torch.cuda.synchronize() waiting for the GPU"},
    ("host_sync", "twin"): set(),
    ("launch_bound", "bottleneck"): set(),
    ("launch_bound", "twin"): {"CUDA graph capture and replay"},
    ("unfused_elementwise", "bottleneck"): set(),
    ("unfused_elementwise", "twin"): {"torch.compile fusion"},
    ("gemm_roofline", "sweep"): {"tf32 GEMMs", "fp8 GEMMs"},
    ("input_starved", "bottleneck"): set(),
    ("input_starved", "twin"): set(),
    ("warmup", "bottleneck"): {"torch.compile and cuDNN autotuning"},
    ("warmup", "twin"): {"torch.compile and cuDNN autotuning"},
}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("scenarios")
    proc = subprocess.run([sys.executable, str(CAPTURE / "scenarios.py"), "--device", "cpu",
                           "--out", str(d)], capture_output=True, text=True, env=_env(),
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d


@pytest.fixture(scope="module")
def runs(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    got = {}
    for s, v in RUNS:
        stem = planted.run_name(s, v)
        trace = out / f"{stem}.json.gz"
        meta = json.loads((out / f"{stem}.meta.json").read_text())
        raw = json.loads(gzip.decompress(trace.read_bytes()))
        got[(s, v)] = {"trace": trace, "meta": meta, "raw": raw["traceEvents"],
                       "tl": traceparse.load(trace)}
    return got


def _names(events: list[dict[str, Any]], cat: str) -> Counter[str]:
    return Counter(e["name"] for e in events if e.get("cat") == cat and e.get("ph") == "X")


def test_every_run_has_a_complete_sidecar(out: Path,
                                          runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [f"{planted.run_name(s, v)}{ext}" for s, v in RUNS for ext in (".json.gz", ".meta.json")]
        + ["README.md"])
    for (s, v), r in runs.items():
        m = r["meta"]
        assert set(planted.SIDECAR_KEYS) <= set(m), (s, v, set(planted.SIDECAR_KEYS) - set(m))
        exp = planted.EXPECTATIONS[s]
        assert (m["scenario"], m["variant"], m["schema"]) == (s, v, planted.SIDECAR_SCHEMA)
        assert m["cause"] == (None if v == planted.TWIN else s)
        assert m["planted"] == (exp.twin if v == planted.TWIN else exp.planted) != ""
        assert m["expected"] == json.loads(json.dumps(exp.to_json()))
        assert m["device"] == "cpu" and m["gpu"] is None and m["diagnosable"] is False
        assert m["files"] == {"torch": r["trace"].name}
        assert m["steps"]["profiled"] == STEPS
        assert m["steps"]["warm_unprofiled"] == (0 if (s, v) == ("warmup", "bottleneck") else 2)
        assert len(m["timings_ms"]["steps_host"]) == STEPS
        assert all(m["profiler"][k] is True for k in ("record_shapes", "with_stack",
                                                      "with_modules", "profile_memory"))
        assert m["profiler"]["events"] == len(r["raw"])
        assert m["command"] == (f"python3 sample_traces/capture/scenarios.py --device cpu "
                                f"--size tiny --scenario {s} --variant {v} --out {out.name}")
        assert str(out.parent) not in json.dumps(m)  # no machine path


def test_readme_from_the_sidecars(out: Path, runs: dict[tuple[str, str], dict[str, Any]]
                                  ) -> None:
    text = (out / "README.md").read_text()
    assert "* A CPU-only run: no GPU was involved, nothing here is diagnosable." in text
    for (s, v), r in runs.items():
        cause = s if v != planted.TWIN else "none (twin)"
        kb = r["trace"].stat().st_size / 1e6
        assert f"| {s}-{v} | {cause} | no | `{r['trace'].name}` ({kb:.2f} MB) |" in text
        assert f"* {s}-{v}: `{r['meta']['command']}`" in text
    assert text.count("nsys and ncu captures: --device cpu") == len(RUNS)
    assert str(out) not in text


def test_cpu_runs_list_what_they_could_not_plant(
        runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(CPU_SKIPS) == set(runs)
    for key, r in runs.items():
        skipped = r["meta"]["skipped"]
        assert all(x["what"] and len(x["reason"]) > 10 for x in skipped), skipped
        assert {x["what"] for x in skipped} == CPU_SKIPS[key] | {NO_TOOLS}, key


def test_every_trace_ingests_with_its_steps(
        runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    for key, r in runs.items():
        tl, raw = r["tl"], r["raw"]
        steps = tl.ranges.filter(pl.col("kind") == "profiler_step").sort("start_ns")
        assert steps["name"].cast(pl.String).to_list() == [f"ProfilerStep#{i}"
                                                           for i in range(STEPS)], key
        ops = tl.ranges.filter(pl.col("kind") == "cpu_op")
        assert ops.height == sum(_names(raw, "cpu_op").values()) > 0, key
        assert tl.gpu.height == 0  # CPU: no kernels, no copies
        # with_stack: Python frames; profile_memory: allocator events (not ingested yet).
        assert sum(_names(raw, "python_function").values()) > 0, key
        assert any(e.get("name") == "[memory]" for e in raw), key


def test_modules_and_shapes_recorded(runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    py = _names(runs[("warmup", "bottleneck")]["raw"], "python_function")
    # with_modules: one range per module call, 3 steps (ConvNet -> Conv2d x2, Linear).
    assert {k: py[k] for k in py if k.startswith("nn.Module:")} == {
        "nn.Module: ConvNet_0": STEPS, "nn.Module: Conv2d_0": STEPS,
        "nn.Module: Conv2d_1": STEPS, "nn.Module: Linear_0": STEPS}
    conv = runs[("warmup", "bottleneck")]["tl"].ranges.filter(
        pl.col("name").cast(pl.String) == "aten::convolution")
    # tiny: batch 2, 4 channels, 8x8, 3x3 kernels
    assert conv["input_dims"].unique().to_list() == ["[[2,4,8,8],[4,4,3,3],[4],[],[],[],[],[],[]]"]
    assert conv.height == 2 * STEPS


def test_planted_work_in_the_counts(runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    def ann(key: tuple[str, str]) -> Counter[str]:
        return _names(runs[key]["raw"], "user_annotation")

    def ops(key: tuple[str, str]) -> Counter[str]:
        return _names(runs[key]["raw"], "cpu_op")

    b, t = ann(("host_sync", "bottleneck")), ann(("host_sync", "twin"))
    n = SYNC_ITERS * STEPS  # 6
    assert (b["compute"], b["item_sync"], b["host_bookkeeping"]) == (n, n, n)
    assert (t["compute"], t["item_sync"], t["host_bookkeeping"]) == (n, 0, n)
    assert ops(("host_sync", "bottleneck"))["aten::item"] == n
    assert ops(("host_sync", "twin"))["aten::item"] == 0
    for v in ("bottleneck", "twin"):  # CPU twin: eager (the CUDA graph is skipped)
        assert ops(("launch_bound", v))["aten::add_"] == TINY_KERNELS * STEPS  # 120
        chain = ops(("unfused_elementwise", v))  # 16 ops cycling mul, add, sin, relu
        per = CHAIN_OPS // 4 * STEPS  # 12
        assert (chain["aten::mul"], chain["aten::add"], chain["aten::sin"],
                chain["aten::relu"]) == (per, per, per, per)
        pc = ann(("pageable_copy", v))
        assert (pc["gemm"], pc["copy_to_host"]) == (STEPS, STEPS)
    # The starved step prepares its batch on the training thread; the twin's workers do.
    for v, expect in (("bottleneck", STEPS), ("twin", 0)):
        raw = runs[("input_starved", v)]["raw"]
        main = {(e["pid"], e["tid"]) for e in raw
                if str(e.get("name", "")).startswith("ProfilerStep#")}
        assert len(main) == 1
        on_main = [e for e in raw if e.get("name") == "make_batch" and e.get("ph") == "X"
                   and (e["pid"], e["tid"]) in main]
        assert len(on_main) == expect, v


def test_gemm_sweep_shapes_give_the_profiler_flops(
        runs: dict[tuple[str, str], dict[str, Any]]) -> None:
    r = runs[("gemm_roofline", "sweep")]
    gemms = r["meta"]["sizes"]["gemms"]
    assert [g["range"] for g in gemms] == [f"gemm_{d}_{n}" for d in ("fp32", "bf16")
                                           for n in GEMM_SIZES]
    mm = (r["tl"].ranges.filter(pl.col("name").cast(pl.String) == "aten::mm")
          .select("input_dims", "input_types", "flops"))
    for g in gemms:
        n = g["input_dims"][0][0]
        assert g["flops"] == op_flops(g["op"], g["input_dims"]) == 2.0 * n**3
        rows = mm.filter(pl.col("input_dims") == f"[[{n},{n}],[{n},{n}]]")
        rows = rows.filter(pl.col("input_types").str.contains(g["input_types"][0],
                                                              literal=True))
        assert rows.height == STEPS, g  # once per step
        assert rows["flops"].to_list() == [2.0 * n**3] * STEPS


def test_cli_info_summary_and_batch(out: Path) -> None:
    trace = out / "host_sync-bottleneck.json.gz"
    said = {}
    for cmd in ("info", "summary"):
        p = subprocess.run([sys.executable, "-m", "traceparse", "--no-cache", cmd, str(trace)],
                           capture_output=True, text=True, env=_env(), timeout=300, cwd=REPO)
        assert p.returncode == 0, p.stderr
        said[cmd] = p.stdout
    assert trace.name in said["info"]
    assert re.search(r"ranges profiler_step +3\n", said["info"]), said["info"]
    # 6 item_sync + 6 compute + 6 host_bookkeeping annotations (ProfilerStep counted apart)
    assert re.search(r"ranges user_annotation +18\n", said["info"]), said["info"]
    assert "Verdict: no GPU activity" in said["summary"]
    b = out.parent / "batch"
    p = subprocess.run([sys.executable, "-m", "traceparse", "--no-cache", "batch",
                        str(out / "*.json.gz"), "-o", str(b), "-j", "1"],
                       capture_output=True, text=True, env=_env(), timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stderr
    s = pl.read_csv(b / "summary.csv")
    assert s.height == len(RUNS) and set(s["status"].to_list()) == {"ok"}


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("scenarios", CAPTURE / "scenarios.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tool_command_lines(tmp_path: Path) -> None:
    sc = _runner()
    worker = ["python3", "scenarios.py", "--mode", "nvtx"]
    prof, export = sc.nsys_cmds("nsys", tmp_path / "x.nsys-rep", tmp_path / "x.sqlite", worker)
    assert prof == ["nsys", "profile", "--trace=cuda,nvtx,osrt,cublas,cudnn",
                    "--gpu-metrics-devices=all", "--gpu-metrics-frequency=2000",
                    "--capture-range=cudaProfilerApi",
                    "--capture-range-end=stop", "--sample=none", "--cpuctxsw=none",
                    "--force-overwrite=true", "-o", str(tmp_path / "x"), *worker]
    assert export == ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true",
                      "--output", str(tmp_path / "x.sqlite"), str(tmp_path / "x.nsys-rep")]
    stub = tmp_path / "ncu"
    stub.write_text("#!/bin/sh\nprintf '%s\\n' 'sm__ops_path_tensor_src_bf16_dst_fp32  ops' "
                    "'sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on  ops' "
                    "'sm__ops_path_tensor_src_fp8  ops' 'dram__bytes  bytes'\n")
    stub.chmod(0o755)
    metrics = sc.ncu_tensor_metrics(str(stub))
    assert metrics == ["--metrics", "sm__ops_path_tensor_src_bf16_dst_fp32.sum,"
                       "sm__ops_path_tensor_src_fp8.sum"]
    prof, export = sc.ncu_cmds("ncu", tmp_path / "g.ncu-rep", tmp_path / "g.csv", worker,
                               metrics)
    assert prof[:3] == ["ncu", "--clock-control", "none"]
    joined = " ".join(prof)
    for flag in ("--set roofline", "--section SpeedOfLight_RooflineChart",
                 "--section ComputeWorkloadAnalysis", "--section MemoryWorkloadAnalysis",
                 "--nvtx", "--profile-from-start off", f"-o {tmp_path / 'g'} python3"):
        assert flag in joined, flag
    assert export == ["ncu", "--import", str(tmp_path / "g.ncu-rep"), "--csv", "--page",
                      "raw", "--print-units", "base"]


STUB_NSYS = r"""#!/usr/bin/env bash
# Test double for nsys: logs its arguments, writes placeholder files where nsys would write
# its report and export. Never a measurement.
echo "$*" >> "$STUB_LOG"
case "$1" in
  profile) while [ "$1" != "-o" ]; do shift; done; echo rep > "$2.nsys-rep";;
  export) while [ "$1" != "--output" ]; do shift; done; echo "STUB SQLITE" > "$2";;
esac
"""
STUB_NCU = r"""#!/usr/bin/env bash
# Test double for ncu: logs, lists two tensor counters, writes a placeholder report/CSV.
echo "$*" >> "$STUB_LOG"
case "$1" in
  --query-metrics) echo "sm__ops_path_tensor_src_bf16_dst_fp32  ops";;
  --import) echo '"STUB CSV"';;
  *) [ -n "$STUB_FAIL" ] && exit 7; while [ "$1" != "-o" ]; do shift; done
     echo rep > "$2.ncu-rep";;
esac
"""


def _stub(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("ncu_fails", [False, True])
def test_run_tools_files_and_commands_with_stubs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 ncu_fails: bool) -> None:
    """run_tools' file handling on a (pretend) GPU machine, with nsys/ncu replaced by stubs
    that only log and write placeholders: names, gzip, clean-up, logged commands, and a
    failing ncu recorded as skipped instead of aborting the capture."""
    import argparse

    sc = _runner()
    log = tmp_path / "argv.log"
    monkeypatch.setenv("STUB_LOG", str(log))
    if ncu_fails:
        monkeypatch.setenv("STUB_FAIL", "1")
    out = tmp_path / "gpu"
    out.mkdir()
    a = argparse.Namespace(device="cuda", size="full", out=str(out), steps=None,
                           nsys=_stub(tmp_path / "nsys", STUB_NSYS),
                           ncu=_stub(tmp_path / "ncu", STUB_NCU), keep_reports=False)
    meta: dict[str, Any] = {"skipped": [], "tool_commands": [], "files": {"torch": "t"},
                            "steps": {"profiled": 6}}
    sc.run_tools(a, "gemm_roofline", "sweep", meta)
    left = sorted(p.name for p in out.iterdir())
    assert gzip.decompress((out / "gemm_roofline-sweep.sqlite.gz").read_bytes()) == \
        b"STUB SQLITE\n"
    if ncu_fails:
        assert left == ["gemm_roofline-sweep.sqlite.gz"]
        assert meta["files"] == {"torch": "t", "nsys_sqlite": "gemm_roofline-sweep.sqlite.gz"}
        assert [s["what"] for s in meta["skipped"]] == ["ncu capture"]
        assert "exited with 7" in meta["skipped"][0]["reason"]
        assert len(meta["tool_commands"]) == 3  # nsys profile, nsys export, ncu profile
        return
    assert left == ["gemm_roofline-sweep.ncu.csv.gz", "gemm_roofline-sweep.sqlite.gz"]
    assert gzip.decompress((out / "gemm_roofline-sweep.ncu.csv.gz").read_bytes()) == \
        b'"STUB CSV"\n'
    assert meta["skipped"] == [] and meta["steps"]["ncu_profiled"] == 1
    cmds = meta["tool_commands"]
    assert len(cmds) == 4 and not any(str(tmp_path) in c for c in cmds)  # no machine path
    assert cmds[0].startswith("nsys profile --trace=cuda,nvtx,osrt,cublas,cudnn "
                              "--gpu-metrics-devices=all ")
    assert "--mode nvtx" in cmds[0] and "--steps" not in cmds[0]  # nsys: every step
    assert cmds[2].startswith("ncu --clock-control none --set roofline ")
    assert "--metrics sm__ops_path_tensor_src_bf16_dst_fp32.sum " in cmds[2]
    assert "--steps 1 " in cmds[2]  # ncu: one step, one launch per GEMM range
    assert cmds[3] == ("ncu --import gemm_roofline-sweep.ncu-rep --csv --page raw "
                       "--print-units base > gemm_roofline-sweep.ncu.csv")


@pytest.mark.parametrize(("args", "message"), [
    (["--mode", "nvtx", "--device", "cpu"], "--mode nvtx is the run under nsys/ncu and needs "
     "--device cuda"),
    (["--device", "cpu", "--steps", "0"], "--steps must be at least 1"),
    (["--device", "cpu", "--scenario", "nope"], "invalid choice: 'nope'"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str
                                            ) -> None:
    p = subprocess.run([sys.executable, str(CAPTURE / "scenarios.py"), *args, "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, env=_env(),
                       timeout=300)
    assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (tmp_path / "o").exists()
