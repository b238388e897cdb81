"""Small Kineto traces in vLLM and SGLang style with a known phase and layer structure.

Every number is chosen so tests can work the answers out by hand. Times are integer
microseconds from the trace start. Step ``i`` of a trace starts at ``S = i * P`` us, where the
period ``P`` is 1000 us, or the next multiple of 1000 above ``200 + 100 L`` for deeper
models, and has, on host thread 1 of process 10 (``L`` = number of layers):

* a step annotation ``[S, S + 100 + 100 L)``: SGLang ``step[EXTEND bs=B toks=T]`` /
  ``step[DECODE bs=B]``, or vLLM ``execute_T_context_C(sq..)_generation_G(sq..)``;
* a model-runner frame (``python_function``) ``[S + 1, S + 99 + 100 L)``: SGLang
  ``forward_extend`` / ``forward_decode``, vLLM ``execute_model``;
* per layer ``l``: ``nn.Module: DecoderLayer_l`` ``[S + 10 + 100 l, S + 90 + 100 l)``
  holding ``aten::linear`` ``[+20, +60)`` (Input Dims ``[[T, 64], [256, 64]]``) whose
  ``cudaLaunchKernel`` ``[+30, +35)`` launches ``gemm_bf16_kernel`` at ``+40`` for the
  step's per-layer duration;
* one ``sampler_argmax_kernel`` (4 us) launched at ``S + 50 + 100 L`` inside the runner frame
  but outside any op, starting 10 us later.

:func:`gpt_trace` writes ``ProfilerStep#N`` steps whose linear inputs are 3-D ``[B, S, H]``
(no annotations), for the shape rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

BASE_NS = 1_700_000_000_000_000_000
PID, TID, STREAM = 10, 1, 7


@dataclass(frozen=True)
class LLMStep:
    """One serving step: ``phase`` (prefill, decode or mixed), batch, tokens and the
    duration in us of each layer's GEMM kernel (one entry per layer)."""

    phase: str
    batch: int
    tokens: int
    layer_us: tuple[int, ...]
    prefill_requests: int = 0


@dataclass
class _Builder:
    events: list[dict[str, Any]] = field(default_factory=list)
    corr: int = 1000

    def x(self, cat: str, name: str, ts: int, dur: int, **args: Any) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID,
                            "ts": ts, "dur": dur, "args": args})

    def launch(self, ts: int, kname: str, kdur: int, *, delay: int = 10) -> None:
        self.corr += 1
        self.x("cuda_runtime", "cudaLaunchKernel", ts, 5, correlation=self.corr)
        self.events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0,
                            "tid": STREAM, "ts": ts + delay, "dur": kdur,
                            "args": {"device": 0, "stream": STREAM, "correlation": self.corr,
                                     "grid": [64, 1, 1], "block": [256, 1, 1]}})


def step_period(layers: int) -> int:
    """Microseconds between step starts for ``layers`` layers (steps never overlap)."""
    return 1000 * max(1, -(-(200 + 100 * layers) // 1000))


def _annotation(style: str, st: LLMStep) -> str:
    if style == "sglang":
        mode = {"prefill": "EXTEND", "decode": "DECODE", "mixed": "MIXED"}[st.phase]
        return (f"step[DECODE bs={st.batch}]" if mode == "DECODE"
                else f"step[{mode} bs={st.batch} toks={st.tokens}]")
    ctx = st.prefill_requests if st.phase != "decode" else 0
    gen = st.batch - ctx
    dec_toks = gen
    pre_toks = st.tokens - dec_toks
    return (f"execute_{st.tokens}_context_{ctx}(sq{pre_toks}sk{pre_toks}sqsq0sqsk0)"
            f"_generation_{gen}(sq{dec_toks}sk{dec_toks * 100}sqsq0sqsk0)")


def _runner(style: str, phase: str) -> str:
    if style == "vllm":
        return "vllm/v1/worker/gpu_model_runner.py(100): execute_model"
    fn = {"prefill": "forward_extend", "decode": "forward_decode", "mixed": "forward_mixed"}
    return f"sglang/srt/model_executor/model_runner.py(200): {fn[phase]}"


def serving_trace(style: str, steps: list[LLMStep], *, unlinked_us: int = 0,
                  annotate: bool = True) -> dict[str, Any]:
    """A Kineto document (``json.dump`` it) of ``steps`` in ``style`` (``sglang`` or
    ``vllm``) laid out as the module docstring says. ``unlinked_us > 0`` adds one kernel of
    that duration whose correlation id has no launch call; ``annotate=False`` leaves out the
    step annotations (only the model-runner frames mark the steps)."""
    if style not in ("sglang", "vllm"):
        raise ValueError(f"style must be sglang or vllm, not {style!r}")
    b = _Builder()
    period = step_period(max((len(st.layer_us) for st in steps), default=0))
    for i, st in enumerate(steps):
        s = i * period
        n = len(st.layer_us)
        if annotate:
            b.x("user_annotation", _annotation(style, st), s, 100 + 100 * n)
        b.x("python_function", _runner(style, st.phase), s + 1, 98 + 100 * n)
        for layer, kdur in enumerate(st.layer_us):
            t = s + 100 * layer
            b.x("python_function", f"nn.Module: DecoderLayer_{layer}", t + 10, 80)
            b.x("cpu_op", "aten::linear", t + 20, 40,
                **{"Input Dims": [[st.tokens, 64], [256, 64]], "External id": b.corr + 1})
            b.launch(t + 30, "gemm_bf16_kernel", kdur)
        b.launch(s + 50 + 100 * n, "sampler_argmax_kernel", 4)
    if unlinked_us:
        b.events.append({"ph": "X", "cat": "kernel", "name": "orphan_kernel", "pid": 0,
                         "tid": STREAM, "ts": len(steps) * period, "dur": unlinked_us,
                         "args": {"device": 0, "stream": STREAM, "correlation": 999_999}})
    return _doc(b.events)


def gpt_trace(steps: list[tuple[str, int, int]], *, layers: int = 2) -> dict[str, Any]:
    """``ProfilerStep#i`` steps with no phase annotations: each ``(kind, B, S)`` is
    ``"fwd"`` (one 3-D ``aten::linear`` per layer with Input Dims ``[[B, S, 64], [256,
    64]]``) or ``"train"`` (the same plus an ``autograd::engine::evaluate_function:
    MmBackward0``). Step ``i`` spans ``[1000 i, 1000 i + 100 + 100 layers)``; every linear
    launches a 10 us kernel."""
    b = _Builder()
    for i, (kind, batch, seq) in enumerate(steps):
        s = i * 1000
        b.x("user_annotation", f"ProfilerStep#{i}", s, 100 + 100 * layers)
        for layer in range(layers):
            t = s + 100 * layer
            b.x("cpu_op", "aten::linear", t + 20, 40,
                **{"Input Dims": [[batch, seq, 64], [256, 64]]})
            b.launch(t + 30, "gemm_bf16_kernel", 10)
        if kind == "train":
            b.x("cpu_op", "autograd::engine::evaluate_function: MmBackward0",
                s + 100 * layers + 10, 20)
    return _doc(b.events)


def _doc(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132,
                                  "computeMajor": 9, "computeMinor": 0}],
            "traceEvents": events}
