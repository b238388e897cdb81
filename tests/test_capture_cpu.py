"""The issue-10 capture scripts (sample_traces/capture/), run for real on the CPU.

``gpt_profile.py --device cpu`` with a tiny model writes a genuine torch.profiler trace (no
GPU, so no kernels); these tests check that traceparse ingests it, that its steps, shapes and
FLOPs are what the script's arguments imply (worked out below by hand), and that the
shape-based FLOPs of ``traceparse.roofline.estimate`` agree with the profiler's own ``flops``.

Finding (torch 2.13.0+cpu): ``export_chrome_trace`` does not write ``flops`` even with
``with_flops=True``; the profiler computes them (``FunctionEvent.flops``) and
``gpt_profile.py`` adds them to the trace as ``args.flops`` (documented in its sidecar).
For every ``aten::mm`` / ``aten::addmm`` the shape estimate equals the profiler's count
exactly (ratio 1.0: both are 2*M*N*K), so the tolerance below is float rounding only.

torch is not a project dependency: without it these tests skip, except under ``.ci/run``
(which installs the CPU build and sets ``TRACEPARSE_REQUIRE_TORCH=1``).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import needs_torch
from traceparse.roofline.estimate import estimate_ops, op_flops

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "sample_traces" / "capture"
pytestmark = needs_torch("the capture scripts")

# Tiny run: 2 layers, d_model 64, 4 heads, seq 32, batch 2, vocab 8192 (default),
# 2 train steps + 1 prefill + 3 decode steps profiled after wait 1 + warmup 1.
TINY = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "2",
        "--train-steps", "2", "--decode-steps", "3"]
ACTIVE = 2 + 1 + 3
#: Shape-vs-profiler FLOPs agreement factor for GEMM ops (see module docstring).
GEMM_FACTOR = 1.0 + 1e-9


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _raw(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))
    return doc


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("gpt") / "tiny.json.gz"
    proc = subprocess.run([sys.executable, str(CAPTURE / "gpt_profile.py"), "--device", "cpu",
                           *TINY, "--out", str(out)], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads(out.with_name("tiny.meta.json").read_text())
    return {"trace": out, "meta": meta, "tl": traceparse.load(out), "raw": _raw(out)}


def test_sidecar_records_the_run(run: dict[str, Any]) -> None:
    meta = run["meta"]
    assert meta["device"] == "cpu" and meta["gpu"] is None
    assert meta["run"]["active_steps"] == ACTIVE
    assert meta["model"] == {"vocab": 8192, "layers": 2, "d_model": 64, "heads": 4,
                             "seq": 32, "mlp_ratio": 4}
    # Parameters: wte 8192*64 + wpe 32*64 + per layer (2 LN 4*64, qkv 64*192+192,
    # proj 64*64+64, fc 64*256+256, out 256*64+64) + ln_f 128; LM head tied (no extra).
    per_layer = 4 * 64 + (64 * 192 + 192) + (64 * 64 + 64) + (64 * 256 + 256) + (256 * 64 + 64)
    assert meta["params"] == 8192 * 64 + 32 * 64 + 2 * per_layer + 128
    assert meta["command"].startswith("python3 sample_traces/capture/gpt_profile.py ")
    assert meta["command"].endswith("--out tiny.json.gz")  # no machine path recorded
    assert meta["trace"]["events"] == len(run["raw"]["traceEvents"])
    assert run["raw"]["traceName"] == "tiny.json.gz"
    assert run["raw"].get("host_name") in (None, "capture-host")


def test_trace_ingests_with_shapes(run: dict[str, Any]) -> None:
    tl = run["tl"]
    raw_ops = [e for e in run["raw"]["traceEvents"]
               if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    ops = tl.ranges.filter(pl.col("kind") == "cpu_op")
    assert ops.height == len(raw_ops) > 1000
    gemm = ops.filter(pl.col("name").cast(pl.String).is_in(["aten::mm", "aten::addmm"]))
    assert gemm.height > 0 and gemm["input_dims"].null_count() == 0
    assert gemm["input_types"].null_count() == 0
    # No GPU: no kernels, and every ingested source row is accounted for.
    assert tl.gpu.height == 0
    ing = tl.ingest.filter((pl.col("table") == "ranges") & (pl.col("outcome") == "parsed"))
    assert int(ing["count"].sum()) == tl.ranges.height


def test_profiler_steps_are_the_active_steps(run: dict[str, Any]) -> None:
    r = run["tl"].ranges
    steps = r.filter(pl.col("kind") == "profiler_step").sort("start_ns")
    assert steps.height == ACTIVE
    # Steps 0 (wait) and 1 (warmup) are not recorded: numbering starts at #2.
    assert steps["name"].cast(pl.String).to_list() == [f"ProfilerStep#{i}"
                                                       for i in range(2, 2 + ACTIVE)]
    ann = (r.filter(pl.col("kind") == "user_annotation")
           .group_by(pl.col("name").cast(pl.String)).len())
    counts = dict(zip(ann["name"].to_list(), ann["len"].to_list(), strict=True))
    assert (counts["train_step"], counts["prefill"], counts["decode_step"]) == (2, 1, 3)


def test_profiler_flops_recorded_for_gemms(run: dict[str, Any]) -> None:
    r = run["tl"].ranges
    gemm = r.filter(pl.col("name").cast(pl.String).is_in(["aten::mm", "aten::addmm"]))
    assert gemm.height > 0 and gemm["flops"].null_count() == 0
    assert (gemm["flops"] > 0).all()
    # Independent count from the JSON: every flops arg made it into the ranges table.
    n_json = sum(1 for e in run["raw"]["traceEvents"] if "flops" in (e.get("args") or {}))
    assert n_json == run["meta"]["trace"]["flops_added"] == r["flops"].is_not_null().sum()
    # Tied LM head, training forward: [B*T, C] x [C, V] = [64, 64] x [64, 8192]
    # -> 2 * 64 * 64 * 8192 = 67,108,864 FLOPs, once per recorded train step (2).
    head = r.filter((pl.col("name").cast(pl.String) == "aten::mm")
                    & (pl.col("input_dims") == "[[64,64],[64,8192]]"))
    assert head["flops"].to_list() == [67_108_864.0, 67_108_864.0]


def test_shape_estimate_agrees_with_profiler_flops(run: dict[str, Any]) -> None:
    r = run["tl"].ranges
    gemm = ["aten::mm", "aten::addmm"]
    prof = (r.filter(pl.col("flops").is_not_null() & pl.col("name").cast(pl.String).is_in(gemm))
            .select("rank", "external_id", pl.col("name").cast(pl.String),
                    pl.col("flops").alias("profiler_flops")))
    est = estimate_ops(r).filter(pl.col("name").is_in(gemm))
    j = est.join(prof, on=["rank", "external_id", "name"], how="full", coalesce=True)
    # Every GEMM has both numbers (none estimated without a profiler count, or vice versa).
    assert j.height == prof.height > 0
    assert j["flops"].null_count() == 0 and j["profiler_flops"].null_count() == 0
    ratio = (j["flops"] / j["profiler_flops"]).to_list()
    assert min(ratio) >= 1 / GEMM_FACTOR and max(ratio) <= GEMM_FACTOR, (min(ratio),
                                                                          max(ratio))


@pytest.fixture(scope="module")
def ncu_cpu(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("ncu") / "ncu_kernels.json"
    proc = subprocess.run([sys.executable, str(CAPTURE / "ncu_kernels.py"), "--device", "cpu",
                           "--m", "64", "--n", "32", "--k", "48", "--attn-batch", "1",
                           "--attn-heads", "2", "--attn-seq", "16", "--head-dim", "8",
                           "--rows", "8", "--cols", "16", "--json", str(out)],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta: dict[str, Any] = json.loads(out.read_text())
    return meta


def test_ncu_kernels_sidecar_feeds_the_shape_estimate(ncu_cpu: dict[str, Any]) -> None:
    by = {r["range"]: r for r in ncu_cpu["ranges"]}
    assert list(by) == ["tp_gemm_bf16", "tp_sdpa_bf16", "tp_layernorm_bf16", "tp_add_bf16"]
    g = by["tp_gemm_bf16"]
    assert g["output_dims"] == [64, 32]
    assert op_flops(g["op"], g["input_dims"]) == 2 * 64 * 32 * 48  # 196,608
    s = by["tp_sdpa_bf16"]
    assert s["output_dims"] == [1, 2, 16, 8]
    # 2 * B * H * L * S * (D + Dv) = 2 * 1 * 2 * 16 * 16 * (8 + 8) = 16,384
    assert op_flops(s["op"], s["input_dims"]) == 16_384
    assert by["tp_add_bf16"]["output_dims"] == [8, 16]
    assert ncu_cpu["gpu"] is None


def test_make_readme_from_a_cpu_capture(run: dict[str, Any]) -> None:
    d = run["trace"].parent
    proc = subprocess.run([sys.executable, str(CAPTURE / "make_readme.py"), str(d)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = (d / "README.md").read_text()
    assert run["meta"]["command"] in text
    assert f"holds {ACTIVE} `ProfilerStep#N` ranges" in text
    assert "A CPU-only run: no GPU was involved." in text
    assert str(d) not in text  # no machine path


STUB_NCU = r"""#!/usr/bin/env bash
# Test double for ncu: records its arguments; for a profiling call runs the application (as
# ncu would) and writes no report; for --import prints one marker line. Never a GPU result.
echo "$*" >> "$STUB_LOG"
case "$1" in
  --version) echo "NVIDIA (R) Nsight Compute Command Line Profiler"; echo "Version stub";;
  --query-metrics) printf '%s\n' "sm__ops_path_tensor_src_bf16_dst_fp32   math ops" \
      "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on   math ops" \
      "sm__ops_path_tensor_src_fp16   math ops" "dram__bytes   bytes";;
  --import) echo '"STUB (no GPU)"';;
  *) while [ "$1" != "-o" ]; do shift; done; shift 2; exec "$@";;
esac
"""


def test_capture_ncu_plumbing_with_a_stub(tmp_path: Path) -> None:
    """capture_ncu.sh's exact ncu command lines, exports and gzip, with ncu replaced by a
    stub that only logs (the real capture needs a GPU; nothing here is a measurement)."""
    stub = tmp_path / "ncu"
    stub.write_text(STUB_NCU)
    stub.chmod(0o755)
    log = tmp_path / "argv.log"
    out = tmp_path / "out"
    env = {**_env(), "NCU": str(stub), "STUB_LOG": str(log), "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(CAPTURE / "capture_ncu.sh"), str(out), "--device", "cpu",
                           "--m", "8", "--n", "8", "--k", "8", "--attn-seq", "8",
                           "--attn-heads", "1", "--attn-batch", "1", "--head-dim", "8",
                           "--rows", "4", "--cols", "8"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    calls = log.read_text().splitlines()
    prof = next(c for c in calls if " -o " in c)
    for flag in ("--clock-control none", "--set roofline", "--section SpeedOfLight_RooflineChart",
                 "--section ComputeWorkloadAnalysis", "--section MemoryWorkloadAnalysis",
                 "--nvtx", "--profile-from-start off",
                 "--metrics sm__ops_path_tensor_src_bf16_dst_fp32.sum,"
                 "sm__ops_path_tensor_src_fp16.sum "):
        assert flag in prof, flag
    imports = [c for c in calls if c.startswith("--import")]
    assert [c.split(" --csv ", 1)[1] for c in imports] == [
        "--page raw", "--page raw --print-units base", "--page details",
        "--page details --section SpeedOfLight_RooflineChart --print-details all",
        "--page session"]
    for page in ("raw", "raw_base", "details", "roofline", "session"):
        assert gzip.decompress((out / f"ncu_kernels.{page}.csv.gz").read_bytes()) == \
            b'"STUB (no GPU)"\n'
    assert (out / "ncu_kernels.json").is_file()  # the app ran under the (stub) profiler
    assert "--clock-control none" in (out / "ncu_commands.txt").read_text()
