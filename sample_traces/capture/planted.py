"""The planted causes of the known-cause scenarios (issue 19), and what traceparse must say.

This is the one place that maps a planted cause to the verdict and recommendation terms the
tests expect. ``scenarios.py`` writes :attr:`Expectation.cause` and the expectation itself
into each run's sidecar; ``tests/test_capture_scenarios*.py`` read this module (it imports
nothing but the standard library, so the tests load it without torch).

Every scenario runs twice: the ``bottleneck`` variant plants the cause, the ``twin`` variant
is the same work without it (``gemm_roofline`` has one ``sweep`` variant and no twin: it
feeds the roofline, not a verdict).

How an expectation is checked (``tests/test_capture_scenarios_gpu.py``):

* **verdict** (the one-line verdict of ``traceparse summary``, ``summarize(tl)["verdict"]``):
  the bottleneck's verdict matches :attr:`Expectation.verdict_re`; the twin's does not.
  Where the verdict has no word for the cause (``unfused_elementwise``: fusion is not an
  attribution part), ``verdict_re`` is None and only the recommendation is checked.
* **dominant part** (stable key): the attribution part (``traceparse.analyses.attribution``
  ``PARTS``) with the most time, over all devices, is :attr:`Expectation.verdict_part` in the
  bottleneck and is not in the twin. None where the cause is not an attribution part.
* **gap cause** (stable key): among the bottleneck's idle gaps, the cause with the most time
  (``traceparse.analyses.gaps`` ``cause``) is :attr:`Expectation.gap_cause`, and when
  :attr:`Expectation.gap_cause_name` is set, the largest gap of that cause is explained by a
  host range of that name (the runner's own ``record_function`` label). Checked on the
  torch.profiler trace only: in the nsys capture each step is an NVTX range ``step N``,
  which overlaps the gap slightly more than the label inside it and so is the range the
  gap analysis names (it picks the largest overlap; only ``ProfilerStep#N`` ranges are
  excluded).
* **top recommendation** (report ``recommendations.items[0]``): its ``id`` is in
  :attr:`Expectation.rec_ids`, or its title and evidence match :attr:`Expectation.rec_re`;
  in the twin, no recommendation with an id in ``rec_ids`` is ranked first.
* **first step an outlier** (``warmup`` only): ``traceparse.analyses.steps`` flags the first
  profiled step of the bottleneck as an outlier and none of the twin's.

Assumption about wording (written while other engineers were changing it): today the verdict
labels are ``compute-bound``, ``launch-bound``, ``memory-copy-bound``, ``idle-bound`` (with
``; largest gaps mostly <cause>``) and the report's own ``host-bound`` /
``memory-transfer-bound``; the recommendation ids are ``cuda-graphs``, ``fusion``,
``pinned-memory``, ``overlap-copies``, ``input-pipeline``, ``tensor-cores``. Host blocking
is expected to become its own attribution part and warm-up to be named apart: the regular
expressions below accept both the present and those announced words (``host-block``,
``warm-up``), and the stable keys (attribution part, gap cause, step outlier) do not depend
on wording at all. When the wording changes, change it here and nowhere else.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: Variant names. ``sweep`` is the single run of a scenario without a twin.
BOTTLENECK, TWIN, SWEEP = "bottleneck", "twin", "sweep"


@dataclass(frozen=True)
class Expectation:
    """What traceparse must conclude from a scenario's bottleneck run (see module docstring).

    Attributes:
        cause: stable key of the planted cause (also the scenario name).
        planted: one sentence: what the bottleneck variant does on purpose.
        twin: one sentence: what the twin does instead (empty without a twin).
        verdict_part: attribution part that must dominate the bottleneck, or None.
        verdict_re: regular expression the bottleneck's summary verdict must match (and the
            twin's must not), or None.
        gap_cause: dominant idle-gap cause in the bottleneck, or None.
        gap_cause_name: host range that must explain the largest gap of ``gap_cause``.
        rec_ids: recommendation ids that name the cause.
        rec_re: regular expression over a recommendation's title and evidence that names
            the cause (used when the id is not in ``rec_ids``).
        first_step_outlier: the first profiled step must be a step outlier (warm-up).
        variants: the variants the runner produces.
    """

    cause: str
    planted: str
    twin: str
    verdict_part: str | None
    verdict_re: str | None
    gap_cause: str | None = None
    gap_cause_name: str | None = None
    rec_ids: tuple[str, ...] = ()
    rec_re: str | None = None
    first_step_outlier: bool = False
    variants: tuple[str, ...] = field(default=(BOTTLENECK, TWIN))

    def to_json(self) -> dict[str, Any]:
        """Plain dict for the sidecar (tuples as lists)."""
        d = asdict(self)
        d["rec_ids"] = list(self.rec_ids)
        d["variants"] = list(self.variants)
        return d


EXPECTATIONS: dict[str, Expectation] = {e.cause: e for e in (
    Expectation(
        cause="pageable_copy",
        planted="each step copies its result to the host with .cpu() into pageable memory "
                "(a synchronous device-to-host copy the GPU waits on)",
        twin="the same result is copied into a pinned buffer with non_blocking=True on a "
             "side stream, overlapping the next step's GEMM",
        verdict_part="memory_ns",
        verdict_re=r"memory-(copy|transfer)-bound|pageable",
        rec_ids=("pinned-memory", "overlap-copies"),
        rec_re=r"(?i)pageable|pin"),
    Expectation(
        cause="host_sync",
        planted="each iteration calls .item() on a device scalar and then "
                "torch.cuda.synchronize() before host bookkeeping, so the GPU drains and "
                "waits for the host",
        twin="the same iterations and bookkeeping without .item() or synchronize: the "
             "bookkeeping overlaps the GPU work (the GPU still idles about a third of the "
             "time, bookkeeping being 1.5x the GPU work, but with cause cpu_work, not "
             "host_sync; the verdict can only name host_sync where idle outweighs compute)",
        verdict_part="idle_ns",
        verdict_re=r"(?i)host_sync|host-block|synchroni",
        gap_cause="host_sync",
        rec_ids=("host-sync",),
        rec_re=None),
    Expectation(
        cause="launch_bound",
        planted="each step launches hundreds of tiny elementwise kernels one by one, each "
                "shorter than its own launch call",
        twin="the same kernels captured once in a CUDA graph (torch.cuda.graph) and "
             "replayed with one launch per step",
        verdict_part="launch_overhead_ns",
        verdict_re=r"launch-bound",
        gap_cause="issuing",
        rec_ids=("cuda-graphs",),
        rec_re=r"(?i)cuda graph"),
    Expectation(
        cause="unfused_elementwise",
        planted="each step runs a chain of elementwise ops in eager mode: one small "
                "memory-bound kernel per op, each writing and re-reading its intermediate",
        twin="the same chain compiled with torch.compile (Inductor fuses it into a few "
             "kernels); compiled before profiling",
        verdict_part=None,
        verdict_re=None,
        rec_ids=("fusion",),
        rec_re=r"(?i)fus"),
    Expectation(
        cause="gemm_roofline",
        planted="GEMMs at several sizes in fp32, tf32, bf16 and fp8 (when the GPU has it), "
                "each in its own labelled range, for the roofline and ncu",
        twin="",
        verdict_part="compute_ns",
        verdict_re=r"compute-bound",
        variants=(SWEEP,)),
    Expectation(
        cause="input_starved",
        planted="each step first prepares its batch on the CPU in the training thread "
                "(make_batch, about three GPU steps long), so the GPU waits for data",
        twin="the same batches prepared ahead by four prefetching worker threads",
        verdict_part="idle_ns",
        verdict_re=r"(?i)idle-bound|host-bound|input|data.?load",
        gap_cause="input_pipeline",
        gap_cause_name="make_batch",
        rec_ids=("input-pipeline",),
        rec_re=r"(?i)input|data.?load|prefetch"),
    Expectation(
        cause="warmup",
        planted="the first profiled step compiles the model (torch.compile, default mode, "
                "caches disabled) and runs cuDNN autotuning (cudnn.benchmark); later steps "
                "are steady state",
        twin="the same model compiled and autotuned before profiling starts: every profiled "
             "step is steady state",
        verdict_part=None,
        verdict_re=r"(?i)warm-?up|compil|idle-bound|host-bound",
        rec_ids=("warm-up",),
        rec_re=None,
        first_step_outlier=True),
)}

#: Scenario names in run order.
SCENARIOS: tuple[str, ...] = tuple(EXPECTATIONS)

#: Keys every sidecar has (tests check them; ``scenarios.py`` writes them).
SIDECAR_KEYS = ("tool", "schema", "scenario", "variant", "cause", "planted", "expected",
                "device", "diagnosable", "skipped", "sizes", "profiler", "files", "steps",
                "command", "captured_utc", "gpu", "software", "timings_ms")

#: Version of the sidecar layout.
SIDECAR_SCHEMA = 1


def run_name(scenario: str, variant: str) -> str:
    """File stem of one run, e.g. ``host_sync-twin``."""
    return f"{scenario}-{variant}"
