"""Compile and warm-up: one-off host work that prepares GPU code, from every signal a trace has.

The first time a program runs a function on the GPU it may compile it (NVRTC, XLA, Triton,
Inductor, nvFuser, an external ``ptxas``), link it, load the module, or, with CUDA lazy
loading, load the function at its first launch. That time is spent once per function: it is
**warm-up**, reported apart from steady state (attribution ``warmup_ns``) and never turned
into a "feed it faster" fix. :func:`warmup_signals` returns every warm-up interval with its
``reason`` and ``evidence``:

``api``
    a module-load / link / runtime-compile call (:data:`WARMUP_API_RE`): ``cuModuleLoad*``,
    ``cuLibraryLoad*``, ``cuLink*``, ``nvJitLink*``, ``nvPTXCompiler*``, ``nvrtc*``,
    ``hipModuleLoad*``, ``hiprtc*``.
``compile_range``
    a host range that compiles or autotunes (:data:`WARMUP_RANGE_RE`): NVRTC, Triton
    (``compiler.py: compile``), Inductor/nvFuser compile and autotune ranges
    (``FusionKernelRuntime::compileKernel``, ``FusionExecutor::compileFusion``,
    ``GraphLowering.codegen``; ``codegen`` only as a word of its own, so FBGEMM's
    ``split_embedding_codegen_*`` ops are not compiles), XLA
    (``XlaCompile``, ``BuildExecutable``, ``RunHloPasses``, ``backend_compile``).
``compiler_process``
    an OS-runtime call that starts or waits for another process (:data:`SPAWN_RE`:
    ``posix_spawn*``, ``fork``, ``vfork``, ``exec*``, ``system``, ``popen``, ``wait*``) on a
    thread that makes CUDA calls, when the thread's next CUDA call is a link or module load
    (``cuLink*``, ``cuModuleLoad*``, ``cuLibraryLoad*``, ``nvJitLink*``): the process was a
    compiler (``ptxas`` assembling the PTX that is linked and loaded next; XLA does this for
    every new jitted function). Also when the trace's own process list names a compiler
    (:data:`COMPILER_RE`: ``ptxas``, ``nvcc``, ``nvlink``, ``cicc``, ``clang``, ``hipcc``,
    ``ld``...).
``lazy_loading_marker``
    CUPTI's ``Lazy Function Loading`` records (Kineto ``overhead`` events, nsys strings): the
    driver loading a function at its first launch. They carry no process (``pid -1``), so
    they count for every process of the rank.
``graph_capture``
    a stream-capture window (``*StreamBeginCapture`` to ``*StreamEndCapture`` on one thread,
    :func:`traceparse.analyses.graphs.captures`): the launches inside it are recorded into a
    graph, not run, so the GPU idles while the host builds the graph once (serving engines
    capture one graph per batch size at start-up; ``torch.compile(mode="reduce-overhead")``
    at its first calls). A window without its end call in the trace runs to the thread's
    last call.
``first_call``
    the first call of an op with given input shapes (a ``cpu_op`` range: name and
    ``input_dims``) that lasted at least :data:`FIRST_CALL_RATIO` times the median of that op
    (over at least :data:`FIRST_CALL_MIN_CALLS` calls) and at least :data:`FIRST_CALL_MIN_NS`,
    and longer than every later call of the same op and shape (a cost that recurs is not
    warm-up),
    not counting the time its thread spent in calls that wait for the GPU (a first ``.item()``
    that waits is synchronisation, not warm-up; an allocation call waits only while work is
    in flight: a first ``cudaMalloc`` that lasts 0.5 s with nothing issued and unfinished is
    the allocator's own first-time cost, and counts), or one that a lazy-loading marker overlaps:
    lazy module loading, cuBLAS/cuDNN handle and heuristic set-up, autotuning.

Lazy first *launch calls* (a launch call that took ten times the median launch) are found by
:func:`traceparse.analyses.attribution.call_windows` and join these intervals there.

Columns: ``rank, process_id, thread_id, name, start_ns, end_ns, reason, evidence``; ``name``
says what the interval is (``first aten::mm [[64, 4096], [4096, 4096]]: 2.50 ms, median
58.0 µs``).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from traceparse import units
from traceparse.analyses.codes import matches
from traceparse.analyses.waiting import waiting_parts
from traceparse.timeline import Timeline

#: Module load, link and runtime compilation calls.
WARMUP_API_RE = (r"^(cuModuleLoad\w*|cuLibraryLoad\w*|cuLink\w*|nvJitLink\w*|nvPTXCompiler\w*|"
                 r"nvrtc\w*|hipModuleLoad\w*|hiprtc\w*)$")
#: Host ranges that compile or autotune (NVRTC, Triton, Inductor, nvFuser, XLA, autotuners).
WARMUP_RANGE_RE = (r"(?i)(^|[^a-z/])(compile|compiling|compilation|autotun\w*|nvrtc\w*|"
                   r"jit_compile|lower_to_triton|benchmark_choice\w*)([^a-z/]|$)"
                   r"|(^|[^a-z/_])codegen([^a-z_]|$)"
                   r"|xlacompile|buildexecutable|runhlopasses|pjrt\w*compile"
                   r"|::compile(kernel|fusion|program|_\w+)?([^a-z]|$)")
#: Python functions that wrap a call (of a compiled function) rather than compile anything.
WRAPPER_RE = r"\.py\(\d+\): \w*_wrapper$"
#: OS-runtime calls that start or wait for another process.
SPAWN_RE = (r"^(posix_spawnp?|fork|vfork|__fork|clone3?|execve?|execvp?e?|execl[pe]?|system|"
            r"popen|waitpid|wait4|waitid|wait)(_\w+)?$")
#: The CUDA calls that consume a compiler's output.
LINK_LOAD_RE = r"^(cuLink\w*|cuModuleLoad\w*|cuLibraryLoad\w*|nvJitLink\w*|hipModuleLoad\w*)$"
#: Process names of compilers and linkers.
COMPILER_RE = r"(?i)^(ptxas|nvcc|nvlink|cicc|fatbinary|nvdisasm|clang\S*|hipcc|ld|ld\.lld|lld)$"
#: CUPTI's lazy function loading record.
LAZY_MARKER_RE = r"^Lazy Function Loading$"
FIRST_CALL_RATIO = 10.0
FIRST_CALL_MIN_CALLS = 3
FIRST_CALL_MIN_NS = 100_000

_COLS = {"rank": pl.Int32, "process_id": pl.Int64, "thread_id": pl.Int64, "name": pl.String,
         "start_ns": pl.Int64, "end_ns": pl.Int64, "reason": pl.String, "evidence": pl.String}


def _frame(rows: pl.DataFrame, reason: str, evidence: pl.Expr) -> pl.DataFrame:
    return rows.select(pl.col("rank").cast(pl.Int32), pl.col("process_id").cast(pl.Int64),
                       pl.col("thread_id").cast(pl.Int64), pl.col("name").cast(pl.String),
                       pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64),
                       pl.lit(reason).alias("reason"), evidence.alias("evidence"))


def warmup_signals(tl: Timeline, blocking_re: str) -> pl.DataFrame:
    """Every warm-up interval of ``tl`` with its reason (module docstring). ``blocking_re``:
    the host calls that wait for the GPU (excluded from a first call's own time)."""
    # the api columns the rules read, before the filter copies them
    api = tl.api.select("rank", "process_id", "thread_id", "name", "start_ns",
                        "end_ns").filter(pl.col("end_ns").is_not_null())
    host = tl.ranges.filter(pl.col("end_ns").is_not_null() & pl.col("device_id").is_null())
    names = host["name"].cast(pl.String)
    kinds = host["kind"].cast(pl.String)
    parts = [
        _frame(api.filter(matches(api["name"], WARMUP_API_RE)), "api",
               pl.lit("module load / link / runtime compile call")),
        # a Python function range is judged by its function, not its file's path
        # (``torch/_compile.py(41): inner`` wraps any call), and a wrapper is not the
        # compile it wraps: ``torch/_dynamo/eval_frame.py: compile_wrapper`` runs on every
        # call of a compiled function (the compile steps inside it have ranges of their own)
        _frame(host.filter(names.str.replace(r"^.*\.py\(\d+\): ", "")
                           .str.contains(WARMUP_RANGE_RE)
                           & ~names.str.contains(WRAPPER_RE)
                           & ~kinds.is_in(["osrt", "cpu_sample"])), "compile_range",
               pl.lit("host range that compiles or autotunes")),
        _frame(host.filter(names.str.contains(LAZY_MARKER_RE))
               .with_columns(pl.when(pl.col("process_id") < 0).then(None)
                             .otherwise(pl.col("process_id")).alias("process_id")),
               "lazy_loading_marker", pl.lit("CUPTI lazy function loading record")),
        _spawns(tl, api, host.filter(kinds == "osrt")),
        _captures(tl, api),
        _first_calls(tl, api, host, blocking_re),
    ]
    out = pl.concat([p.cast(pl.Schema(_COLS)) for p in parts], how="vertical")
    return out.sort("rank", "start_ns")


def _captures(tl: Timeline, api: pl.DataFrame) -> pl.DataFrame:
    """The stream-capture windows (``graph_capture``), on their begin call's process."""
    from traceparse.analyses.graphs import captures

    cap = captures(tl)
    if cap.height == 0:
        return pl.DataFrame(schema=_COLS)
    if cap["end_ns"].null_count():  # an unclosed window ends at its thread's last call
        last = api.group_by("rank", "thread_id").agg(pl.col("end_ns").max().alias("_last"))
        cap = cap.join(last, on=["rank", "thread_id"], how="left", nulls_equal=True,
                       maintain_order="left").with_columns(pl.coalesce("end_ns", "_last"))
    names = [f"stream capture ({units.plural(n, 'launch', 'launches')} recorded into a graph)"
             for n in cap["captured_launches"].to_list()]
    return _frame(cap.with_columns(pl.Series("name", names, pl.String),
                                   pl.col("begin_ns").alias("start_ns")),
                  "graph_capture",
                  pl.lit("stream capture: launches recorded into a graph, not run"))


def _spawns(tl: Timeline, api: pl.DataFrame, osrt: pl.DataFrame) -> pl.DataFrame:
    """``compiler_process`` intervals (module docstring)."""
    sp = osrt.filter(pl.col("name").cast(pl.String).str.contains(SPAWN_RE))
    if sp.height == 0 or api.height == 0:
        return pl.DataFrame(schema=_COLS)
    procs = tl.meta.get("processes") or []
    compiler = any(isinstance(p, dict) and p.get("name") and
                   pl.Series([str(p["name"])]).str.contains(COMPILER_RE).item() for p in procs)
    calls = (api.select("rank", "process_id", "thread_id",
                        pl.col("name").cast(pl.String).alias("_next"),
                        pl.col("start_ns").alias("_ns")).sort("_ns"))
    threads = calls.select("rank", "process_id", "thread_id").unique()
    sp = sp.join(threads, on=["rank", "process_id", "thread_id"], how="semi").sort("end_ns")
    j = sp.join_asof(calls, left_on="end_ns", right_on="_ns",
                     by=["rank", "process_id", "thread_id"], strategy="forward",
                     check_sortedness=False)
    links = pl.col("_next").fill_null("").str.contains(LINK_LOAD_RE)
    hit = j.filter(links | pl.lit(compiler))
    ev = (pl.when(links).then(pl.format("next CUDA call of the thread: {}", pl.col("_next")))
          .otherwise(pl.lit("a compiler process is in the trace's process list")))
    return _frame(hit.with_columns(pl.format("{} (compiler process)", pl.col("name"))
                                   .alias("name")), "compiler_process", ev)


def _first_calls(tl: Timeline, api: pl.DataFrame, host: pl.DataFrame, blocking_re: str
                 ) -> pl.DataFrame:
    """``first_call`` intervals (module docstring)."""
    ops = host.filter(pl.col("kind").cast(pl.String) == "cpu_op")
    if ops.height == 0:
        return pl.DataFrame(schema=_COLS)
    key = ["rank", "process_id", "name"]
    ops = ops.with_columns(pl.col("name").cast(pl.String), pl.col("input_dims").fill_null(""))
    stats = ops.group_by(key).agg(pl.col("dur_ns").median().alias("_med"),
                                  pl.len().alias("_n"))
    ordered = ops.sort("start_ns").with_columns(
        pl.int_range(pl.len()).over([*key, "input_dims"]).alias("_i"))
    # the longest later call of the same op and shape: a cost that recurs is not warm-up
    later = (ordered.filter(pl.col("_i") > 0).group_by([*key, "input_dims"])
             .agg(pl.col("dur_ns").max().alias("_later")))
    first = (ordered.filter(pl.col("_i") == 0)
             .join(stats, on=key).join(later, on=[*key, "input_dims"], how="left")
             .filter((pl.col("_n") >= FIRST_CALL_MIN_CALLS)
                     & (pl.col("dur_ns") > pl.col("_later").fill_null(0))))
    lazy = host.filter(pl.col("name").cast(pl.String).str.contains(LAZY_MARKER_RE))
    long = pl.col("dur_ns") >= pl.max_horizontal(FIRST_CALL_RATIO * pl.col("_med"),
                                                  pl.lit(FIRST_CALL_MIN_NS))
    cand = first.filter(long | pl.lit(lazy.height > 0))
    if cand.height == 0:
        return pl.DataFrame(schema=_COLS)
    own = _own_time(cand, waiting_parts(tl, api.filter(matches(api["name"], blocking_re))))
    marked = _overlaps(cand, lazy)
    cand = cand.with_columns(pl.Series("_own", own, pl.Int64), pl.Series("_lazy", marked))
    ok = cand.filter((pl.col("_own") >= pl.max_horizontal(FIRST_CALL_RATIO * pl.col("_med"),
                                                          pl.lit(FIRST_CALL_MIN_NS)))
                     | (pl.col("_lazy") & (pl.col("_own") > pl.col("_med"))))
    if ok.height == 0:
        return pl.DataFrame(schema=_COLS)
    label = [f"first {n}{_shape(d)}: {units.duration(t)}, median {units.duration(m)}"
             for n, d, t, m in ok.select("name", "input_dims", "dur_ns", "_med").iter_rows()]
    ev = (pl.format("first call of this op and shape, {} calls of the op", pl.col("_n"))
          + pl.when(pl.col("_lazy")).then(pl.lit("; a lazy function loading record overlaps it"))
          .otherwise(pl.lit("")))
    return _frame(ok.with_columns(pl.Series("name", label)), "first_call", ev)


def _shape(dims: str) -> str:
    """`` [[64, 4096], [4096, 4096]]`` from Kineto's ``Input Dims`` JSON text ('' if none)."""
    if not dims:
        return ""
    try:
        shapes = [s for s in json.loads(dims) if s]
    except (ValueError, TypeError):
        return ""
    return f" {shapes}" if shapes else ""


def _own_time(cand: pl.DataFrame, waits: pl.DataFrame) -> np.ndarray:
    """Each candidate op's duration minus the time its thread spent **waiting** inside it:
    ``waits``, the parts of the blocking calls that wait
    (:func:`traceparse.analyses.waiting.waiting_parts`: an explicit synchronise or copy
    whole, an allocation only while its rank's GPU had work in flight; the rest of it is
    the allocator's own work). ``hta__alexnet_benchmark_trace``: the first
    ``aten::max_pool2d`` lasts 825 ms, all of it in two ``cudaMalloc`` calls with nothing in
    flight; its later call takes 8 ms.
    """
    out = cand["dur_ns"].to_numpy().astype(np.int64).copy()
    if waits.height == 0:
        return out
    by = {(k[0], k[1], k[2]): (g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
          for k, g in waits.sort("start_ns").group_by("rank", "process_id", "thread_id")}
    for i, r in enumerate(cand.select("rank", "process_id", "thread_id", "start_ns",
                                      "end_ns").iter_rows()):
        hit = by.get((r[0], r[1], r[2]))
        if hit is None:
            continue
        s, e = hit
        lo, hi = np.searchsorted(e, r[3], "right"), np.searchsorted(s, r[4], "left")
        if hi > lo:  # the waiting parts inside the op
            a, b = np.maximum(s[lo:hi], r[3]), np.minimum(e[lo:hi], r[4])
            out[i] -= int(np.maximum(b - a, 0).sum())
    return out


def _overlaps(cand: pl.DataFrame, marks: pl.DataFrame) -> list[bool]:
    """Per candidate op: does a lazy-loading record of its rank overlap it?"""
    if marks.height == 0:
        return [False] * cand.height
    out = []
    per = {k[0]: (g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
           for k, g in marks.sort("start_ns").group_by("rank")}
    for rank, s0, e0 in cand.select("rank", "start_ns", "end_ns").iter_rows():
        hit = per.get(rank)
        if hit is None:
            out.append(False)
            continue
        s, e = hit
        i = np.searchsorted(s, e0, "left")
        out.append(bool(i > 0 and (e[:i] > s0).any()))
    return out
