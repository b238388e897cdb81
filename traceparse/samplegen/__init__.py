"""Generated sample traces with known ground truth (the bundled ``sample_traces/``, tests).

Not a profiler format: deterministic scenarios written as real formats, with the exact
in-memory timeline beside them (``traceparse.samplegen.scenario_timeline(name)``).

Modules:
    scenarios  the scenarios as plain data, their ground-truth timelines, the default sample.
    sqlite     a scenario written as an Nsight Systems SQLite export (2024.2 DDL).
    ncu        the Nsight Compute raw CSV page of a scenario's kernels.
    llm        small vLLM/SGLang-style Kineto traces with a known phase and layer structure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traceparse.lazy import lazy_exports

if TYPE_CHECKING:
    from traceparse.samplegen.scenarios import default_sample, scenario_timeline

__all__ = ["default_sample", "scenario_timeline"]

__getattr__ = lazy_exports(__name__, "scenarios", __all__)
