"""Deterministic, schema-faithful sample traces with known ground truth.

A :class:`Scenario` is plain data: host API calls (each maybe launching one GPU activity, or
a host synchronisation), and NVTX push/pop ranges. From one scenario two things are built:

* :func:`scenario_timeline` - the :class:`~traceparse.timeline.Timeline` a correct nsys
  parser must produce (built directly with :func:`traceparse.schema.conform`);
* :func:`write_sqlite` - the Nsight Systems SQLite export (2024.2 layout) of the same events,
  see :mod:`traceparse.samplegen.sqlite`.

Scenarios (:data:`SCENARIOS`): ``mini_train`` (three training steps: GEMMs, elementwise
kernels, an NCCL all-reduce on a second stream partly overlapping backward compute, H2D/D2H
copies, a loss ``.item()`` stream sync, NVTX ``step N`` / ``dataloader`` / ``forward`` /
``backward`` / ``optimizer`` ranges) and the attribution cases ``compute_bound``,
``memory_bound``, ``launch_bound``, ``comm_bound`` and ``sync_bound`` whose expected
breakdowns are worked out by hand in ``tests/test_attribution_golden.py``.

All times are integer nanoseconds relative to the session start, as nsys writes them.

    >>> tl = scenario_timeline("compute_bound")
    >>> tl.gpu.height
    6
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.categorize import category_expr
from traceparse.timeline import Timeline, ingest_frame, ingest_rows

US = 1000  # ns per microsecond
FIRST_CORRELATION_ID = 101
PID = 4242

GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel__5x_cublas")
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::"
               "GeluCUDAKernelImpl(at::TensorIteratorBase &, at::native::GeluType)::"
               "[lambda() (instance 2)]::operator ()() const::[lambda() (instance 4)]::"
               "operator ()() const::[lambda(c10::BFloat16) (instance 1)], "
               "at::detail::Array<char *, 2>>(int, T2, T3)")
OPTIMIZER = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
             "(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)"
             "::FusedAdamMathFunctor<c10::BFloat16, 4>>(T1, T2)")
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"

#: demangled name -> (short name, grid, block, registers, static smem, dynamic smem)
KERNELS: dict[str, tuple[str, tuple[int, int, int], tuple[int, int, int], int, int, int]] = {
    GEMM: (GEMM, (132, 1, 1), (384, 1, 1), 168, 0, 213504),
    ELEMENTWISE: ("vectorized_elementwise_kernel", (2048, 1, 1), (128, 1, 1), 26, 0, 0),
    OPTIMIZER: ("multi_tensor_apply_kernel", (320, 1, 1), (512, 1, 1), 64, 0, 0),
    NCCL: ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", (4, 1, 1), (640, 1, 1), 96, 4624, 0),
}


@dataclass(frozen=True)
class Activity:
    """One GPU activity (kernel, memcpy or memset) on device ``device``, stream ``stream``.

    For memcpy ``copy_kind`` is HtoD, DtoH, DtoD, HtoH or PtoP and ``src_kind``/``dst_kind``
    are nsys memory-kind labels (Pageable, Pinned, Device, ...); for memset ``dst_kind`` is
    the memory kind.
    """

    kind: str
    stream: int
    start_ns: int
    dur_ns: int
    name: str = ""
    bytes: int = 0
    copy_kind: str = ""
    src_kind: str = ""
    dst_kind: str = ""
    device: int = 0

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    def _kernel(self) -> tuple[str, tuple[int, int, int], tuple[int, int, int], int, int, int]:
        return KERNELS.get(self.name, (self.name, (1, 1, 1), (1, 1, 1), 0, 0, 0))

    @property
    def short_name(self) -> str:
        return self._kernel()[0]

    @property
    def grid(self) -> tuple[int, int, int]:
        return self._kernel()[1]

    @property
    def block(self) -> tuple[int, int, int]:
        return self._kernel()[2]

    @property
    def registers(self) -> int:
        return self._kernel()[3]

    @property
    def static_smem(self) -> int:
        return self._kernel()[4]

    @property
    def dynamic_smem(self) -> int:
        return self._kernel()[5]

    def display_name(self) -> str:
        """The name a parser gives it: the kernel name, or nsys stats' ``[CUDA memcpy
        Host-to-Device]`` / ``[CUDA memset]`` for copies and sets."""
        if self.kind == "memcpy":
            return f"[CUDA memcpy {_COPY_LABEL[self.copy_kind]}]"
        if self.kind == "memset":
            return "[CUDA memset]"
        return self.name


_COPY_LABEL = {"HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "DtoD": "Device-to-Device",
               "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer"}


@dataclass(frozen=True)
class Call:
    """One host API call on thread ``tid`` (0 = the main thread, tid == pid).

    ``activity`` is the GPU work it launched, if any; ``sync`` ("stream", "context" or
    "event") marks a host synchronisation, written as a CUPTI SYNCHRONIZATION row over the
    same interval (``sync_stream`` None = all streams). Those rows are host waits, not GPU
    work: the timeline keeps the API call only (as the nsys parser does).
    """

    api: str
    start_ns: int
    end_ns: int
    activity: Activity | None = None
    tid: int = 0
    sync: str | None = None
    sync_stream: int | None = None

    @property
    def is_driver(self) -> bool:
        """Driver API (``cu*``, eventClass 1) rather than runtime (``cuda*``, eventClass 0)."""
        return self.api.startswith("cu") and not self.api.startswith("cuda")


@dataclass(frozen=True)
class Range:
    """An NVTX push/pop range on thread ``tid`` (0 = main thread)."""

    name: str
    start_ns: int
    end_ns: int
    tid: int = 0


@dataclass(frozen=True)
class Scenario:
    """A named sample: calls in issue order, NVTX ranges and thread names."""

    name: str
    description: str
    calls: tuple[Call, ...]
    ranges: tuple[Range, ...] = ()
    pid: int = PID
    threads: tuple[tuple[int, str], ...] = field(default=((PID, "python3"),))

    def numbered_calls(self) -> Iterator[tuple[int, Call]]:
        """(correlation id, call) in issue order; ids start at 101 and count every call."""
        yield from enumerate(self.calls, start=FIRST_CORRELATION_ID)

    def span_ns(self) -> tuple[int, int]:
        """(first start, last end) over calls, activities and ranges."""
        starts = [c.start_ns for c in self.calls] + [r.start_ns for r in self.ranges]
        ends = [c.end_ns for c in self.calls] + [r.end_ns for r in self.ranges]
        acts = [c.activity for c in self.calls if c.activity is not None]
        starts += [a.start_ns for a in acts]
        ends += [a.end_ns for a in acts]
        return min(starts), max(ends)


# ------------------------------------------------------------------ hand-written scenarios
def _k(stream: int, start_us: int, end_us: int, name: str = GEMM) -> Activity:
    return Activity("kernel", stream, start_us * US, (end_us - start_us) * US, name=name)


def _cp(stream: int, start_us: int, end_us: int, copy_kind: str, nbytes: int,
        src: str = "Pinned", dst: str = "Device") -> Activity:
    return Activity("memcpy", stream, start_us * US, (end_us - start_us) * US,
                    bytes=nbytes, copy_kind=copy_kind, src_kind=src, dst_kind=dst)


def _call(api: str, start_us: int, end_us: int, act: Activity | None = None, **kw: Any
          ) -> Call:
    return Call(api, start_us * US, end_us * US, act, **kw)


LAUNCH = "cudaLaunchKernel_v7000"
COPY_ASYNC = "cudaMemcpyAsync_v3020"
MIB = 1 << 20


def _compute_bound() -> Scenario:
    return Scenario("compute_bound", "Two GEMM-heavy streams; small copies at both ends; one "
                    "10 us gap whose first half a launch call covers.", (
        _call(COPY_ASYNC, 80, 95, _cp(14, 100, 120, "HtoD", 1 * MIB)),
        _call(LAUNCH, 96, 100, _k(7, 120, 420)),
        _call(LAUNCH, 101, 104, _k(13, 300, 520, ELEMENTWISE)),
        _call(LAUNCH, 510, 525, _k(7, 530, 830)),
        _call(LAUNCH, 526, 529, _k(7, 830, 890, ELEMENTWISE)),
        _call(COPY_ASYNC, 530, 533, _cp(14, 890, 900, "DtoH", 64 * 1024, "Device", "Pinned")),
    ))


def _memory_bound() -> Scenario:
    return Scenario("memory_bound", "Large copies dominate; a kernel and a memset overlap "
                    "them; a 50 us gap partly covered by the next copy's call.", (
        _call(COPY_ASYNC, 90, 95, _cp(14, 100, 600, "HtoD", 64 * MIB)),
        _call(LAUNCH, 96, 99, _k(7, 200, 300, ELEMENTWISE)),
        _call("cudaMemsetAsync_v3020", 100, 104,
              Activity("memset", 7, 600 * US, 50 * US, bytes=8 * MIB, dst_kind="Device")),
        _call(COPY_ASYNC, 640, 660, _cp(14, 700, 1100, "DtoH", 64 * MIB, "Device", "Pinned")),
    ))


def _launch_bound() -> Scenario:
    # One 12 us kernel on stream 13, then ten 3 us kernels on stream 7, each launched by a
    # 10 us cudaLaunchKernel call issued back to back; kernel i starts 2 us after its call.
    calls = [_call(LAUNCH, 90, 100, _k(13, 102, 114, ELEMENTWISE))]
    for i in range(10):
        calls.append(_call(LAUNCH, 100 + 10 * i, 110 + 10 * i,
                           _k(7, 112 + 10 * i, 115 + 10 * i, ELEMENTWISE)))
    return Scenario("launch_bound", "Tiny kernels whose launch calls (10 us) are slower than "
                    "the kernels (3 us).", tuple(calls))


def _comm_bound() -> Scenario:
    return Scenario("comm_bound", "An NCCL all-reduce mostly exposed between two compute "
                    "kernels; a device copy hidden under comm and compute.", (
        _call(LAUNCH, 80, 85, _k(7, 100, 300)),
        _call("cuLaunchKernelEx", 86, 90, _k(20, 250, 700, NCCL)),
        _call(LAUNCH, 91, 95, _k(7, 700, 800)),
        _call(COPY_ASYNC, 96, 99, _cp(14, 650, 720, "DtoD", 256 * MIB, "Device", "Device")),
    ))


def _sync_bound() -> Scenario:
    return Scenario("sync_bound", "Host synchronisation (cudaDeviceSynchronize, a synchronous "
                    "cudaMemcpy, cudaStreamSynchronize) followed by CPU work leaves the GPU "
                    "idle.", (
        _call(LAUNCH, 90, 95, _k(7, 100, 200)),
        _call(LAUNCH, 96, 99, _k(13, 150, 250, ELEMENTWISE)),
        _call("cudaDeviceSynchronize_v3020", 100, 252, sync="context"),
        _call(LAUNCH, 400, 405, _k(7, 410, 510)),
        _call("cudaMemcpy_v3020", 412, 522,
              _cp(7, 510, 520, "DtoH", 4 * MIB, "Device", "Pageable")),
        _call(LAUNCH, 700, 705, _k(7, 710, 760, ELEMENTWISE)),
        _call("cudaStreamSynchronize_v3020", 706, 761, sync="stream", sync_stream=7),
    ), ranges=(
        Range("host_postprocess", 252 * US, 400 * US),
        Range("host_postprocess", 522 * US, 700 * US),
    ))


# ------------------------------------------------------------------ mini_train (simulated)
class _Sim:
    """Issue calls on a host clock; GPU work starts when its stream is free, its
    dependencies are done and ``latency`` after the call began."""

    def __init__(self, t0: int) -> None:
        self.t = t0
        self.free: dict[int, int] = {}
        self.calls: list[Call] = []
        self.ranges: list[Range] = []

    def cpu(self, us: float) -> None:
        self.t += int(us * US)

    def launch(self, api: str, call_us: float, kind: str, stream: int, dur_us: float, *,
               name: str = "", after: int = 0, **kw: Any) -> Activity:
        start = self.t
        end = start + int(call_us * US)
        gstart = max(self.free.get(stream, 0), after, start + 4 * US)
        act = Activity(kind, stream, gstart, int(dur_us * US), name=name, **kw)
        self.free[stream] = act.end_ns
        self.calls.append(Call(api, start, end, act))
        self.t = end + 3 * US
        return act

    def sync_stream(self, stream: int) -> None:
        start = self.t
        end = max(start + 2 * US, self.free.get(stream, 0) + 3 * US)
        self.calls.append(Call("cudaStreamSynchronize_v3020", start, end, sync="stream",
                               sync_stream=stream))
        self.t = end

    def range(self, name: str, body: Callable[[], None]) -> None:
        start = self.t
        body()
        self.ranges.append(Range(name, start, self.t))


def _mini_train() -> Scenario:
    sim = _Sim(1000 * US)
    compute, comm = 7, 20

    def step(k: int) -> None:
        sim.range("dataloader", lambda: sim.cpu(120 + 10 * k))
        sim.launch(COPY_ASYNC, 8, "memcpy", compute, 90, bytes=2 * MIB, copy_kind="HtoD",
                   src_kind="Pinned", dst_kind="Device")

        def forward() -> None:
            for _ in range(4):
                sim.launch(LAUNCH, 6, "kernel", compute, 90, name=GEMM)
                sim.cpu(2)
                sim.launch(LAUNCH, 5, "kernel", compute, 12, name=ELEMENTWISE)

        def backward() -> None:
            for layer in (3, 2, 1, 0):
                sim.launch(LAUNCH, 6, "kernel", compute, 100, name=GEMM)
                wgrad = sim.launch(LAUNCH, 6, "kernel", compute, 95, name=GEMM)
                sim.launch(LAUNCH, 5, "kernel", compute, 10, name=ELEMENTWISE)
                if layer in (2, 0):
                    sim.launch("cuLaunchKernelEx", 9, "kernel", comm, 260, name=NCCL,
                               after=wgrad.end_ns)

        def optimizer() -> None:
            sim.launch(LAUNCH, 7, "kernel", compute, 45, name=OPTIMIZER,
                       after=sim.free[comm])
            sim.launch(COPY_ASYNC, 6, "memcpy", compute, 2, bytes=4, copy_kind="DtoH",
                       src_kind="Device", dst_kind="Pageable")
            sim.sync_stream(compute)

        sim.range("forward", forward)
        sim.range("backward", backward)
        sim.range("optimizer", optimizer)
        sim.cpu(15)

    for k in range(3):
        sim.range(f"step {k}", lambda k=k: step(k))  # type: ignore[misc]
    return Scenario("mini_train", "Three training steps: forward/backward GEMMs and "
                    "elementwise kernels, bucketed NCCL all-reduce on stream 20, H2D batch, "
                    "D2H loss and stream sync.", tuple(sim.calls),
                    tuple(sorted(sim.ranges, key=lambda r: (r.start_ns, -r.end_ns))))


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "mini_train": _mini_train,
    "compute_bound": _compute_bound,
    "memory_bound": _memory_bound,
    "launch_bound": _launch_bound,
    "comm_bound": _comm_bound,
    "sync_bound": _sync_bound,
}


def scenario(name: str) -> Scenario:
    """The scenario called ``name`` (a key of :data:`SCENARIOS`)."""
    try:
        return SCENARIOS[name]()
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


# ------------------------------------------------------------------ ground-truth timeline
def _depths(ranges: tuple[Range, ...]) -> list[int]:
    return [sum(1 for o in ranges if o is not r and o.tid == r.tid
                and o.start_ns <= r.start_ns and r.end_ns <= o.end_ns
                and (o.start_ns, -o.end_ns) < (r.start_ns, -r.end_ns))
            for r in ranges]


def scenario_timeline(name: str) -> Timeline:
    """The Timeline a correct nsys parser must produce for :func:`write_sqlite` ``(name)``."""
    from traceparse.samplegen import sqlite as sq

    sc = scenario(name)
    gpu: list[dict[str, Any]] = []
    api: list[dict[str, Any]] = []
    for corr, c in sc.numbered_calls():
        tid = c.tid or sc.pid
        api.append({"rank": 0, "kind": "driver" if c.is_driver else "runtime",
                    "name": c.api, "start_ns": c.start_ns, "end_ns": c.end_ns,
                    "dur_ns": c.end_ns - c.start_ns, "process_id": sc.pid, "thread_id": tid,
                    "correlation_id": corr, "return_value": 0,
                    # a sync's CUPTI record gives its call the stream it waited for
                    "stream_id": c.sync_stream if c.sync is not None else None})
        base = {"rank": 0, "context_id": 1, "process_id": sc.pid, "correlation_id": corr}
        a = c.activity
        if a is None:
            continue
        row = {**base, "kind": a.kind, "start_ns": a.start_ns, "end_ns": a.end_ns,
               "dur_ns": a.dur_ns, "device_id": a.device, "stream_id": a.stream,
               "name": a.display_name()}
        if a.kind == "kernel":
            row.update(short_name=a.short_name, grid_x=a.grid[0], grid_y=a.grid[1],
                       grid_z=a.grid[2], block_x=a.block[0], block_y=a.block[1],
                       block_z=a.block[2], registers_per_thread=a.registers,
                       static_smem_bytes=a.static_smem, dynamic_smem_bytes=a.dynamic_smem)
        else:
            row.update(bytes=a.bytes, dst_kind=a.dst_kind)
            if a.kind == "memcpy":
                row.update(copy_kind=a.copy_kind, src_kind=a.src_kind)
        gpu.append(row)
    gpu_df = (pl.DataFrame(gpu, infer_schema_length=None)
              .with_columns(pl.lit("compute").alias("category")))
    gpu_df = schema.conform("gpu", gpu_df)
    gpu_df = gpu_df.with_columns(category_expr()).sort("start_ns", "correlation_id")
    ranges = [{"rank": 0, "kind": "nvtx_push_pop", "name": r.name, "start_ns": r.start_ns,
               "end_ns": r.end_ns, "dur_ns": r.end_ns - r.start_ns, "process_id": sc.pid,
               "thread_id": r.tid or sc.pid, "depth": d}
              for r, d in zip(sc.ranges, _depths(sc.ranges), strict=True)]
    ranges_df = (schema.conform("ranges", pl.DataFrame(ranges, infer_schema_length=None))
                 if ranges else schema.empty("ranges"))
    info = sq.GPU_INFO
    devices = schema.conform("devices", pl.DataFrame([{
        "rank": 0, "device_id": 0, "name": info["name"], "vendor": "nvidia",
        "chip_name": info["chipName"], "sm_count": info["smCount"],
        "clock_hz": info["clockRate"], "memory_bytes": info["totalMemory"],
        "memory_bandwidth_bps": float(info["memoryBandwidth"]),
        "l2_bytes": info["l2CacheSize"], "compute_major": info["computeMajor"],
        "compute_minor": info["computeMinor"], "uuid": info["uuid"]}]))
    start, end = sc.span_ns()
    sources = schema.conform("sources", pl.DataFrame([{
        "rank": 0, "file": f"{name}.sqlite", "format": "nsys-sqlite",
        "tool_version": sq.NSYS_VERSION, "format_version": sq.EXPORT_SCHEMA,
        "rank_source": "default", "start_ns": start, "end_ns": end}]))
    kinds = gpu_df["kind"].cast(pl.String).value_counts()
    n = dict(zip(kinds["kind"].to_list(), kinds["count"].to_list(), strict=True))
    rows = []
    for kind, table in (("kernel", "KERNEL"), ("memcpy", "MEMCPY"), ("memset", "MEMSET")):
        if n.get(kind):
            rows += ingest_rows(0, "gpu", f"CUPTI_ACTIVITY_KIND_{table}", n[kind])
    n_sync = sum(1 for c in sc.calls if c.sync is not None)
    rows += ingest_rows(0, "api", "CUPTI_ACTIVITY_KIND_RUNTIME", len(api))
    if n_sync:  # each synchronization record gives its call its ids
        rows += ingest_rows(0, "api_ids", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", n_sync)
    if ranges:
        rows += ingest_rows(0, "ranges", "NVTX_EVENTS", len(ranges))
    rows += ingest_rows(0, "devices", "TARGET_INFO_GPU", 1)
    tl = Timeline(gpu=gpu_df,
                  api=schema.conform("api", pl.DataFrame(api, infer_schema_length=None))
                  .sort("start_ns", "correlation_id"),
                  ranges=ranges_df.sort("start_ns", "thread_id"), devices=devices,
                  sources=sources, ingest=ingest_frame(rows),
                  meta={"generator": "traceparse.samplegen", "scenario": name})
    return tl.validate()


def write_sqlite(name: str, path: str | os.PathLike[str]) -> Path:
    """Write scenario ``name`` as an nsys SQLite export at ``path``; return the path."""
    from traceparse.samplegen import sqlite as samplegen_sqlite

    return samplegen_sqlite.write(scenario(name), path)


def cache_dir() -> Path:
    """Per-user directory for generated samples: traceparse's cache directory
    (:func:`traceparse.cache.default_dir`), or a temp directory if it is not writable."""
    from traceparse.cache import default_dir

    d = default_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    d = Path(tempfile.gettempdir()) / f"traceparse-{os.getuid() if hasattr(os, 'getuid') else 0}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def default_sample() -> Path:
    """Path of the ``mini_train`` sample export, generated into :func:`cache_dir` if absent.

    The file name carries a content version so a stale cache is never reused.
    """
    path = cache_dir() / f"mini_train-{SAMPLE_VERSION}.sqlite"
    if not path.is_file():
        write_sqlite("mini_train", path)
    return path


#: Bump when any scenario's content changes (cache key of :func:`default_sample`).
SAMPLE_VERSION = "1"
