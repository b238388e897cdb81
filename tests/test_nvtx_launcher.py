"""``nvtx --report gpu`` on Kineto: the owner range and the External-id launcher of kernels."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from conftest import shared_files
from perf_helpers import api, gpu, ranges, timeline

import traceparse
from traceparse.analyses.ranges import gpu_projection


def test_launcher_is_the_external_id_op_holding_the_launch() -> None:
    # thread 2: cpu_op record_param_comms [0,100) ext 7 > user_annotation nccl:all_reduce
    # [10,60) ext 8; cpu_op aten::add_ [200,300) ext 9.
    # kernel A (ext 7, 40 ns) launched at 20: innermost range nccl:all_reduce, launcher
    #   record_param_comms (holds t=20 on thread 2).
    # kernel B (ext 9, 10 ns) launched at 250: range aten::add_, launcher aten::add_.
    # kernel C (ext 7, 5 ns) launched at 150: no range; op 7 ended at 100 -> launcher "".
    tl = timeline(
        ranges=ranges([
            {"name": "record_param_comms", "kind": "cpu_op", "start_ns": 0, "end_ns": 100,
             "external_id": 7},
            {"name": "nccl:all_reduce", "kind": "user_annotation", "start_ns": 10,
             "end_ns": 60, "external_id": 8},
            {"name": "aten::add_", "kind": "cpu_op", "start_ns": 200, "end_ns": 300,
             "external_id": 9}]),
        api=api([{"start_ns": t, "end_ns": t + 2, "correlation_id": i}
                 for i, t in enumerate([20, 250, 150])]),
        gpu=gpu([{"name": "A", "start_ns": 400, "end_ns": 440, "correlation_id": 0,
                  "external_id": 7},
                 {"name": "B", "start_ns": 440, "end_ns": 450, "correlation_id": 1,
                  "external_id": 9},
                 {"name": "C", "start_ns": 450, "end_ns": 455, "correlation_id": 2,
                  "external_id": 7}]))
    p = gpu_projection(tl)
    assert p.select("range", "range_kind", "launcher", "kernels", "gpu_ns").rows() == [
        ("nccl:all_reduce", "user_annotation", "record_param_comms", 1, 40),
        ("aten::add_", "cpu_op", "aten::add_", 1, 10),
        ("(no range)", None, "", 1, 5)]


def test_no_launcher_column_without_external_ids() -> None:
    # NVTX-only input (as every nsys export): columns unchanged
    tl = timeline(ranges=ranges([{"name": "fwd", "start_ns": 0, "end_ns": 100}]),
                  api=api([{"start_ns": 5, "end_ns": 7, "correlation_id": 0}]),
                  gpu=gpu([{"name": "k", "start_ns": 10, "end_ns": 30, "correlation_id": 0}]))
    assert gpu_projection(tl).columns == ["range", "range_kind", "kernels", "gpu_ns", "share",
                                          "avg_ns"]


NCCL = shared_files("torch", "hta__nccl_data.json.gz")


def _raw_nccl_owners(path: Path) -> Counter[tuple[str, str, str]]:
    """Independent reading of the raw JSON: for each NCCL kernel, the innermost cpu_op /
    user_annotation on the launching (pid, tid) that holds its runtime call's ts (latest
    start, then shortest), and the cpu_op with the kernel's External id."""
    with gzip.open(path) as f:
        ev = json.load(f)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    host = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation") and e.get("ph") == "X"]
    by_ext = {e["args"]["External id"]: e["name"] for e in host
              if e["cat"] == "cpu_op" and "External id" in e.get("args", {})}
    out: Counter[tuple[str, str, str]] = Counter()
    for k in ev:
        if k.get("cat") != "kernel" or not k["name"].startswith("ncclKernel"):
            continue
        c = calls[k["args"]["correlation"]]
        enc = [e for e in host if (e["pid"], e["tid"]) == (c["pid"], c["tid"])
               and e["ts"] <= c["ts"] < e["ts"] + e["dur"]]
        inner = max(enc, key=lambda e: (e["ts"], -e["dur"]))
        out[(inner["name"], inner["cat"], by_ext[k["args"]["External id"]])] += 1
    return out


@pytest.mark.shared
@pytest.mark.parametrize("path", NCCL, ids=[p.name for p in NCCL])
def test_nccl_kernels_owner_and_launcher_match_raw_json(path: Path) -> None:
    # raw: 15 all-reduce launches inside nccl:all_reduce, 6 broadcasts inside nccl:broadcast,
    # both annotations nested in record_param_comms, the op their External id names
    raw = _raw_nccl_owners(path)
    assert raw == {("nccl:all_reduce", "user_annotation", "record_param_comms"): 15,
                   ("nccl:broadcast", "user_annotation", "record_param_comms"): 6}
    p = gpu_projection(traceparse.load(path)).filter(pl.col("range").str.starts_with("nccl:"))
    got = {(r["range"], r["range_kind"], r["launcher"]): r["kernels"]
           for r in p.iter_rows(named=True)}
    assert got == dict(raw)
