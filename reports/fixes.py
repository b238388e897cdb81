"""The ranked fixes of a trace (``traceparse fixes``; the report's "What to fix first").

One list, from :func:`traceparse.reports.recommend.recommend` over the report's payload:
every saving is the savings engine's (:mod:`traceparse.analyses.savings`), so ``fixes``,
the report, ``summary`` and ``whatif --fix`` quote the same number. On a torch.profiler
trace ``saving_unprofiled_ns`` / ``window_unprofiled_ns`` are the same replay with the
profiler's own cost removed (null elsewhere, and for fixes the engine does not replay).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse.timeline import Timeline

#: The fields of one fix, in order.
FIELDS = ("rank", "id", "title", "saving_ns", "window_ns", "saving_unprofiled_ns",
          "window_unprofiled_ns", "evidence", "how")


def fixes_list(tl: Timeline) -> tuple[list[dict[str, Any]], str]:
    """``(fixes, why)``: the ranked fixes (:data:`FIELDS`) and, when there is none, the
    one line saying why (the payload's, which the report shows too); with fixes, the line
    naming those withheld because they save enough only under the profiler, else ""."""
    from traceparse.reports.payload import build_payload

    return fixes_of(build_payload(tl))


def fixes_of(payload: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """:func:`fixes_list` from a report payload (the memory path's or, for one nsys
    export, :func:`traceparse.payload_chunks.payload`'s)."""
    rec = payload["recommendations"]
    out = [{k: r[k] for k in FIELDS} for r in rec["items"]]
    return (out, str(rec.get("profiler_only_note", ""))) if out else ([], str(rec["why"]))


def fixes_frame(items: list[dict[str, Any]]) -> pl.DataFrame:
    """The fixes as a table (evidence joined with `` | ``)."""
    schema = {"rank": pl.Int64, "id": pl.String, "title": pl.String, "saving_ns": pl.Int64,
              "window_ns": pl.Int64, "saving_unprofiled_ns": pl.Int64,
              "window_unprofiled_ns": pl.Int64, "evidence": pl.String, "how": pl.String}
    rows = [{**{k: r[k] for k in FIELDS}, "evidence": " | ".join(r["evidence"])}
            for r in items]
    return pl.DataFrame(rows, schema=schema)
