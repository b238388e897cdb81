"""The report payload: every number the HTML report shows, gathered from the analyses.

Reports share one contract: **payload -> template -> file**. :func:`build_payload` calls
the analysis functions (never re-implementing them), turns their frames into plain JSON-able
rows, and returns one dict with sorted keys. The renderer (:mod:`traceparse.reports.html`) draws
only
from this dict, so the payload is also what ``--format json`` style consumers and tests read,
and the same timeline always gives the same payload (rows are sorted; no clock, host or
path enters it: input files appear by base name only).

Numbers shared with ``traceparse summary`` come from the same function
(:func:`traceparse.analyses.summary.summarize`) and are copied, not recomputed, so the two can never
disagree.

Sections whose analysis is not part of this build are left out of the payload (the report
then simply has no such section); sections whose analysis finds nothing to say (no NCCL
kernels, no steps) are present with an empty ``rows`` list and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from traceparse import __version__, schema, units
from traceparse.derived import cached
from traceparse.reports.options import ReportOptions, clean, rows
from traceparse.timeline import Timeline, concat

PAYLOAD_VERSION = "1"

__all__ = ["PAYLOAD_VERSION", "ReportOptions", "build_payload", "clean", "combine", "rows"]


def combine(timelines: Sequence[Timeline]) -> Timeline:
    """One timeline from several inputs (one per rank or file).

    If two inputs claim the same rank (e.g. two single-process nsys files, both rank 0),
    ranks are reassigned by input order (0, 1, ...) and ``sources.rank_source`` says
    ``file order``.
    """
    tls = list(timelines)
    if len(tls) <= 1:
        return tls[0] if tls else Timeline()
    claimed = [set(t.sources["rank"].to_list()) or set(t.gpu["rank"].unique().to_list())
               for t in tls]
    if all(len(c) == 1 for c in claimed) and len(set().union(*claimed)) == len(tls):
        return concat(tls)
    fixed = []
    for i, t in enumerate(tls):
        tables = {name: frame.with_columns(pl.lit(i, dtype=pl.Int32).alias("rank"))
                  for name, frame in t.tables().items()}
        tables["sources"] = tables["sources"].with_columns(
            pl.lit("file order").cast(pl.Categorical).alias("rank_source"))
        fixed.append(Timeline(**tables, meta=t.meta))
    return concat(fixed)


def provenance_section(tl: Timeline) -> dict[str, Any]:
    """The payload's ``provenance``: the sources, the rows parsed per rank and table, the
    rows skipped per reason, and the schema and traceparse versions."""
    ing = tl.ingest
    skipped = ing.filter(pl.col("outcome") == "skipped").sort("rank", "table", "source",
                                                             "reason")
    parsed = (ing.filter(pl.col("outcome") == "parsed")
              .group_by("rank", "table").agg(pl.col("count").sum()).sort("rank", "table"))
    return {
        "sources": rows(tl.sources.sort("rank", "file")),
        "parsed": rows(parsed),
        "skipped": rows(skipped.select("rank", "table", "source", "reason", "count")),
        "schema_version": schema.SCHEMA_VERSION,
        "traceparse_version": __version__,
    }


def _devices(tl: Timeline) -> list[dict[str, Any]]:
    busy = (tl.gpu.group_by("rank", "device_id")
            .agg(pl.len().alias("activities"), pl.col("dur_ns").sum().alias("busy_ns")))
    return devices_rows(tl.devices, busy)


def devices_rows(devices: pl.DataFrame, busy: pl.DataFrame) -> list[dict[str, Any]]:
    """The ``devices`` section: each device with its GPU ``activities`` and ``busy_ns``
    (``busy``, per ``rank, device_id``); columns null for every device left out."""
    d = devices.sort("rank", "device_id")
    d = d.join(busy, on=["rank", "device_id"], how="full", coalesce=True) \
        .sort("rank", "device_id")
    return rows(d.select([c for c in d.columns if d[c].null_count() < d.height]))


_KERN_COLS = {"Time (%)": "pct", "Total Time (ns)": "total_ns", "Instances": "instances",
              "Avg (ns)": "avg_ns", "Med (ns)": "med_ns", "Min (ns)": "min_ns",
              "Max (ns)": "max_ns", "StdDev (ns)": "std_ns", "Name": "name"}


def _kernels(tl: Timeline, top_n: int) -> dict[str, Any]:
    """Top kernels by total time (``nsys stats`` cuda_gpu_kern_sum numbers) plus "other"."""
    from traceparse.analyses.nsys_stats import kern_sum

    cats = (tl.kernels.group_by(pl.col("name").cast(pl.String))
            .agg(pl.col("category").cast(pl.String).mode().sort().first()))
    return kernels_section(kern_sum(tl), cats, top_n)


def kernels_section(kern: pl.DataFrame, cats: pl.DataFrame, top_n: int) -> dict[str, Any]:
    """The ``kernels`` section from ``nsys stats`` kern_sum's frame ``kern`` and each
    name's most common ``category`` (``cats``)."""
    frame = kern.rename(_KERN_COLS)
    frame = frame.join(cats.rename({"category": "category"}), on="name", how="left")
    frame = frame.sort(["total_ns", "instances", "name"], descending=[True, True, False])
    top, rest = frame.head(top_n), frame.slice(top_n)
    other = None
    if rest.height:
        other = {"names": rest.height, "instances": int(rest["instances"].sum()),
                 "total_ns": int(rest["total_ns"].sum()),
                 "pct": float(rest["pct"].sum())}
    return {"rows": rows(top), "other": other, "names": frame.height,
            "instances": int(frame["instances"].sum()) if frame.height else 0,
            "total_ns": int(frame["total_ns"].sum()) if frame.height else 0}


def default_title(files: list[str]) -> str:
    """Report title from the input names (the first and last of many)."""
    if not files:
        return "traceparse report"
    if len(files) <= 2:
        return "traceparse report: " + ", ".join(files)
    return f"traceparse report: {len(files)} inputs ({files[0]} ... {files[-1]})"


def build_payload(timelines: Timeline | Sequence[Timeline], *, ncu: Timeline | None = None,
                  options: ReportOptions | None = None) -> dict[str, Any]:
    """Gather every number the report shows.

    Args:
        timelines: one timeline or several (one per rank or input file; see
            :func:`combine`).
        ncu: an Nsight Compute timeline (its ``ncu`` table) for the roofline section.
        options: :class:`ReportOptions`.

    Returns:
        A dict with sorted keys: ``version``, ``title``, ``inputs``, ``provenance``,
        ``devices``, ``timeline`` always; ``summary``, ``recommendations``,
        ``attribution``, ``kernels``, ``gaps``, ``launches``, ``comm``, ``steps``,
        ``roofline`` when this build has the analysis behind them.
    """
    opts = options or ReportOptions()
    tl = combine([timelines] if isinstance(timelines, Timeline) else list(timelines))
    if ncu is None:  # one payload per timeline and options (kept beside a cached timeline)
        return cached(tl, f"report_payload:{opts!r}", tuple(schema.TABLES),
                      lambda: _payload(tl, opts))
    if ncu.ncu.height:
        tables: dict[str, Any] = tl.tables()
        for name in ("ncu", "sources", "ingest"):
            tables[name] = pl.concat([tables[name], ncu.table(name)])
        tl = Timeline(**tables, meta=tl.meta)
    return _payload(tl, opts)


def _payload(tl: Timeline, opts: ReportOptions) -> dict[str, Any]:
    from traceparse.reports import sections
    from traceparse.reports.lanes import timeline_lanes  # numpy: only reports need it

    files = sorted(set(tl.sources["file"].to_list()))
    out: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "title": opts.title or default_title(files),
        "inputs": files,
        "provenance": provenance_section(tl),
        "devices": _devices(tl),
        "timeline": timeline_lanes(tl.gpu, budget=opts.timeline_budget,
                                   bins=opts.timeline_bins, max_lanes=opts.max_lanes),
    }
    out["kernels"] = _kernels(tl, opts.top_n)
    out.update(sections.analysis_sections(tl, opts))
    return finish(out, lambda withheld: _low_end(tl, withheld))


def finish(out: dict[str, Any], low_end: Callable[[list[dict[str, Any]]], None]
           ) -> dict[str, Any]:
    """The payload ``out`` (every section but the recommendations) with its
    recommendations and their notes, cleaned for JSON; ``low_end`` adds the low-end
    figures to the fixes withheld as the profiler's own cost (:func:`_low_end`)."""
    from traceparse.reports.recommend import recommend

    out["recommendations"] = recommend(out)
    low_end(out["recommendations"]["profiler_only"])
    if not out["recommendations"]["items"]:
        out["recommendations"]["why"] = no_fix_reason(out)
    elif out["recommendations"]["profiler_only"]:
        from traceparse.reports.recommend import profiler_only_note

        note = profiler_only_note(out["recommendations"]["profiler_only"])
        out["recommendations"]["profiler_only_note"] = note[:1].upper() + note[1:]
    result: dict[str, Any] = clean(out)
    return result


def _low_end(tl: Timeline, rows: list[dict[str, Any]]) -> None:
    """Each withheld fix's profiler-free saving at the low end of the profiler's per-op
    estimate (the least recording removed): ``saving_low_ns`` / ``window_low_ns``
    (:func:`traceparse.analyses.savings.unprofiled_at`), so its note says where the
    estimate's band would still offer it."""
    if not rows:
        return
    from traceparse.analyses.profiler_cost import step_priced
    from traceparse.analyses.savings import unprofiled_at
    from traceparse.reports.recommend import ENGINE_CHANGE

    pc = step_priced(tl)
    if not pc["overhead_ns"] or pc["overhead_low_ns"] is None:
        return
    keys = [(ENGINE_CHANGE[r["id"]], r["rank"]) for r in rows]
    low = unprofiled_at(tl, keys, pc["overhead_low_ns"] / pc["overhead_ns"])
    for r, k in zip(rows, keys, strict=True):
        if k in low:
            r["saving_low_ns"], r["window_low_ns"] = low[k]


def no_fix_reason(payload: dict[str, Any]) -> str:
    """The one line ``fixes`` prints, and the report shows, when no fix is offered."""
    attr = payload.get("attribution")
    if not attr or not attr["totals"]["window_ns"]:
        page = (payload.get("summary") or {}).get("ncu_page")
        if not page:
            return "no fix: the trace has no GPU window to improve"
        if not page.get("kernel_time_ns"):
            return ("no fix: this Nsight Compute page has no kernel durations, so no saving "
                    "can be priced (the raw and details pages carry gpu__time_duration)")
        why = ("no fix: on an Nsight Compute page only the tensor-core rule applies (the "
               "other fixes need a timeline: an nsys export or a Kineto trace)")
        if not page.get("placed"):
            return why + ", and no kernel of this page is on the roofline (see its notes)"
        return why + ", and no GEMM or convolution is far enough under its roof"
    from traceparse.reports.recommend import graphs_word, profiler_only_note

    why = (f"no fix: no mechanism ({graphs_word(payload)}, fusion, pinned memory, host sync, "
           "input pipeline, warm-up, communication overlap, copies, tensor cores) would save "
           "enough of the window to be worth it")
    rows = payload.get("recommendations", {}).get("profiler_only")
    if rows:
        why += "; " + profiler_only_note(rows)
    unrecorded = int(payload.get("gaps", {}).get("stream_wait_unrecorded_ns", 0))
    if unrecorded:
        why += (f"; {units.duration(unrecorded)} of stream waits are on events whose producer "
                "is not in this trace (the GPU most likely ran it then): capture it too")
    return why
