"""Library entry points behind ``traceparse report``: load the inputs, build the payload,
render the page.

Kept apart from :mod:`traceparse.reports.html` so the CLI calls one function and tests can build
reports from paths exactly as the command does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from traceparse import loader
from traceparse.cache import CacheArg
from traceparse.reports.html import render_html
from traceparse.reports.payload import ReportOptions, build_payload

#: Suffixes stripped (longest first) when naming the report after its input.
_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite3",
             ".sqlite", ".db", ".csv")


def default_output(traces: Sequence[str | os.PathLike[str]]) -> Path:
    """Default report file name: ``<input stem>.html`` for one input (in the current
    directory), ``report.html`` for none (the bundled sample) or several.

    Example:
        >>> str(default_output(["runs/step.pt.trace.json.gz"]))
        'step.html'
        >>> str(default_output([]))
        'report.html'
    """
    if len(traces) != 1:
        return Path("report.html")
    name = Path(traces[0]).name
    for suf in _SUFFIXES:
        if name.lower().endswith(suf):
            name = name[: -len(suf)]
            break
    return Path(f"{name or 'report'}.html")


def sample_trace() -> Path:
    """The bundled sample trace (a generated mini training step)."""
    from traceparse.samplegen.scenarios import default_sample

    return Path(default_sample())


def report_html(traces: Sequence[str | os.PathLike[str]], *,
                ncu: str | os.PathLike[str] | None = None,
                options: ReportOptions | None = None, cache: CacheArg = None) -> str:
    """Load ``traces`` (several = several ranks/files; none = the bundled sample), an
    optional Nsight Compute CSV, and return the HTML report text.

    ``cache`` is passed to :func:`traceparse.load` (None = parse every input).

    Raises:
        TraceError: an input is missing or malformed.
    """
    paths = list(traces) or [sample_trace()]
    timelines = [loader.load(p, cache=cache) for p in paths]
    ncu_tl = loader.load(ncu, cache=cache) if ncu is not None else None
    return render_html(build_payload(timelines, ncu=ncu_tl, options=options))
