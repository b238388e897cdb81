"""Phases, op tree and layer groups on generated vLLM/SGLang/GPT-style Kineto traces, with
the answers worked out by hand from the layout in :mod:`traceparse.samplegen.llm`."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import traceparse
from traceparse.analyses import layers, optree, phases
from traceparse.analyses.attribution import check_attribution
from traceparse.samplegen.llm import BASE_NS, LLMStep, gpt_trace, serving_trace
from traceparse.timeline import Timeline

US = 1000


def _load(tmp_path: Path, doc: dict) -> Timeline:
    p = tmp_path / "t.pt.trace.json"
    p.write_text(json.dumps(doc))
    return traceparse.load(p)


@pytest.fixture
def sglang(tmp_path: Path) -> Timeline:
    # prefill: layer GEMMs 50 and 60 us; two decodes: 10+10 us and 10+200 us; a 7 us orphan.
    return _load(tmp_path, serving_trace("sglang", [
        LLMStep("prefill", 2, 64, (50, 60)), LLMStep("decode", 4, 4, (10, 10)),
        LLMStep("decode", 4, 4, (10, 200))], unlinked_us=7))


def test_sglang_phases_by_hand(sglang: Timeline) -> None:
    st = phases.phase_steps(sglang)
    assert st["phase"].to_list() == ["prefill", "decode", "decode"]
    assert st["phase_source"].to_list() == ["annotation"] * 3
    assert st["tokens"].to_list() == [64, 4, 4]          # DECODE without toks= -> bs tokens
    assert st["batch_size"].to_list() == [2, 4, 4]
    assert (st["start_ns"] - BASE_NS).to_list() == [0, 1000 * US, 2000 * US]
    # host windows are 300 us; step 3's 200 us GEMM starts at +140 and ends at +340
    assert st["wall_ns"].to_list() == [300 * US, 300 * US, 340 * US]
    # 3 kernels per step: two GEMMs and the 4 us sampler
    assert st["kernels"].to_list() == [3, 3, 3]
    assert st["kernel_ns"].to_list() == [114 * US, 24 * US, 214 * US]
    assert st["flops"].to_list() == [2 * 2 * 64 * 64 * 256, 2 * 2 * 4 * 64 * 256,
                                     2 * 2 * 4 * 64 * 256]
    assert st["flops_source"].to_list() == ["shapes"] * 3
    # prefill: compute = 50 + 60 + 4. Launch overhead (issue 24's one issuing rule: the
    # launching thread, since its previous launch, inside a host range that contains the
    # next launch): from the step's start the thread is inside the step annotation, the
    # model runner, DecoderLayer_0 and aten::linear, all holding call 1 at 30 -> [0,40) 40
    # up to kernel 1; after kernel 1 (ends 90) the stretch to call 2 and the sampler's
    # stretch from 135 -> [90,140) 50; after kernel 2 (200) the sampler's stretch and call
    # [200,255) -> 55: 145; idle 300 - 114 - 145 = 41 (after the sampler). Decode 1
    # (kernels 10, 10, 4 at +40, +140, +260): 40 + 90 + 105 = 235, idle 300 - 24 - 235 =
    # 41. Decode 2: compute 10 + 200 (the sampler runs under the long GEMM), launch
    # 40 + 90 = 130, idle 0.
    assert st["compute_ns"].to_list() == [114 * US, 24 * US, 210 * US]
    assert st["launch_overhead_ns"].to_list() == [145 * US, 235 * US, 130 * US]
    assert st["idle_ns"].to_list() == [41 * US, 41 * US, 0]
    check_attribution(st.with_columns(
        pl.col("start_ns").alias("window_start_ns"),
        (pl.col("start_ns") + pl.col("wall_ns")).alias("window_end_ns"),
        pl.col("wall_ns").alias("window_ns"), pl.lit(0, pl.Int64).alias("overlapped_comm_ns")))


def test_sglang_phase_summary_by_hand(sglang: Timeline) -> None:
    s = phases.phase_summary(phases.phase_steps(sglang))
    assert s["phase"].to_list() == ["prefill", "decode"]
    d = s.row(1, named=True)
    assert d["steps"] == 2
    assert d["step_p50_ns"] == 320 * US                     # median of 300 and 340
    assert d["step_p95_ns"] == pytest.approx(338 * US)      # 300 + 0.95 * 40
    assert d["tokens_per_step"] == 4.0
    assert d["tokens_per_s"] == pytest.approx(8 / 640e-6)   # 8 tokens in 640 us
    assert d["compute_pct"] == pytest.approx(234 / 640 * 100)
    p = s.row(0, named=True)
    assert p["tokens_per_s"] == pytest.approx(64 / 300e-6)
    # no profiler FLOPs: shape estimate of the two aten::linear [64, 64] x [256, 64]^T,
    # 2 * 64 * 64 * 256 each -> 4,194,304 FLOP in 300 us
    assert p["tflop_per_s"] == pytest.approx(4_194_304 / 300e-6 / 1e12)


def test_kernel_mix_by_hand(sglang: Timeline) -> None:
    mix = phases.phase_kernel_mix(sglang, phases.phase_steps(sglang))
    dec = mix.filter(pl.col("phase") == "decode")
    assert dec["kernel_class"].to_list()[0] == "gemm"
    assert dec["kernel_ns"].to_list()[0] == 230 * US
    assert dec["pct"].to_list()[0] == pytest.approx(230 / 238 * 100)


def test_sglang_tree_by_hand(sglang: Timeline) -> None:
    t = optree.check_tree(optree.op_tree(sglang))
    root = t.row(0, named=True)
    assert root["name"] == optree.ROOT
    assert root["inclusive_ns"] == (114 + 24 + 214 + 7) * US and root["kernels"] == 10
    by = {(r["depth"], r["name"]): r for r in t.iter_rows(named=True)}
    assert by[(1, optree.UNLINKED)]["inclusive_ns"] == 7 * US
    dec = by[(1, "step[DECODE bs=4]")]
    assert (dec["calls"], dec["inclusive_ns"], dec["exclusive_ns"]) == (2, 238 * US, 0)
    runner = t.filter(pl.col("parent_id") == dec["node_id"]).row(0, named=True)
    assert runner["exclusive_ns"] == 8 * US                  # the two samplers
    layer1 = t.filter((pl.col("name") == "nn.Module: DecoderLayer_1")
                      & (pl.col("parent_id") == runner["node_id"])).row(0, named=True)
    assert layer1["inclusive_ns"] == 210 * US and layer1["exclusive_ns"] == 0
    assert optree.op_tree(sglang, max_depth=1)["depth"].max() == 1


def test_tree_views(sglang: Timeline) -> None:
    mod = optree.check_tree(optree.op_tree(sglang, view="modules"))
    assert set(mod["kind"].to_list()) == {"", "user_annotation", "python_function"}
    layer = mod.filter(pl.col("name") == "nn.Module: DecoderLayer_1")
    assert sorted(layer["exclusive_ns"].to_list()) == [60 * US, 210 * US]
    ops = optree.check_tree(optree.op_tree(sglang, view="ops"))
    assert "python_function" not in ops["kind"].to_list()
    assert ops["inclusive_ns"][0] == mod["inclusive_ns"][0] == 359 * US
    with pytest.raises(ValueError, match="unknown view"):
        optree.op_tree(sglang, view="nope")


def test_layer_groups_by_hand(sglang: Timeline) -> None:
    g = layers.layer_groups(sglang, min_layers=2)
    dec = g.filter(pl.col("parent") == "step[DECODE bs=4]").row(0, named=True)
    assert (dec["layers"], dec["calls"], dec["slowest"]) == (2, 2, 1)
    assert (dec["min_ns"], dec["max_ns"], dec["median_ns"]) == (20 * US, 210 * US, 115 * US)
    assert dec["spread_pct"] == pytest.approx(190 / 115 * 100)
    assert dec["same_structure"] is True


def test_layer_groups_four_layers(tmp_path: Path) -> None:
    # the module docstring's example: 10, 10, 10 and 40 us
    tl = _load(tmp_path, serving_trace("sglang", [LLMStep("decode", 8, 8, (10, 10, 10, 40))]))
    g = layers.layer_groups(tl).row(0, named=True)
    assert (g["layers"], g["slowest"], g["median_ns"]) == (4, 3, 10 * US)
    assert g["mean_ns"] == pytest.approx(17.5 * US)
    assert g["spread_pct"] == pytest.approx(300.0)
    assert g["slowest_vs_median_pct"] == pytest.approx(300.0)


def test_vllm_mixed_step(tmp_path: Path) -> None:
    tl = _load(tmp_path, serving_trace("vllm", [
        LLMStep("mixed", 5, 40, (30, 30), prefill_requests=2),
        LLMStep("decode", 6, 6, (10, 10))]))
    st = phases.phase_steps(tl)
    assert st["step"].str.starts_with("execute_40_context_2(").to_list()[0]
    assert st["phase"].to_list() == ["mixed", "decode"]
    assert st["batch_size"].to_list() == [5, 6] and st["tokens"].to_list() == [40, 6]


def test_shape_rule_on_profiler_steps(tmp_path: Path) -> None:
    tl = _load(tmp_path, gpt_trace([("train", 2, 16), ("fwd", 2, 16), ("fwd", 2, 1),
                                    ("fwd", 2, 1)]))
    st = phases.phase_steps(tl)
    assert st["step_source"].unique().to_list() == ["profiler_step"]
    assert st["phase"].to_list() == ["train", "prefill", "decode", "decode"]
    assert st["phase_source"].to_list() == ["shapes"] * 4
    assert st["tokens"].to_list() == [None, 32, 2, 2]      # B * S of [B, S, H]


def test_parse_step_annotation() -> None:
    p = phases.parse_step_annotation
    assert p("step[EXTEND bs=15 toks=15360]") == {"phase": "prefill", "batch_size": 15,
                                                   "tokens": 15360}
    assert p("step[DECODE bs=32]") == {"phase": "decode", "batch_size": 32, "tokens": 32}
    assert p("capture_32_FULL") == {"phase": "capture", "batch_size": 32, "tokens": None}
    assert p("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk3sqsq32sqsk3)") == {
        "phase": "decode", "batch_size": 32, "tokens": 32}
    assert p("ProfilerStep#3") is None


def test_no_steps_and_regex(sglang: Timeline) -> None:
    st = phases.phase_steps(sglang, steps=r"^nn\.Module: DecoderLayer_0$")
    assert st.height == 3 and st["step_source"].unique().to_list() == ["regex"]
    assert st["phase"].to_list() == ["unknown"] * 3         # no annotation inside a layer
    assert phases.phase_steps(Timeline()).height == 0
    assert optree.op_tree(Timeline())["inclusive_ns"].to_list() == [0]


def test_iterations_are_not_layers() -> None:
    from traceparse.samplegen.scenarios import default_sample

    # the bundled sample has NVTX "step 0/1/2" siblings: iterations, never a layer group
    tl = traceparse.load(default_sample())
    names = tl.ranges["name"].cast(pl.String).to_list()
    assert {"step 0", "step 1", "step 2"} <= set(names)
    assert layers.layer_groups(tl, view="ops").height == 0


def test_runner_frames_without_annotations(tmp_path: Path) -> None:
    steps = [LLMStep("prefill", 2, 64, (50, 60)), LLMStep("decode", 4, 4, (10, 10))]
    sg = phases.phase_steps(_load(tmp_path, serving_trace("sglang", steps, annotate=False)))
    assert sg["step_source"].unique().to_list() == ["runner"]
    assert sg["phase"].to_list() == ["prefill", "decode"]       # forward_extend / _decode
    assert sg["phase_source"].to_list() == ["name", "name"]
    assert sg["tokens"].to_list() == [None, None]               # 2-D shapes say nothing
    # runner frame [S + 1, S + 299): 298 us of host time, kernels end earlier
    assert sg["wall_ns"].to_list() == [298 * US, 298 * US]
    (tmp_path / "v").mkdir()
    vl = phases.phase_steps(_load(tmp_path / "v", serving_trace("vllm", steps, annotate=False)))
    # vLLM's execute_model frame names no phase and [T, H] inputs decide nothing
    assert vl["phase"].to_list() == ["unknown", "unknown"]
    assert vl["phase_source"].to_list() == ["none", "none"]


def test_nvtx_serving_steps_nsys_style() -> None:
    """SGLang-style NVTX step ranges in an nsys-like timeline (built frame by frame):
    two decode steps on thread 5, kernels launched by cudaLaunchKernel inside them."""
    from traceparse import schema

    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0, 0, 0], "kind": ["nvtx_push_pop"] * 3,
        "name": ["step[DECODE bs=8]", "layer 0", "step[DECODE bs=8]"],
        "start_ns": [0, 100, 1_000], "end_ns": [500, 300, 1_400],
        "dur_ns": [500, 200, 400], "thread_id": [5, 5, 5], "process_id": [9, 9, 9]}))
    api = schema.conform("api", pl.DataFrame({
        "rank": [0, 0], "kind": ["runtime"] * 2, "name": ["cudaLaunchKernel"] * 2,
        "start_ns": [150, 1_100], "end_ns": [160, 1_110], "dur_ns": [10, 10],
        "process_id": [9, 9], "thread_id": [5, 5], "correlation_id": [1, 2]}))
    gpu = schema.conform("gpu", pl.DataFrame({
        "rank": [0, 0], "kind": ["kernel"] * 2, "category": ["compute"] * 2,
        "start_ns": [200, 1_200], "end_ns": [700, 1_300], "dur_ns": [500, 100],
        "device_id": [0, 0], "stream_id": [7, 7], "process_id": [9, 9],
        "correlation_id": [1, 2], "name": ["gemm_a", "gemm_b"]}))
    tl = Timeline(gpu=gpu, api=api, ranges=ranges).validate()
    st = phases.phase_steps(tl)
    assert st["phase"].to_list() == ["decode", "decode"]
    assert st["tokens"].to_list() == [8, 8]
    # the first step's kernel runs past the range: wall 0 .. 700
    assert st["wall_ns"].to_list() == [700, 400]
    t = optree.check_tree(optree.op_tree(tl))
    assert t.filter(pl.col("name") == "layer 0")["inclusive_ns"].to_list() == [500]
    assert t.filter(pl.col("name") == "step[DECODE bs=8]")["calls"].to_list() == [2]


def test_tree_places_other_threads_launches_under_the_step() -> None:
    """NVTX 'step 0' [0, 1000) and 'step 1' [1000, 2000) on main thread 5; a kernel of 40
    launched by thread 5 at 100 and a kernel of 60 launched at 300 by thread 6, which has
    no range (autograd's thread under nsys); in step 1 the same, plus a launch by thread 6
    at 2500, after the last step (stays outside). Tree: step * (2 calls) 200 inclusive:
    80 of its own, 120 under [thread without ranges]; [outside any range] 60; all 260."""
    from traceparse import schema

    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0, 0], "kind": ["nvtx_push_pop"] * 2, "name": ["step 0", "step 1"],
        "start_ns": [0, 1_000], "end_ns": [1_000, 2_000], "dur_ns": [1_000, 1_000],
        "thread_id": [5, 5], "process_id": [9, 9]}))
    calls = [(100, 5), (300, 6), (1_100, 5), (1_300, 6), (2_500, 6)]
    durs = [40, 60, 40, 60, 60]
    api = schema.conform("api", pl.DataFrame({
        "rank": [0] * 5, "kind": ["runtime"] * 5, "name": ["cudaLaunchKernel"] * 5,
        "start_ns": [c[0] for c in calls], "end_ns": [c[0] + 10 for c in calls],
        "dur_ns": [10] * 5, "process_id": [9] * 5, "thread_id": [c[1] for c in calls],
        "correlation_id": list(range(1, 6))}))
    gpu = schema.conform("gpu", pl.DataFrame({
        "rank": [0] * 5, "kind": ["kernel"] * 5, "category": ["compute"] * 5,
        "start_ns": [c[0] + 50 for c in calls],
        "end_ns": [c[0] + 50 + d for c, d in zip(calls, durs, strict=True)], "dur_ns": durs,
        "device_id": [0] * 5, "stream_id": [7] * 5, "process_id": [9] * 5,
        "correlation_id": list(range(1, 6)), "name": ["k"] * 5}))
    tl = Timeline(gpu=gpu, api=api, ranges=ranges).validate()
    t = optree.check_tree(optree.op_tree(tl))
    by = {r["name"]: r for r in t.iter_rows(named=True)}
    assert (by["step *"]["calls"], by["step *"]["inclusive_ns"],
            by["step *"]["exclusive_ns"]) == (2, 200, 80)
    other = by[optree.OTHER_THREAD]
    assert (other["parent_id"], other["inclusive_ns"], other["kernels"]) == (
        by["step *"]["node_id"], 120, 2)
    assert by[optree.OUTSIDE]["inclusive_ns"] == 60
    assert by[optree.ROOT]["inclusive_ns"] == 260


def test_layer_groups_named_by_parent_path(tmp_path: Path) -> None:
    # The same module tree (GPT_0 > Block_0..2) under two annotations, "decode" and "train":
    # two groups whose parent node has the same name. Their `parent` is the path from the
    # root, so the rows tell the calls apart. Each block launches one kernel: decode blocks
    # 10 us each, train blocks 30 us each (all us; ts of call / kernel = call + 10).
    from traceparse.samplegen.llm import _Builder, _doc

    b = _Builder()
    for s, ann, k in ((0, "decode", 10), (1000, "train", 30)):
        b.x("user_annotation", ann, s, 500)
        b.x("python_function", "nn.Module: GPT_0", s + 10, 480)
        for i in range(3):
            t = s + 20 + 100 * i
            b.x("python_function", f"nn.Module: Block_{i}", t, 90)
            b.launch(t + 10, "gemm", k)
    g = layers.layer_groups(_load(tmp_path, _doc(b.events))).sort("parent")
    assert g["parent"].to_list() == ["decode > nn.Module: GPT_0", "train > nn.Module: GPT_0"]
    assert g["layer"].to_list() == ["nn.Module: Block_{N}"] * 2
    # decode: 3 layers x 10 us = 30 us; train: 3 x 30 us = 90 us
    assert g["total_ns"].to_list() == [30 * US, 90 * US]
    assert g["median_ns"].to_list() == [10 * US, 30 * US]


def test_layer_groups_under_the_root_keep_its_name(tmp_path: Path) -> None:
    # Block_0..2 with no range above them: their parent is the root, still named
    # "[all kernels]" (as before paths were used); 3 layers x 10 us = 30 us.
    from traceparse.samplegen.llm import _Builder, _doc

    b = _Builder()
    for i in range(3):
        b.x("python_function", f"nn.Module: Block_{i}", 100 * i, 90)
        b.launch(100 * i + 10, "gemm", 10)
    g = layers.layer_groups(_load(tmp_path, _doc(b.events)))
    assert g["parent"].to_list() == [optree.ROOT]
    assert g["total_ns"].to_list() == [30 * US]


def test_other_thread_ranges_inside_a_step_are_its_children(tmp_path: Path) -> None:
    # main thread: ProfilerStep#0 [0, 1000) holding aten::mm [10, 100) (call at 20 -> a
    # 50 us kernel). Thread 2 (autograd's): MmBackward0 [200, 400) (call at 250 -> 30 us)
    # and late_op [900, 1200), which crosses the step's end (call at 950 -> 7 us).
    from traceparse.samplegen.llm import _Builder, _doc

    b = _Builder()
    b.x("user_annotation", "ProfilerStep#0", 0, 1000)
    b.x("cpu_op", "aten::mm", 10, 90)
    b.launch(20, "gemm", 50)
    main = len(b.events)
    b.x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 200, 200)
    b.launch(250, "gemm_bwd", 30)
    b.x("cpu_op", "late_op", 900, 300)
    b.launch(950, "late", 7)
    for e in b.events[main:]:
        if e["cat"] != "kernel":
            e["tid"] = 2
    t = optree.check_tree(optree.op_tree(_load(tmp_path, _doc(b.events)), view="ops"))
    row = {r["name"]: r for r in t.iter_rows(named=True)}
    step = row["ProfilerStep#*"]
    # the step holds its own mm (50) and the backward thread's MmBackward0 (30): 80 us
    assert (step["inclusive_ns"], step["kernels"]) == (80 * US, 2)
    bwd = row["autograd::engine::evaluate_function: MmBackward0"]
    assert (bwd["parent_id"], bwd["depth"], bwd["inclusive_ns"]) == (step["node_id"], 2,
                                                                     30 * US)
    # late_op crosses the step's end: a root child of its own, 7 us
    assert (row["late_op"]["depth"], row["late_op"]["inclusive_ns"]) == (1, 7 * US)
    assert row[optree.ROOT]["inclusive_ns"] == 87 * US


def test_child_starting_with_its_parent_stays_under_it(tmp_path: Path) -> None:
    # outer [0, 100) and inner [0, 50) open at the same instant on one thread; the file lists
    # inner first. The call at 10 (20 us kernel) is inner's, and inner is outer's child:
    # outer inclusive 20 us at depth 1, inner 20 us at depth 2 (it was filed under the root)
    from traceparse.samplegen.llm import _Builder, _doc

    b = _Builder()
    b.x("cpu_op", "inner", 0, 50)
    b.x("cpu_op", "outer", 0, 100)
    b.launch(10, "k", 20)
    t = optree.check_tree(optree.op_tree(_load(tmp_path, _doc(b.events)), view="ops"))
    row = {r["name"]: r for r in t.iter_rows(named=True)}
    assert (row["outer"]["depth"], row["outer"]["inclusive_ns"]) == (1, 20 * US)
    assert (row["inner"]["depth"], row["inner"]["parent_id"]) == (2, row["outer"]["node_id"])
    assert row["inner"]["inclusive_ns"] == 20 * US
