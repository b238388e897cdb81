"""The report payload of one nsys export on a chunked executor, every section but the
``timeline`` lanes (``fixes --executor chunks|dask``; docs/performance.md, "Chunked
fixes"): :func:`traceparse.reports.payload.build_payload`'s dict, section for section.

It follows :mod:`traceparse.summary_chunks`: one plan, the same two passes over time
windows of about ``chunk_rows`` GPU activities, and the summary composed from them
(:func:`traceparse.summary_chunks.compose`). Pass 1 reads each window once
(:func:`traceparse.summary_chunks.read1`) and folds, beside the summary's partials, the
report's own (:class:`PayloadPart`, from the GPU rows that **start** in the window, so each
counts once): the kernel duration histogram (``nsys stats`` kern_sum, exact:
:func:`traceparse.analyses.chunked.kernel_histogram`), each kernel name's count per
category, per device its activities and busy time, per process and device the first start
and last end (the ``sources`` rows and device ranks, through the reader's own
:func:`traceparse.nsys.procs.split_ranks`), rows per kind (the ingest counts of the GPU
tables), the fusion and pinned-memory evidence (sums per name and rank, per rank and host
memory kind) and the launch latencies (call entry to kernel start) as distinct values
with counts. Partials merge by sums, minima and maxima: every merge is exact.

Sections by how they are computed:

* **from the passes**: ``summary``, ``attribution`` (the breakdown), ``gaps`` (the whole
  gap list), ``launches`` (pass 1's launch partials and latency histogram), ``kernels``,
  ``devices``, ``evidence`` (tiny memory-bound kernels, pageable copies, under-filled
  launches: :mod:`traceparse.underfilled_chunks`, pass 1 reading the kernels' grids where
  a device has an SM count), ``op_tree``;
* **whole-file facts**: ``provenance`` and ``unread_tables`` (the reader's accounting of
  an export whose time-stamped tables are read as empty, the parsed rows of each such
  table counted: GPU tables from pass 1, the others by SQL where every row has ordered
  times, the stream and event ids by the reader's own join on the calls they name),
  ``evidence.hip`` (no runtime call named ``hip*``), ``title`` and ``inputs``;
* **proven empty**, computed by their own functions on the summary's stub timeline:
  ``comm`` (without collective kernels; with them read in pieces,
  :func:`traceparse.comm_chunks.payload_section`), ``steps``, ``roofline``, ``phases``,
  ``layers``, ``gpu_metrics``, ``memory``, ``graphs``.

Anything else raises :class:`~traceparse.summary_chunks.SectionNotInPieces` (``NotInPieces``
here) naming the section (the summary's own refusals, then ``provenance``: rows the
reader skips; ``recommendations``: a fix withheld as the profiler's own cost). The
``gaps`` section's ``sync_ops`` come from pass 2's windows
(:func:`traceparse.summary_chunks.sync_by_op`), the underfilled launches of ``evidence``
from pass 1 (:mod:`traceparse.underfilled_chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import polars as pl

from traceparse import executor as ex
from traceparse import summary_chunks as sc
from traceparse import underfilled_chunks as uc
from traceparse.analyses import chunked
from traceparse.analyses import chunked_ranges as cr
from traceparse.analyses.chunked_ranges import RangeTree
from traceparse.analyses.launches import in_graph
from traceparse.nsys import chunks
from traceparse.ranges_chunks import Ranged, ranged_of, without_nvtx
from traceparse.reports import lanes_parts as lane_counts
from traceparse.reports.options import ReportOptions
from traceparse.summary_chunks import SectionNotInPieces as NotInPieces
from traceparse.timeline import Timeline

if TYPE_CHECKING:
    from traceparse.payload_facts import Facts

__all__ = ["NotInPieces", "PayloadPart", "payload", "report_payload"]

class PayloadPart(NamedTuple):
    """The report's partial of the GPU rows starting in one or more time windows (module
    docstring)."""

    hist: pl.DataFrame
    cats: pl.DataFrame
    busy: pl.DataFrame
    procs: pl.DataFrame
    kinds: pl.DataFrame
    tiny: pl.DataFrame
    copies: pl.DataFrame
    lat: pl.DataFrame
    linked: int
    under: uc.UnderPart
    #: the overview lanes' counts (:func:`traceparse.reports.lanes_parts.lane_counts`),
    #: folded only for the report (:func:`report_payload`), else None
    lanes: pl.DataFrame | None = None


def payload_part(rows: pl.DataFrame, launches: pl.DataFrame, t0: int, t1: int,
                 bound: int | None = None) -> PayloadPart:
    """The partial of the rows of ``rows`` that start in ``[t0, t1)`` and of the window's
    launched kernels ``launches`` (:func:`traceparse.launch_chunks.join_launches`);
    ``bound``: the largest SM count (:func:`traceparse.underfilled_chunks.sm_bound`)."""
    from traceparse.reports.sections import MEMORY_BOUND_RE, TINY_KERNEL_NS

    own = rows.filter((pl.col("start_ns") >= t0) & (pl.col("start_ns") < t1))
    kind, name = pl.col("kind"), pl.col("name").cast(pl.String)
    k = own.filter(kind == "kernel")
    tiny = own.select("kind", "category", "rank", "name", "dur_ns").filter(
        (kind == "kernel") & (pl.col("category") == "compute")
        & (pl.col("dur_ns") < TINY_KERNEL_NS))
    names = tiny.select(name.unique())["name"]
    tiny = tiny.filter(name.is_in(names.filter(names.str.contains(MEMORY_BOUND_RE))
                                  .implode()))
    m = own.filter((kind.cast(pl.String) == "memcpy")
                   & pl.col("copy_kind").cast(pl.String).is_in(["HtoD", "DtoH"]))
    host = pl.when(pl.col("copy_kind").cast(pl.String) == "HtoD") \
        .then(pl.col("src_kind").cast(pl.String)).otherwise(pl.col("dst_kind").cast(pl.String))
    mine = launches.filter(~in_graph(launches))
    return PayloadPart(
        chunked.kernel_histogram(own),
        k.group_by(name, pl.col("category").cast(pl.String)).agg(
            pl.len().cast(pl.Int64).alias("n")),
        own.group_by("rank", "device_id").agg(pl.len().cast(pl.Int64).alias("activities"),
                                              pl.col("dur_ns").sum().alias("busy_ns")),
        own.group_by("process_id", "device_id").agg(pl.col("start_ns").min(),
                                                     pl.col("end_ns").max()),
        own.group_by(kind.cast(pl.String)).agg(pl.len().cast(pl.Int64).alias("n")),
        tiny.group_by(name, "rank").agg(pl.len().cast(pl.Int64).alias("count"),
                                        pl.col("dur_ns").sum().alias("total_ns")),
        m.with_columns(host.alias("host"), (pl.col("dur_ns") > 0).alias("positive"))
        .group_by("rank", "host", "positive")
        .agg(pl.len().cast(pl.Int64).alias("count"),
             pl.col("bytes").sum().cast(pl.Int64).alias("bytes"),
             pl.col("dur_ns").sum().alias("total_ns")),
        mine.select((pl.col("start_ns") - pl.col("api_start_ns")).alias("value"))
        .group_by("value").agg(pl.len().cast(pl.Int64).alias("n")),
        launches.height, uc.under_part(rows, t0, t1, bound))


def merge_payload_parts(parts: Sequence[PayloadPart]) -> PayloadPart:
    """The partial of several windows' rows (in any order)."""
    def cat(i: int) -> pl.DataFrame:
        frames: list[pl.DataFrame] = [p[i] for p in parts]  # type: ignore[misc]
        return pl.concat(frames, how="vertical_relaxed")

    return PayloadPart(
        chunked.merge_histograms([p.hist for p in parts]),
        cat(1).group_by("name", "category").agg(pl.col("n").sum()),
        cat(2).group_by("rank", "device_id").agg(pl.col("activities", "busy_ns").sum()),
        cat(3).group_by("process_id", "device_id").agg(pl.col("start_ns").min(),
                                                      pl.col("end_ns").max()),
        cat(4).group_by("kind").agg(pl.col("n").sum()),
        cat(5).group_by("name", "rank").agg(pl.col("count", "total_ns").sum()),
        cat(6).group_by("rank", "host", "positive").agg(
            pl.col("count", "bytes", "total_ns").sum()),
        cat(7).group_by("value").agg(pl.col("n").sum()),
        sum(p.linked for p in parts), uc.merge_under_parts([p.under for p in parts]),
        None if any(p.lanes is None for p in parts)
        else lane_counts.merge_counts([p.lanes for p in parts if p.lanes is not None]))


Part = tuple[sc.Part1, PayloadPart]


def pass1_task(plan: chunks.Plan, window: tuple[int, int], min_ns: int,
               bound: int | None = None, ranges: RangeTree | None = None,
               lanes: bool = False) -> Part:
    """The summary's and the report's pass-1 partials of one time window, from one read
    (runs on a worker; the kernels' grids read only where a device has an SM count;
    ``ranges``: as :func:`traceparse.summary_chunks.pass1_task`'s; ``lanes``: the
    overview lanes' counts too, for the report's ``timeline``)."""
    rows, api, launches = sc.read1(plan, window, grid=bound is not None)
    mine = payload_part(rows, launches, *window, bound)
    if lanes:
        mine = mine._replace(lanes=lane_counts.lane_counts(rows, *window))
    return sc.fold1(plan, rows, api, launches, window, min_ns, ranges), mine


def merge_pass1(parts: Sequence[Part], min_ns: int) -> Part:
    """Pass-1 partials of consecutive windows merged (in time order)."""
    return (sc.merge_pass1([p[0] for p in parts], min_ns),
            merge_payload_parts([p[1] for p in parts]))


def payload(path: str, *, options: ReportOptions | None = None,
            chunk_rows: int = ex.CHUNK_ROWS, executor: str = "chunks", workers: int = 4,
            scheduler: str | None = None) -> dict[str, Any] | None:
    """:func:`traceparse.reports.payload.build_payload` of one nsys export without its
    ``timeline`` lanes, computed in pieces; None when no device has busy GPU activity
    (the memory path words that trace).

    Raises:
        NotInPieces: a section cannot be computed exactly in pieces (the first found,
            cheapest checks first).
    """
    return _payload(path, options or ReportOptions(), chunk_rows, executor, workers,
                    scheduler)[0]


def _payload(path: str, opts: ReportOptions, chunk_rows: int, executor: str, workers: int,
             scheduler: str | None, lanes: bool = False
             ) -> tuple[dict[str, Any] | None, pl.DataFrame | None]:
    """:func:`payload`, and with ``lanes`` the overview lanes' merged counts of pass 1
    (:func:`traceparse.reports.lanes_parts.lane_counts`; None without)."""
    from functools import partial

    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    wins = plan.windows(chunk_rows)
    if not wins:
        return None, None
    if (why := sc.whole_file_facts(plan)) is not None:
        raise why
    ranged = ranged_of(plan)
    bound = uc.sm_bound(path)
    first, mine = ex.map_reduce(executor, plan, pass1_task, wins,
                                (opts.gap_min_ns, bound, ranged.tree if ranged else None,
                                 lanes),
                                partial(merge_pass1, min_ns=opts.gap_min_ns), workers, scheduler)
    if (why := sc.pass1_facts(first[3])) is not None:
        raise why
    from traceparse.payload_facts import file_facts

    facts = file_facts(plan, mine.kinds, mine.procs, mine.under)
    reuse = sc.Reuse.of(plan, first, wins if executor == "chunks" else None)
    got = sc.pass2(plan, wins, opts.gap_min_ns, first, executor, workers, scheduler,
                   replays=reuse.run)
    if got is None:
        return None, None
    summary = sc.compose(path, chunk_rows, opts.top_n, *got, reuse=reuse, ranged=ranged)
    return _compose(opts, summary, got, mine, facts, (path, chunk_rows), ranged), mine.lanes


def report_payload(path: str, *, options: ReportOptions | None = None,
                   chunk_rows: int = ex.CHUNK_ROWS, executor: str = "chunks", workers: int = 4,
                   scheduler: str | None = None) -> dict[str, Any] | None:
    """The whole report payload of one nsys export in pieces (``report --executor
    chunks|dask``): :func:`payload`, its pass 1 folding the overview lanes' counts too,
    then the drawn lanes' segments in pieces (:func:`traceparse.lanes_chunks.
    timeline_lanes` given those counts: one more read of the GPU rows, only once every
    other section is known to be exact); None when no device has busy GPU activity.

    Raises:
        NotInPieces: as :func:`payload`.
    """
    from traceparse.lanes_chunks import timeline_lanes
    from traceparse.reports.options import clean

    opts = options or ReportOptions()
    got, counts = _payload(path, opts, chunk_rows, executor, workers, scheduler,
                           lanes=True)
    if got is None:
        return None
    lanes = timeline_lanes(path, budget=opts.timeline_budget, bins=opts.timeline_bins,
                           max_lanes=opts.max_lanes, executor=executor,
                           chunk_rows=chunk_rows, workers=workers, scheduler=scheduler,
                           counts=counts)
    out: dict[str, Any] = clean({**got, "timeline": lanes})
    return out


def _compose(opts: ReportOptions, summary: dict[str, Any], got: sc.Pieces,
             mine: PayloadPart, facts: Facts, source: tuple[str, int],
             ranged: Ranged | None = None) -> dict[str, Any]:
    """The payload from the composed summary, both passes' results and the whole-file
    facts (module docstring); ``source``: the export and its rows per piece (for the
    collectives' pass); ``ranged``: the NVTX ranges read whole
    (:mod:`traceparse.ranges_chunks`: the icicle from the kernels' owner sums, the steps
    none, so the stub keeps no NVTX row)."""
    from traceparse.analyses import optree
    from traceparse.analyses.savings import best
    from traceparse.payload_facts import with_span
    from traceparse.reports import payload as pm
    from traceparse.reports import sections
    from traceparse.reports.hw_sections import hardware_sections
    from traceparse.reports.llm_sections import ICICLE_DEPTH, sections_of
    from traceparse.reports.options import rows
    from traceparse.reports.rec_base import unprofiled_clause

    bd, every, _, part, spans = got
    secs = summary["sections"]
    stub = sc.stub(part, pl.concat([s.ranges for s in spans], how="vertical_relaxed"))
    by_rank = optree.splits_by_rank(stub)
    if ranged is not None:  # the whole ranges gave no step (summary_chunks.ranged_sections)
        stub = without_nvtx(stub)
    w = secs["window"].row(0, named=True)
    stub = Timeline(gpu=stub.gpu, ranges=stub.ranges, devices=facts.devices,
                    sources=with_span(facts.sources, (w["start_ns"], w["end_ns"])),
                    ingest=facts.ingest)
    files = sorted(set(stub.sources["file"].to_list()))
    out: dict[str, Any] = {
        "version": pm.PAYLOAD_VERSION, "title": opts.title or pm.default_title(files),
        "inputs": files, "provenance": pm.provenance_section(stub),
        "devices": pm.devices_rows(facts.devices, mine.busy),
        "kernels": pm.kernels_section(_kern_sum(mine), _modes(mine), opts.top_n),
        "evidence": {"tiny_memory_kernels": _tiny(mine),
                     "pageable_copies": _pageable(mine),
                     "underfilled_launches": facts.underfilled, "hip": facts.hip}}
    sv = secs["savings"]
    out["summary"] = {"verdict": summary["verdict"],
                      "untraced_gpu_work": summary["untraced_gpu_work"],
                      "window": rows(secs["window"])[0], "top_kernels": rows(secs["top_kernels"]),
                      "savings": rows(sv), "stragglers": rows(secs["stragglers"])}
    out["attribution"] = sections.attribution_section(bd)
    top = best(sv, "no_launch_overhead")
    lat = mine.lat.sort("value")
    out["launches"] = sections.launches_section(
        stub, secs["launches"], mine.linked, int(lat["n"].sum()),
        sections.latency_histogram(lat["value"].to_numpy(), lat["n"].to_numpy()),
        unprofiled_clause(top) if top else "")
    out["comm"] = (_comm(*source, stub, spans, ranged) if secs["communication"].height
                   else sections.comm_section(stub))
    out["steps"] = sections.steps_section(stub)
    out["gaps"] = sections.gaps_section(stub, opts, every, sc.sync_by_op(spans))
    roof = sections.roofline_section(stub, opts.top_n)
    if roof is not None:
        out["roofline"] = roof
    def icicle(view: str, ranked: bool) -> pl.DataFrame:
        if ranged is not None and part.owners is not None:
            return cr.tree(ranged.tree, part.owners, max_depth=ICICLE_DEPTH)
        return optree.unranged_tree(part.tree, max_depth=ICICLE_DEPTH, by_rank=by_rank)

    out.update(sections_of(stub, secs, icicle))
    out.update(hardware_sections(stub, opts))

    def low_end(withheld: list[dict[str, Any]]) -> None:
        if withheld:
            raise NotInPieces("recommendations", "a fix is withheld as the profiler's own "
                                                 "cost (its low-end figure is not read in "
                                                 "pieces)")

    return pm.finish(out, low_end)


def _comm(path: str, chunk_rows: int, stub: Timeline, spans: list[sc.SpanPart],
          ranged: Ranged | None) -> dict[str, Any]:
    """The ``comm`` section of an export with collective kernels, read in pieces
    (:func:`traceparse.comm_chunks.payload_section`: one more pass over the windows; the
    NVTX ranges read whole name collectives), the first GPU start from the stub (the
    first row of each rank and kind)."""
    from traceparse import comm_chunks
    from traceparse.nsys.spans import span_plan

    plan = span_plan(path, block_rows=chunk_rows)
    kinds = frozenset[str]().union(*(s.range_kinds for s in spans))
    try:
        return comm_chunks.payload_section(plan, plan.windows(chunk_rows),
                                           stub.gpu["start_ns"].min(), kinds,
                                           None if ranged is None else ranged.tl.ranges)
    except comm_chunks.OpNamed as exc:
        raise NotInPieces("comm", str(exc)) from None


def _kern_sum(mine: PayloadPart) -> pl.DataFrame:
    """``nsys stats`` kern_sum from the merged histogram (an empty frame of its columns
    without kernels)."""
    from traceparse.analyses.nsys_stats import kern_sum

    if mine.hist.height == 0:
        return kern_sum(Timeline())
    return chunked.kern_sum_from_histogram(mine.hist)


def _modes(mine: PayloadPart) -> pl.DataFrame:
    """Each kernel name's most common category (ties: the first in sort order)."""
    c = mine.cats
    return (c.filter(pl.col("n") == pl.col("n").max().over("name"))
            .group_by("name").agg(pl.col("category").sort().first()))


def _tiny(mine: PayloadPart, top: int = 5) -> dict[str, Any]:
    """:func:`traceparse.reports.sections.tiny_memory_kernels` from the merged sums."""
    from traceparse.reports.options import rows
    from traceparse.reports.sections import TINY_KERNEL_NS

    t = mine.tiny
    by = (t.group_by("name").agg(pl.col("count", "total_ns").sum())
          .sort(["count", "total_ns", "name"], descending=[True, True, False]).head(top))
    per = (t.group_by("rank").agg(pl.col("count", "total_ns").sum())
           .sort(["total_ns", "rank"], descending=[True, False]))
    return {"max_ns": TINY_KERNEL_NS, "count": int(t["count"].sum()),
            "total_ns": int(t["total_ns"].sum()) if t.height else 0, "top": rows(by),
            "by_rank": rows(per)}


def _pageable(mine: PayloadPart) -> dict[str, Any]:
    """:func:`traceparse.reports.sections.pageable_copies` from the merged sums."""
    c = mine.copies

    def agg(f: pl.DataFrame) -> dict[str, Any]:
        b = int(f["bytes"].sum()) if f.height else 0
        t = int(f["total_ns"].sum()) if f.height else 0
        return {"count": int(f["count"].sum()) if f.height else 0, "bytes": b,
                "total_ns": t, "gbps": (b / t) if t else None}

    pageable = c.filter(pl.col("host") == "Pageable")
    per = [{"rank": int(r), **agg(pageable.filter(pl.col("rank") == r))}
           for r in sorted(pageable["rank"].unique().to_list())]
    per.sort(key=lambda d: (-d["total_ns"], d["rank"]))
    return {"pageable": agg(pageable),
            "pinned": agg(c.filter((pl.col("host") == "Pinned") & pl.col("positive"))),
            "pageable_by_rank": per}

