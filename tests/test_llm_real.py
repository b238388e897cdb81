"""Op trees and phases on the real torch traces, checked against the traces' own events
(read here with json, independently of the parser)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceparse
from tests.conftest import ids, shared_files
from traceparse.analyses import layers, optree, phases

TORCH = shared_files("torch")
TL = {p.name: p for p in shared_files("torch", "tracelens__*")}


def _events(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.shared
@pytest.mark.parametrize("path", TORCH, ids=ids(TORCH))
def test_tree_root_is_total_kernel_time(path: Path) -> None:
    tl = traceparse.load(path)
    kern = [e for e in _events(path)
            if str(e.get("cat", "")).lower() == "kernel" and e.get("ph") == "X"]
    for view in optree.VIEWS:
        tree = optree.check_tree(optree.op_tree(tl, view=view))
        root = tree.row(0, named=True)
        # every kernel event of the file lands in the tree, none twice
        assert root["kernels"] == len(kern)
        assert root["inclusive_ns"] == tl.gpu.filter(pl.col("kind") == "kernel")["dur_ns"].sum()
        # the file's own durations (us, float) agree to rounding (< 1 ns per kernel)
        assert abs(root["inclusive_ns"] - sum(e["dur"] for e in kern) * 1000) <= len(kern) + 1
        top = tree.filter(pl.col("depth") == 1)["inclusive_ns"].sum()
        assert top == root["inclusive_ns"]


def _annotations(path: Path, prefix: str) -> list[dict[str, Any]]:
    return [e for e in _events(path) if e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith(prefix)]


@pytest.mark.shared
@pytest.mark.parametrize(("name", "phase", "batch", "tokens"), [
    ("tracelens__sglang_Qwen3-8B_prefilldecode.json.gz", "prefill", 15, 15360),
    ("tracelens__sglang_Qwen3-8B_decode.json.gz", "decode", 32, 32),
    ("tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz", "mixed", 46, 8192),
    ("tracelens__sglang_decode_capture_bs_32_rank0.json.gz", "capture", 32, None),
    ("tracelens__vllm_decode_full_graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
     "capture", 32, None),
])
def test_real_serving_phases(name: str, phase: str, batch: int, tokens: int | None) -> None:
    path = TL[name]
    st = phases.phase_steps(traceparse.load(path))
    # one serving step per file: the annotations say so (execute_/capture_ outermost,
    # SGLang's step[...] nested inside the execute_ annotation)
    outer = _annotations(path, "execute_") + _annotations(path, "capture_")
    assert st.height == len(outer) == 1
    row = st.row(0, named=True)
    assert (row["phase"], row["phase_source"]) == (phase, "annotation")
    assert (row["batch_size"], row["tokens"]) == (batch, tokens)
    assert row["start_ns"] is not None and row["wall_ns"] >= row["end_ns"] - row["start_ns"]
    sg = _annotations(path, "step[")
    if sg:
        # the SGLang annotation agrees with the execute_ one
        info = phases.parse_step_annotation(sg[0]["name"])
        assert info is not None and info["phase"] == phase


@pytest.mark.shared
def test_sglang_decode_graph_kernels_land_under_the_step() -> None:
    path = TL["tracelens__sglang_Qwen3-8B_decode.json.gz"]
    ev = _events(path)
    step = _annotations(path, "step[DECODE")[0]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kern = [e for e in ev if e.get("cat") == "kernel"]
    inside = [k for k in kern if lo <= launch_ts.get(k["args"]["correlation"], -1) < hi]
    graph = [k for k in kern if k["args"]["correlation"] == 92178]
    assert len(graph) == 544 and all(k in inside for k in graph)
    tree = optree.op_tree(traceparse.load(path), view="ops")
    node = tree.filter(pl.col("name") == step["name"]).row(0, named=True)
    assert node["kernels"] == len(inside)


@pytest.mark.shared
def test_sglang_prefill_layers_match_the_module_frames() -> None:

    path = TL["tracelens__sglang_Qwen3-8B_prefilldecode.json.gz"]
    ev = _events(path)
    frames = [e for e in ev if e.get("cat") == "python_function"
              and str(e.get("name", "")).startswith("nn.Module: Qwen3DecoderLayer_")]
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    kern = [e for e in ev if e.get("cat") == "kernel"]
    per_layer = {}
    for f in frames:
        inside = [k for k in kern
                  if f["ts"] <= launch_ts.get(k["args"]["correlation"], -1) < f["ts"] + f["dur"]]
        per_layer[int(f["name"].rsplit("_", 1)[1])] = (len(inside),
                                                       sum(k["dur"] for k in inside) * 1000)
    assert sorted(per_layer) == list(range(36))
    t = layers.layer_table(traceparse.load(path))
    t = t.filter(pl.col("layer") == "nn.Module: Qwen3DecoderLayer_{N}").sort("index")
    assert t["index"].to_list() == list(range(36))
    assert t["kernels"].to_list() == [per_layer[i][0] for i in range(36)]
    for got, (n, dur) in zip(t["inclusive_ns"].to_list(), [per_layer[i] for i in range(36)],
                             strict=True):
        assert abs(got - dur) <= n + 1
    g = layers.layer_groups(traceparse.load(path)).row(0, named=True)
    slowest = max(range(36), key=lambda i: per_layer[i][1])
    assert (g["layers"], g["slowest"], g["same_structure"]) == (36, slowest, True)


@pytest.mark.shared
def test_flops_rule_on_real_steps() -> None:
    def step(name: str) -> dict[str, Any]:
        return phases.phase_steps(traceparse.load(TL[name]), attribution=False).row(
            0, named=True)

    # SGLang prefill runs eagerly: shape-estimated FLOPs. Qwen3-8B (hidden 4096, 36 layers,
    # 32 q / 8 kv heads of 128, MLP 12288) has 36 * (2 * 4096^2 + 2 * 4096 * 1024
    # + 3 * 4096 * 12288) = 6,945,767,424 linear weights; 2 FLOP per weight per token for
    # 15,360 tokens; the attention and the last-token LM head add under 1 %.
    pre = step("tracelens__sglang_Qwen3-8B_prefilldecode.json.gz")
    linear = 2 * 6_945_767_424 * 15_360
    assert pre["flops_source"] == "shapes"
    assert linear <= pre["flops"] <= linear * 1.01
    # over the step's period (the GPU's 494 ms after a 493 ms hold on work the trace does
    # not hold): 432 TFLOP/s, the phase's figure, not 216 over the 987 ms wall
    assert pre["tflop_per_s"] == pytest.approx(pre["flops"] / pre["period_ns"] / 1e3)
    assert pre["period_ns"] < 0.51 * pre["wall_ns"]
    # graph replays and captures: no estimate (the graph's ops are not in the trace)
    for name in ("tracelens__sglang_Qwen3-8B_decode.json.gz",
                 "tracelens__vllm_prefilldecode_piecewise_graph_execution.json.gz",
                 "tracelens__sglang_decode_capture_bs_32_rank0.json.gz"):
        assert step(name)["flops"] is None


@pytest.mark.shared
def test_emit_nvtx_counters_merge_in_the_tree() -> None:
    """nsys-ai's FastVideo capture names every NVTX range with emit_nvtx counters
    ('FlashAttnFunc, seq = 46588, op_id = 995009'); the tree merges them by op name."""
    import sqlite3

    path = shared_files("nsys", "nsys-ai__mfu_2gpu_after.sqlite")[0]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ranges = con.execute("SELECT count(*) FROM NVTX_EVENTS "
                         "WHERE text LIKE 'FlashAttnFunc, seq = %'").fetchone()[0]
    n, dur = con.execute(
        "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON k.demangledName = s.id WHERE s.value LIKE '%flash_fwd%'"
    ).fetchone()
    con.close()
    tree = optree.check_tree(optree.op_tree(traceparse.load(path), view="ops"))
    node = tree.filter((pl.col("depth") == 1) & (pl.col("name") == "FlashAttnFunc")).row(
        0, named=True)
    assert node["calls"] == ranges == 60
    assert (node["kernels"], node["inclusive_ns"]) == (n, dur)


@pytest.mark.shared
def test_rocm_gemms_in_the_kernel_mix() -> None:
    """hipBLASLt/Tensile GEMMs are named Cijk_*: the SGLang prefill's kernel mix counts them
    as gemm (kclass), every one of the file's Cijk_ kernels."""
    path = TL["tracelens__sglang_Qwen3-8B_prefilldecode.json.gz"]
    cijk = [e for e in _events(path) if e.get("cat") == "kernel"
            and str(e.get("name", "")).startswith("Cijk_")]
    tl = traceparse.load(path)
    mix = phases.phase_kernel_mix(tl, phases.phase_steps(tl, attribution=False), top=20)
    gemm = mix.filter(pl.col("kernel_class") == "gemm").row(0, named=True)
    assert gemm["kernels"] >= len(cijk) > 0
    assert gemm["top_kernel"].startswith("Cijk_")


@pytest.mark.shared
@pytest.mark.parametrize("name", ["darknet-thesis__keras_darknet53.sqlite",
                                  "nsys-ai__mfu_2gpu_after.sqlite"])
def test_tree_owner_is_the_shared_launch_link(name: str) -> None:
    """The tree places a kernel where traceparse.links.kernel_ranges does (the darknet
    capture's NVTX start/end ranges are process-wide: opened on one thread, they own launches
    of another): kernels outside every range and without a launch call agree in number."""
    from traceparse import links

    tl = traceparse.load(shared_files("nsys", name)[0])
    kr = links.kernel_ranges(tl)
    tree = optree.op_tree(tl, view="ops", keep_empty=True)
    by = {r["name"]: r for r in tree.filter(pl.col("depth") == 1).iter_rows(named=True)}
    no_call = kr.filter(pl.col("api_start_ns").is_null()).height
    outside = kr.filter(pl.col("api_start_ns").is_not_null()
                        & pl.col("range_name").is_null()).height
    assert by[optree.UNLINKED]["kernels"] == no_call
    assert by[optree.OUTSIDE]["kernels"] == outside
    assert tree["kernels"][0] == kr.height


H200 = shared_files("gpu", "h200/gpt_train_decode.json.gz")


@pytest.mark.shared
@pytest.mark.parametrize("path", H200, ids=ids(H200))
def test_layer_groups_apart_by_annotation(path: Path) -> None:
    # the file's nn.Module: Block_N frames, each under the decode_step / train_step /
    # prefill annotation that holds it; a kernel belongs to the Block frame on its launch
    # call's thread (runtime or driver call, joined by correlation) whose span holds the call
    ev = [e for e in _events(path) if e.get("ph") == "X"]
    blocks = [e for e in ev if e.get("cat") == "python_function"
              and str(e["name"]).startswith("nn.Module: Block_")]
    anns = [e for e in ev if e.get("cat") == "user_annotation"
            and e["name"] in ("decode_step", "train_step", "prefill")]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    kern = [(calls[k["args"]["correlation"]], k["dur"]) for k in ev
            if k.get("cat") == "kernel" and k["args"].get("correlation") in calls]
    want: dict[tuple[str, int], list[float]] = {}
    for b in blocks:
        (ann,) = [a["name"] for a in anns if a["tid"] == b["tid"]
                  and a["ts"] <= b["ts"] and b["ts"] + b["dur"] <= a["ts"] + a["dur"]]
        w = want.setdefault((ann, int(b["name"].rsplit("_", 1)[1])), [0, 0.0, 0])
        w[2] += 1
        for c, dur in kern:
            if c["tid"] == b["tid"] and b["ts"] <= c["ts"] < b["ts"] + b["dur"]:
                w[0] += 1
                w[1] += dur * 1000
    t = layers.layer_table(traceparse.load(path))
    assert t["group_id"].n_unique() == 3
    for r in t.iter_rows(named=True):
        ann = r["parent"].split(" > ")[1]          # ProfilerStep#* > decode_step > GPT_0
        n, dur, calls_ = want[(ann, r["index"])]
        assert (r["kernels"], r["calls"]) == (n, calls_)
        assert abs(r["inclusive_ns"] - dur) <= n + 1
    # three rows with three distinct parents (decode 8 calls, train 3, prefill 1)
    g = layers.layer_groups(traceparse.load(path))
    assert g["parent"].n_unique() == 3
    assert sorted(g["calls"].to_list()) == [1, 3, 8]


B8 = shared_files("gpu", "sweep/train_gpt2s_b8.json.gz") + shared_files(
    "torch", "hta__negative_queue_length_rank0.json.gz")  # ranges starting with their parent


@pytest.mark.shared
@pytest.mark.parametrize("path", B8 + H200, ids=ids(B8 + H200))
def test_steps_hold_every_launch_inside_their_window(path: Path) -> None:
    # the file's ProfilerStep#N windows (host user_annotation) and its launch calls (runtime
    # or driver, joined to kernels by correlation) on every thread: a kernel whose call lies
    # wholly inside a step window belongs to the step, whichever thread launched it
    ev = [e for e in _events(path) if e.get("ph") == "X"]
    steps = [e for e in ev if e.get("cat") == "user_annotation"
             and str(e["name"]).startswith("ProfilerStep#")]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]}
    n, dur, threads = 0, 0.0, set()
    for k in ev:
        c = calls.get(k["args"].get("correlation")) if k.get("cat") == "kernel" else None
        if c and any(s["ts"] <= c["ts"] and c["ts"] + c["dur"] <= s["ts"] + s["dur"]
                     for s in steps):
            n, dur = n + 1, dur + k["dur"] * 1000
            threads.add(c["tid"])
    assert len(threads) == 2                       # the main and the backward thread
    for view in ("ops", "modules", "full"):
        t = optree.op_tree(traceparse.load(path), view=view)
        step = t.filter(pl.col("name") == "ProfilerStep#*").row(0, named=True)
        assert step["kernels"] == n
        assert abs(step["inclusive_ns"] - dur) <= n + 1
