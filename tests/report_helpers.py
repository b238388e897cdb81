"""Small hand-built timelines for the report tests (numbers are easy to work out by hand)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema
from traceparse.timeline import Timeline


def gpu_rows(specs: list[tuple[Any, ...]], *, rank: int = 0, device: int = 0,
             process_id: int = 100) -> list[dict[str, Any]]:
    """``(name, category, start_ns, end_ns, stream[, kind[, correlation_id]])`` -> gpu rows."""
    out = []
    for spec in specs:
        name, cat, start, end, stream = spec[:5]
        kind = spec[5] if len(spec) > 5 else "kernel"
        corr = spec[6] if len(spec) > 6 else None
        out.append({"rank": rank, "kind": kind, "category": cat, "start_ns": start,
                    "end_ns": end, "dur_ns": end - start, "device_id": device,
                    "stream_id": stream, "name": name, "process_id": process_id,
                    "correlation_id": corr})
    return out


def timeline(gpu: list[dict[str, Any]], api: list[dict[str, Any]] | None = None,
             file: str = "synthetic.sqlite", rank: int = 0) -> Timeline:
    """A validated timeline from gpu rows (and optional api rows)."""
    g = schema.conform("gpu", pl.DataFrame(gpu, infer_schema_length=None))
    a = (schema.conform("api", pl.DataFrame(api, infer_schema_length=None)) if api
         else schema.empty("api"))
    src = schema.conform("sources", pl.DataFrame({"rank": [rank], "file": [file],
                                                  "format": ["nsys-sqlite"]}))
    ing = schema.conform("ingest", pl.DataFrame({
        "rank": [rank, rank], "table": ["gpu", "gpu"], "source": ["KERNEL", "KERNEL"],
        "outcome": ["parsed", "skipped"], "reason": [None, "zero duration"],
        "count": [g.height, 2]}))
    return Timeline(gpu=g, api=a, sources=src, ingest=ing).validate()
