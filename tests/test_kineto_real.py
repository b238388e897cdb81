"""Kineto parser on every real trace in ../shared/traces/torch, checked against independent
counts made here with plain json/gzip/decimal code (never through traceparse)."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

import traceparse
from tests.conftest import ids, shared_files

TORCH = shared_files("torch")
DLRM = shared_files("torch", "param__dlrm_8rank__worker*.json")

KERNEL = {"kernel", "Kernel"}
MEMCPY = {"gpu_memcpy", "Memcpy"}
MEMSET = {"gpu_memset", "Memset"}
RUNTIME = {"cuda_runtime", "Runtime"}
CPU_OP = {"cpu_op", "Operator"}


def independent(path: Path) -> dict:
    """Counts and exact kernel ns per stream, straight from the JSON text."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw, parse_float=Decimal)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X"
                   and not str(e.get("name")).startswith("ProfilerStep#"))
    steps = sum(1 for e in events if e.get("ph") == "X"
                and str(e.get("name")).startswith("ProfilerStep#")
                and e.get("cat") in ("cpu_op", "Operator", "user_annotation"))
    per_stream: dict[int, int] = defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in KERNEL:
            args = e.get("args", {})
            stream = args.get("stream", e.get("tid"))
            per_stream[int(stream)] += round(Decimal(e["dur"]) * 1000)
    count = lambda names: sum(cats[c] for c in names)  # noqa: E731
    return {"kernel": count(KERNEL), "memcpy": count(MEMCPY), "memset": count(MEMSET),
            "runtime": count(RUNTIME), "cpu_op": count(CPU_OP), "steps": steps,
            "stream_ns": dict(per_stream),
            "events": len(events)}


@pytest.mark.shared
@pytest.mark.parametrize("path", TORCH, ids=ids(TORCH))
def test_counts_and_kernel_time_match_independent_count(path: Path) -> None:
    want = independent(path)
    tl = traceparse.load(path)
    gpu = tl.gpu
    kinds = Counter(gpu["kind"].cast(pl.String).to_list())
    assert kinds["kernel"] == want["kernel"]
    assert kinds["memcpy"] == want["memcpy"]
    assert kinds["memset"] == want["memset"]
    assert tl.api.filter(pl.col("kind") == "runtime").height == want["runtime"]
    # ProfilerStep#N (cat cpu_op in old traces, user_annotation in new) -> profiler_step
    assert tl.ranges.filter(pl.col("kind") == "cpu_op").height == want["cpu_op"]
    assert tl.ranges.filter(pl.col("kind") == "profiler_step").height == want["steps"]
    kernels = gpu.filter(pl.col("kind") == "kernel")
    got = dict(kernels.group_by("stream_id").agg(pl.col("dur_ns").sum()).iter_rows())
    assert got == want["stream_ns"]
    assert int(kernels["dur_ns"].sum()) == sum(want["stream_ns"].values())
    # accounting: parsed + skipped = every event in the file
    assert int(tl.ingest["count"].sum()) == want["events"]


@pytest.mark.shared
@pytest.mark.parametrize("path", TORCH, ids=ids(TORCH))
def test_link_share(path: Path) -> None:
    tl = traceparse.load(path)
    link = tl.meta["correlation_link"]
    if not link["with_correlation"]:
        assert tl.gpu.height == 0  # cpu-only trace
        return
    # GPU work launched before the profiler window has no launch call in the file; every
    # activity launched inside the window is linked.
    assert link["link_share_in_window"] >= 0.99
    work = tl.gpu.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    joined = work.join(tl.api, on=["rank", "process_id", "correlation_id"], how="inner")
    assert joined.height == link["linked"]


@pytest.mark.shared
def test_dlrm_eight_ranks_as_one_timeline(tmp_path: Path) -> None:
    assert len(DLRM) == 8
    for f in DLRM:
        (tmp_path / f.name).symlink_to(f)
    tl = traceparse.load(tmp_path)
    assert sorted(tl.sources["rank"].to_list()) == list(range(8))
    assert set(tl.sources["rank_source"].cast(pl.String)) == {"distributedInfo"}
    for f in DLRM:
        want = independent(f)
        rank = int(f.name.split("worker")[1].split("_")[0])
        k = tl.gpu.filter((pl.col("rank") == rank) & (pl.col("kind") == "kernel"))
        assert k.height == want["kernel"]
        assert int(k["dur_ns"].sum()) == sum(want["stream_ns"].values())
        assert tl.api.filter(pl.col("rank") == rank).height == want["runtime"]
    # every rank on the epoch clock: all starts within one second of each other
    starts = tl.gpu.group_by("rank").agg(pl.col("start_ns").min())["start_ns"]
    assert int(starts.max() - starts.min()) < 1_000_000_000
    assert starts.min() > 1_694_000_000 * 10**9
