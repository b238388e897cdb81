"""The chunked summary's ``communication`` and ``stragglers`` sections of one nsys export
(docs/performance.md, "Chunked summary"): :func:`traceparse.analyses.comm.collectives`
read in time-ordered pieces (:mod:`traceparse.analyses.chunked_comm`), then the memory
path's own :func:`~traceparse.analyses.comm.summarize`,
:func:`~traceparse.analyses.comm.skew` and :func:`~traceparse.analyses.comm.stragglers`
on that frame.

One read of each window's GPU rows (:func:`traceparse.nsys.chunks.read_rows`), in time
order in this process (the overlap carries state from window to window; on Dask too).
A collective named by the op range its launch call sits in
(:func:`~traceparse.analyses.comm.launch_op_collective`: ``cpu_op``, ``user_annotation``
or NVTX push/pop ranges) is named from ``ops``, the export's ranges held whole, with the
launch calls read by correlation id: the chunked summary and payload pass the NVTX
ranges they read whole (:mod:`traceparse.ranges_chunks`) and refuse an export whose
spans hold such ranges of a kind ``ops`` lacks (:func:`sections`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from traceparse.analyses import chunked_comm as cc
from traceparse.analyses import comm

if TYPE_CHECKING:
    from traceparse.nsys.chunks import Plan

#: Range kinds that can name a collective (:func:`comm.launch_op_collective`).
OP_RANGE_KINDS = frozenset(comm._THREAD_RANGE_KINDS)


def collectives(plan: Plan, wins: list[tuple[int, int]],
                ops: pl.DataFrame | None = None) -> pl.DataFrame:
    """:func:`traceparse.analyses.comm.collectives` of the export of ``plan`` from its
    time windows ``wins`` (in order, covering every start: ``plan.windows``); ``ops``:
    the ranges that may name the collectives (the timeline's ``ranges``), or None when
    the export has none of :data:`OP_RANGE_KINDS`."""
    return collected(plan, wins, ops)[0]


def collected(plan: Plan, wins: list[tuple[int, int]], ops: pl.DataFrame | None = None
              ) -> tuple[pl.DataFrame, int]:
    """:func:`collectives` and the length of the union of the collective kernels under
    compute (:attr:`traceparse.analyses.chunked_comm.Carry.under`)."""
    from traceparse.nsys import chunks

    carry: cc.Carry | None = None
    done = []
    for t0, t1 in wins:
        rows = chunks.read_rows(plan, plan.blocks_for(t0, t1), (t0, t1))
        if carry is None:
            carry = cc.start(rows)
        got, carry = cc.step(rows, t0, t1, carry)
        done.append(got)
        del rows
    if carry is None:  # no windows: the memory path's empty frame
        from traceparse.timeline import Timeline

        return comm.collectives(Timeline()), 0
    k = cc.finish(done, carry)
    cols: tuple[str, ...] = ()
    if ops is not None and ops.height and k.height and k["coll_name"].null_count():
        from traceparse.nsys.spans import calls_by_correlation
        from traceparse.timeline import Timeline

        calls = calls_by_correlation(plan, k["correlation_id"])
        k = k.with_columns(comm.launch_op_collective(Timeline(ranges=ops, api=calls), k)
                           .alias("op_coll"))
        cols = ("op_coll",)
    return comm.kernel_rows(k, k[cc._OV], cols), carry.under


class OpNamed(Exception):
    """The export has ranges that may name its collectives (not read in pieces)."""


def sections(plan: Plan, wins: list[tuple[int, int]], top: int, range_kinds: frozenset[str],
             ops: pl.DataFrame | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The summary's ``communication`` (``top`` rows) and ``stragglers`` sections,
    ``range_kinds`` the kinds of the export's ranges (pass 2's spans), ``ops`` the ranges
    held whole that may name the collectives (:func:`collectives`).

    Raises:
        OpNamed: ``range_kinds`` holds a kind that can name a collective and ``ops`` does
            not hold it.
    """
    _refuse(range_kinds, ops)
    c = collectives(plan, wins, ops)
    return comm.summarize(c).head(top), comm.stragglers(comm.skew(c))


def _refuse(range_kinds: frozenset[str], ops: pl.DataFrame | None) -> None:
    named = range_kinds & OP_RANGE_KINDS
    if ops is not None and ops.height:
        named -= set(ops["kind"].cast(pl.String).unique().to_list())
    if named:
        raise OpNamed(f"the export has {', '.join(sorted(named))} ranges, which name "
                      "collectives by their launching op (not read in pieces)")


def payload_section(plan: Plan, wins: list[tuple[int, int]], t0: Any,
                    range_kinds: frozenset[str], ops: pl.DataFrame | None = None
                    ) -> dict[str, Any]:
    """The report payload's ``comm`` section
    (:func:`traceparse.reports.sections.comm_section_of`), ``t0`` the first GPU start.

    Raises:
        OpNamed: as :func:`sections`.
    """
    from traceparse.reports.sections import comm_section_of

    _refuse(range_kinds, ops)
    c, under = collected(plan, wins, ops)
    summ = comm.summarize(c)
    return comm_section_of(summ, comm.stragglers(comm.skew(c)), comm.skew(c), t0,
                           comm.concurrency_of(c, under))
