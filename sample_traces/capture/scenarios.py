#!/usr/bin/env python3
"""Known-cause scenarios (issue 19): each plants one bottleneck, beside a clean twin.

The seven scenarios, what each plants and what traceparse must conclude are listed in
``planted.py``; their workloads are in ``scenario_work.py``. For every scenario and variant
this runner writes, into ``--out``:

* ``<scenario>-<variant>.json.gz``: the torch.profiler (Kineto) trace: CPU (+ CUDA)
  activities, ``record_shapes``, ``with_stack``, ``with_modules``, ``profile_memory``; one
  ``ProfilerStep#N`` per profiled step, after the scenario's unprofiled warm-up steps;
* ``<scenario>-<variant>.meta.json``: the sidecar (keys: ``planted.SIDECAR_KEYS``): planted
  cause, expected verdict/recommendation keys, sizes, measured times, what was skipped and
  why, files, exact commands, GPU and software;
* ``README.md``: GPU, driver, versions, files and exact commands of every run in ``--out``
  (``scenario_readme.py``);
* on CUDA with ``nsys`` on ``PATH``: the same workload under
  ``nsys profile --gpu-metrics-devices=all`` (NVTX ranges instead of record_function; only
  the profiled steps, via ``--capture-range=cudaProfilerApi``) exported with
  ``nsys export --type sqlite``, gzipped: ``<scenario>-<variant>.sqlite.gz``;
* for ``gemm_roofline`` on CUDA with ``ncu``: one pass of every GEMM under
  ``ncu --clock-control none`` with the roofline sections and the tensor-op counters,
  exported as ``--page raw --print-units base``, gzipped: ``gemm_roofline-sweep.ncu.csv.gz``.

A missing tool or a CUDA-only part that cannot run is recorded in the sidecar's ``skipped``
list (``{"what", "reason"}``) and the run is marked ``"diagnosable": false``: CPU runs test
the plumbing, never a diagnosis.

Examples::

    # CPU smoke run of everything (tiny sizes; about a minute):
    python3 sample_traces/capture/scenarios.py --device cpu --size tiny --out /tmp/scn
    # The real capture, on an H100/H200 (see README.md):
    python3 sample_traces/capture/scenarios.py --device cuda --out sample_traces/gpu
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_env import REPO, gpu_info, portable_command, software_info
from gpt_profile import write_trace
from planted import (
    EXPECTATIONS,
    SCENARIOS,
    SIDECAR_SCHEMA,
    TWIN,
    run_name,
)
from scenario_readme import write_readme
from scenario_work import MAKERS, SIZES, Ctx, nvtx_range

HERE = Path(__file__).resolve().parent
#: Sections ncu collects for the GEMMs (the roofline set plus what the roofline reads).
NCU_SECTIONS = ["--set", "roofline", "--section", "SpeedOfLight", "--section",
                "SpeedOfLight_RooflineChart", "--section", "ComputeWorkloadAnalysis",
                "--section", "MemoryWorkloadAnalysis"]
#: What nsys traces: GPU metrics sampled on every device at 2 kHz (default 10 kHz: five
#: times the rows; a 1.6 ms bf16 8192³ GEMM still spans 3 samples), only the profiled steps.
NSYS_FLAGS = ["--trace=cuda,nvtx,osrt,cublas,cudnn", "--gpu-metrics-devices=all",
              "--gpu-metrics-frequency=2000",
              "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
              "--sample=none", "--cpuctxsw=none", "--force-overwrite=true"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--size", choices=tuple(SIZES), default=None,
                   help="problem sizes (default: full on cuda, tiny on cpu)")
    p.add_argument("--scenario", action="append", choices=SCENARIOS,
                   help="run only this scenario (repeatable; default: all)")
    p.add_argument("--variant", action="append", help="run only this variant (repeatable)")
    p.add_argument("--steps", type=int, default=None,
                   help="profiled steps (default: the size preset's; ncu runs use 1)")
    p.add_argument("--out", required=True, help="directory for traces and sidecars")
    p.add_argument("--nsys", default=os.environ.get("NSYS", "nsys"),
                   help="nsys binary, or 'off' (default: nsys on PATH; env NSYS)")
    p.add_argument("--ncu", default=os.environ.get("NCU", "ncu"),
                   help="ncu binary, or 'off' (default: ncu on PATH; env NCU)")
    p.add_argument("--mode", choices=("torch", "nvtx"), default="torch",
                   help="internal: 'nvtx' is the run under nsys/ncu (NVTX labels, "
                        "cudaProfilerStart/Stop around the profiled steps, no torch.profiler)")
    p.add_argument("--keep-reports", action="store_true",
                   help="keep the .nsys-rep/.ncu-rep reports (not committed: large)")
    a = p.parse_args(argv)
    a.size = a.size or ("full" if a.device == "cuda" else "tiny")
    if a.mode == "nvtx" and a.device != "cuda":
        p.error("--mode nvtx is the run under nsys/ncu and needs --device cuda")
    if a.steps is not None and a.steps < 1:
        p.error("--steps must be at least 1")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    return a


def _runs(a: argparse.Namespace) -> list[tuple[str, str]]:
    out = []
    for s in a.scenario or SCENARIOS:
        for v in EXPECTATIONS[s].variants:
            if not a.variant or v in a.variant:
                out.append((s, v))
    return out


def run_workload(scenario: str, variant: str, dev: torch.device, size: str, mode: str,
                 trace: Path | None, steps: int | None = None) -> dict[str, Any]:
    """Set the scenario up, run its warm-up steps, then its profiled steps under
    torch.profiler (``mode='torch'``, trace written to ``trace``) or between
    cudaProfilerStart/Stop with NVTX labels (``mode='nvtx'``). Returns the sidecar's
    run-dependent part."""
    sz = SIZES[size]
    if steps is not None:
        sz = dataclasses.replace(sz, steps=steps)
    # Runs share one process: undo what an earlier run may have switched on.
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs are fp32 unless stated
    torch.backends.cudnn.benchmark = False
    torch._dynamo.reset()  # no compiled code carried over from an earlier scenario
    label = record_function if mode == "torch" else nvtx_range
    ctx = Ctx(dev=dev, size=sz, label=label)
    t0 = time.perf_counter()
    work = MAKERS[scenario](ctx, variant)
    setup_ms = (time.perf_counter() - t0) * 1e3
    for i in range(work.warm_steps):
        work.step(-1 - i)
    ctx.sync()
    step_ms: list[float] = []
    written: dict[str, Any] = {}
    try:
        if mode == "torch":
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
            # The schedule makes prof.step() record ProfilerStep#0..; no profiler warm-up
            # step, so the warmup scenario's first profiled step is the very first call.
            with warnings.catch_warnings():  # "won't be using warmup": on purpose
                warnings.simplefilter("ignore", UserWarning)
                sched = schedule(wait=0, warmup=0, active=sz.steps, repeat=1)
            with profile(activities=acts, schedule=sched, record_shapes=True,
                         with_stack=work.no_stack_reason is None, with_modules=True,
                         profile_memory=True, with_flops=True) as prof:
                for i in range(sz.steps):
                    s0 = time.perf_counter()
                    work.step(i)
                    prof.step()
                    step_ms.append((time.perf_counter() - s0) * 1e3)
                ctx.sync()
            assert trace is not None
            written = write_trace(prof, trace)
        else:
            torch.cuda.profiler.start()
            for i in range(sz.steps):
                s0 = time.perf_counter()
                with nvtx_range(f"step {i}"):
                    work.step(i)
                step_ms.append((time.perf_counter() - s0) * 1e3)
            ctx.sync()
            torch.cuda.profiler.stop()
    finally:
        work.close()
    return {"skipped": ctx.skipped, "sizes": {"preset": size, **work.info},
            "steps": {"warm_unprofiled": work.warm_steps, "profiled": sz.steps},
            "timings_ms": {"setup": round(setup_ms, 3),
                           "steps_host": [round(x, 3) for x in step_ms]},
            "trace": written, "no_stack_reason": work.no_stack_reason}


def sidecar(a: argparse.Namespace, scenario: str, variant: str, part: dict[str, Any],
            trace: Path) -> dict[str, Any]:
    """The full sidecar of one run (keys: ``planted.SIDECAR_KEYS``)."""
    exp = EXPECTATIONS[scenario]
    cuda = a.device == "cuda"
    skipped = list(part["skipped"])
    return {
        "tool": "sample_traces/capture/scenarios.py", "schema": SIDECAR_SCHEMA,
        "scenario": scenario, "variant": variant,
        "cause": None if variant == TWIN else exp.cause,
        "planted": exp.twin if variant == TWIN else exp.planted,
        "expected": exp.to_json(),
        "device": a.device, "diagnosable": cuda and not skipped,
        "skipped": skipped, "sizes": part["sizes"],
        "profiler": {"activities": ["CPU"] + (["CUDA"] if cuda else []),
                     "record_shapes": True, "with_stack": part["no_stack_reason"] is None,
                     "with_modules": True, "profile_memory": True, "with_flops": True,
                     **({"with_stack_off": part["no_stack_reason"]}
                        if part["no_stack_reason"] else {}),
                     **part["trace"]},
        "files": {"torch": trace.name},
        "steps": part["steps"],
        "command": portable_command([str(HERE / "scenarios.py"), "--device", a.device,
                                     "--size", a.size, "--scenario", scenario,
                                     "--variant", variant,
                                     *(["--steps", str(a.steps)] if a.steps else []),
                                     "--out", a.out]),
        "tool_commands": [],
        "captured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": gpu_info(), "software": software_info(), "timings_ms": part["timings_ms"],
    }


def _rel(p: str | Path) -> str:
    """A path as recorded: relative to the repository, else its name (no machine path)."""
    with contextlib.suppress(ValueError):
        return str(Path(p).resolve().relative_to(REPO))
    return Path(p).name if os.path.isabs(p) else str(p)


def _show(cmd: list[str]) -> str:
    return shlex.join([_rel(c) if os.path.isabs(c) else c for c in cmd])


def worker_cmd(a: argparse.Namespace, scenario: str, variant: str,
               steps: int | None = None) -> list[str]:
    """The command a tool (nsys, ncu) profiles: this script, NVTX mode, one run."""
    return [sys.executable, str(HERE / "scenarios.py"), "--mode", "nvtx", "--device",
            a.device, "--size", a.size, "--scenario", scenario, "--variant", variant,
            *(["--steps", str(steps)] if steps else []),
            "--out", a.out, "--nsys", "off", "--ncu", "off"]


def nsys_cmds(nsys: str, rep: Path, sqlite: Path, worker: list[str]) -> list[list[str]]:
    """``nsys profile`` of ``worker`` into ``rep`` (.nsys-rep), then the SQLite export."""
    flags = NSYS_FLAGS
    if os.environ.get("SCENARIOS_NSYS_GPU_METRICS") == "off":  # nsys_scenarios.sh's fallback
        flags = [f for f in flags if not f.startswith("--gpu-metrics")]
    return [[nsys, "profile", *flags, "-o", str(rep.with_suffix("")), *worker],
            [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
             "--output", str(sqlite), str(rep)]]


def ncu_tensor_metrics(ncu: str) -> list[str]:
    """``--metrics`` with the dense tensor-op counters this ncu lists (FORMATS B.6)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True,
                             timeout=120).stdout
        import re
        names = sorted({m for m in re.findall(r"sm__ops_path_tensor_src_[a-z0-9_]*", out)
                        if "sparsity" not in m})
        if names:
            return ["--metrics", ",".join(f"{m}.sum" for m in names)]
    return []


def ncu_cmds(ncu: str, rep: Path, csv: Path, worker: list[str],
             metrics: list[str]) -> list[list[str]]:
    """``ncu`` of ``worker`` (production clocks, NVTX, only the profiled range), then the
    raw page in base units (what ``traceparse roofline`` reads)."""
    return [[ncu, "--clock-control", "none", *NCU_SECTIONS, *metrics, "--nvtx",
             "--profile-from-start", "off", "--target-processes", "all", "-f",
             "-o", str(rep.with_suffix("")), *worker],
            [ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"]]


def _gzip(src: Path, dst: Path) -> None:
    with open(src, "rb") as fh, open(dst, "wb") as out, \
            gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        shutil.copyfileobj(fh, gz)


def _tool(meta: dict[str, Any], what: str, cmd: list[str], stdout: Path | None = None) -> bool:
    """Run one nsys/ncu command, logged in ``meta["tool_commands"]``; on failure record it in
    ``meta["skipped"]`` (the capture goes on without that file) and return False."""
    meta["tool_commands"].append(_show(cmd) + (f" > {_rel(stdout)}" if stdout else ""))
    with open(stdout, "w") if stdout else contextlib.nullcontext() as fh:
        proc = subprocess.run(cmd, stdout=fh, check=False)
    if proc.returncode:
        meta["skipped"].append({"what": what, "reason": f"{Path(cmd[0]).name} exited with "
                                f"{proc.returncode} (ncu: ERR_NVGPUCTRPERM means counters "
                                "need root or NVreg_RestrictProfilingToAdminUsers=0)"})
    return proc.returncode == 0


def run_tools(a: argparse.Namespace, scenario: str, variant: str, meta: dict[str, Any]) -> None:
    """Run the nsys (every scenario) and ncu (gemm_roofline) captures where possible; record
    their files and commands, or why they were skipped, in ``meta``."""
    out = Path(a.out)
    stem = run_name(scenario, variant)
    if a.device != "cuda":
        meta["skipped"].append({"what": "nsys and ncu captures", "reason": "--device cpu: "
                                "nsys/ncu trace GPU work and there is none"})
        return
    if a.nsys != "off" and shutil.which(a.nsys):
        rep, sql = out / f"{stem}.nsys-rep", out / f"{stem}.sqlite"
        prof, export = nsys_cmds(a.nsys, rep, sql, worker_cmd(a, scenario, variant))
        if _tool(meta, "nsys capture", prof) and _tool(meta, "nsys capture", export):
            _gzip(sql, out / f"{stem}.sqlite.gz")
            meta["files"]["nsys_sqlite"] = f"{stem}.sqlite.gz"
        sql.unlink(missing_ok=True)
        if not a.keep_reports:
            rep.unlink(missing_ok=True)
    else:
        meta["skipped"].append({"what": "nsys capture", "reason": f"'{a.nsys}' not on PATH"
                                if a.nsys != "off" else "--nsys off"})
    if scenario != "gemm_roofline":
        return
    if a.ncu != "off" and shutil.which(a.ncu):
        rep, csv = out / f"{stem}.ncu-rep", out / f"{stem}.ncu.csv"
        # One profiled step: each GEMM range holds exactly one launch of its GEMM.
        prof, export = ncu_cmds(a.ncu, rep, csv, worker_cmd(a, scenario, variant, steps=1),
                                ncu_tensor_metrics(a.ncu))
        if _tool(meta, "ncu capture", prof) and _tool(meta, "ncu capture", export, csv):
            _gzip(csv, out / f"{stem}.ncu.csv.gz")
            meta["files"]["ncu_raw_csv"] = f"{stem}.ncu.csv.gz"
            meta["steps"]["ncu_profiled"] = 1
        csv.unlink(missing_ok=True)
        if not a.keep_reports:
            rep.unlink(missing_ok=True)
    else:
        meta["skipped"].append({"what": "ncu capture", "reason": f"'{a.ncu}' not on PATH"
                                if a.ncu != "off" else "--ncu off"})


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    dev = torch.device(a.device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for scenario, variant in _runs(a):
        if a.mode == "nvtx":  # profiled by nsys/ncu from run_tools: no files of its own
            run_workload(scenario, variant, dev, a.size, "nvtx", None, a.steps)
            continue
        trace = out / f"{run_name(scenario, variant)}.json.gz"
        part = run_workload(scenario, variant, dev, a.size, "torch", trace, a.steps)
        meta = sidecar(a, scenario, variant, part, trace)
        run_tools(a, scenario, variant, meta)
        meta["diagnosable"] = a.device == "cuda" and not [
            s for s in meta["skipped"] if s["what"] not in ("nsys capture", "ncu capture")]
        side = out / f"{run_name(scenario, variant)}.meta.json"
        side.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print(f"wrote {_rel(trace)} ({trace.stat().st_size:,} bytes) and {side.name}"
              + (f"; skipped: {', '.join(s['what'] for s in meta['skipped'])}"
                 if meta["skipped"] else ""))
    if a.mode == "torch":
        print(f"wrote {_rel(write_readme(out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
