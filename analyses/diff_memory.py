"""Memory footprint of two traces: peak allocated and reserved per device, per step and per
top-level op, and the allocations that appeared or grew (docs/diff.md).

Every level comes from :mod:`traceparse.analyses.memory` (the figures of ``traceparse
memory``): device peaks from :func:`~traceparse.analyses.memory.peaks`, step and op peaks
from :func:`~traceparse.analyses.memory.window_peaks` over the step windows of
:func:`traceparse.analyses.diff_tail.step_walls` (``ProfilerStep#N`` windows are those of
``memory --by step``) and the top-level ops of
:func:`~traceparse.analyses.memory.op_peaks`.

Matching: a device by (rank, device id); a step by its position on its rank (the i-th
step of BASE against the i-th of NEW: step numbers differ between runs); an op by (rank,
device, name), its peak being the highest over its instances.

``change_pct`` is relative to BASE's level. A row is flagged ``regression`` /
``improvement`` when the level moved by at least ``min_effect_pct`` %; the gate
(:func:`memory_failed`) is separate and uses the memory thresholds.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse.analyses import memory as mem
from traceparse.analyses._dist import MIN_EFFECT_PCT
from traceparse.timeline import Timeline

SCHEMA = {"level": pl.String, "name": pl.String, "rank": pl.Int32, "device_id": pl.Int32,
          "metric": pl.String, "base": pl.Int64, "new": pl.Int64, "change": pl.Int64,
          "change_pct": pl.Float64, "flag": pl.String}
ALLOC_SCHEMA = {"rank": pl.Int32, "device_id": pl.Int32, "op": pl.String,
                "instances_base": pl.Int64, "instances_new": pl.Int64,
                "base_max_rise_bytes": pl.Int64, "new_max_rise_bytes": pl.Int64,
                "rise_change_bytes": pl.Int64, "new_sizes": pl.String, "status": pl.String}
METRICS = (("peak_allocated_bytes", "peak allocated"), ("peak_reserved_bytes", "peak reserved"))


def has_memory(tl: Timeline) -> bool:
    """True when the trace recorded memory events."""
    return tl.memory.height > 0


def absent_note(base: Timeline, new: Timeline, base_name: str, new_name: str) -> str | None:
    """One line when either trace has no memory events (footprint not compared), else None."""
    missing = [n for n, tl in ((base_name, base), (new_name, new)) if not has_memory(tl)]
    if not missing:
        return None
    return (f"memory: not compared: {' and '.join(missing)} recorded no memory events "
            "(Kineto without profile_memory=True, nsys without --cuda-memory-usage=true)")


def device_name(dev: int | None) -> str:
    return "host" if dev == -1 else f"device {dev}"


def _pairs(a: pl.DataFrame, b: pl.DataFrame, keys: list[str], level: str,
           name: Any, min_effect_pct: float) -> list[dict[str, Any]]:
    """Rows for every metric of every key present on either side."""
    def index(f: pl.DataFrame) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {tuple(r[k] for k in keys): r for r in f.iter_rows(named=True)} if f.height \
            else {}

    ia, ib = index(a), index(b)
    rows: list[dict[str, Any]] = []
    for key in sorted(set(ia) | set(ib), key=lambda k: tuple(str(x) for x in k)):
        ra, rb = ia.get(key), ib.get(key)
        ref = ra or rb
        assert ref is not None
        for col, metric in METRICS:
            va = ra.get(col) if ra else None
            vb = rb.get(col) if rb else None
            if not (va or 0) > 0 and not (vb or 0) > 0 and col == "peak_reserved_bytes":
                continue  # no reservation recorded (Kineto host events: always 0)
            if va is None and vb is None:
                continue
            change = vb - va if va is not None and vb is not None else None
            pct = change * 100.0 / va if change is not None and va and va > 0 else None
            if ra is None:
                flag = "only new"
            elif rb is None:
                flag = "only base"
            elif change and (pct is None or abs(pct) >= min_effect_pct):
                flag = "regression" if change > 0 else "improvement"
            else:
                flag = ""
            rows.append({"level": level, "name": name(ref), "rank": ref["rank"],
                         "device_id": ref["device_id"], "metric": metric, "base": va,
                         "new": vb, "change": change, "change_pct": pct, "flag": flag})
    return rows


def _step_peaks(tl: Timeline, walls: pl.DataFrame) -> pl.DataFrame:
    if walls.height == 0:
        return pl.DataFrame()
    w = walls.select("rank", "step", "start_ns", "end_ns").with_columns(
        pl.int_range(pl.len()).over("rank").alias("step_index"))
    p = mem.window_peaks(tl, w.select("rank", "step", "start_ns", "end_ns"), label="step")
    if p.height == 0:
        return p
    return p.join(w.select("rank", "start_ns", "step_index"), on=["rank", "start_ns"],
                  how="left")


def memory_diff(base: Timeline, new: Timeline, walls: tuple[pl.DataFrame, pl.DataFrame], *,
                min_effect_pct: float = MIN_EFFECT_PCT) -> pl.DataFrame:
    """Per device, step and top-level op: peak allocated and peak reserved of both traces.

    Args:
        walls: the step rows of both traces (:func:`traceparse.analyses.diff_tail.step_walls`).

    Returns ``level`` (device, step, op), ``name``, ``rank, device_id, metric`` ("peak
    allocated" / "peak reserved"), ``base, new, change`` (bytes), ``change_pct``, ``flag``;
    empty when either trace has no memory events (:func:`absent_note` says so).
    """
    if not (has_memory(base) and has_memory(new)):
        return pl.DataFrame(schema=SCHEMA)
    rows = _pairs(mem.peaks(base), mem.peaks(new), ["rank", "device_id"], "device",
                  lambda r: device_name(r["device_id"]), min_effect_pct)
    rows += _pairs(_step_peaks(base, walls[0]), _step_peaks(new, walls[1]),
                   ["rank", "device_id", "step_index"], "step",
                   lambda r: f"#{r['step_index']} {r['step']}", min_effect_pct)
    rows += _pairs(mem.op_peaks(base), mem.op_peaks(new), ["rank", "device_id", "name"],
                   "op", lambda r: r["name"], min_effect_pct)
    return pl.DataFrame(rows, schema=SCHEMA)


def _op_alloc_sizes(tl: Timeline) -> pl.DataFrame:
    """``rank, device_id, op, bytes`` of every allocation event inside a top-level op (the
    op that started last before the event on its rank and had not ended)."""
    ops = mem.top_level_ops(tl)
    if ops.height == 0:
        ops = mem.top_level_ops(tl, kinds=("nvtx_push_pop", "nvtx_start_end"))
    m = tl.memory.filter(pl.col("bytes") > 0)
    if ops.height == 0 or m.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32, "op": pl.String,
                                    "bytes": pl.Int64})
    o = ops.select("rank", pl.col("start_ns").alias("ts_ns"), "end_ns",
                   pl.col("name").cast(pl.String).alias("op")).sort("rank", "ts_ns")
    j = (m.select("rank", "device_id", "ts_ns", "bytes").sort("rank", "ts_ns")
         .join_asof(o, on="ts_ns", by="rank", strategy="backward", suffix="_op",
                    check_sortedness=False))  # both sorted by (rank, ts) just above
    return j.filter(pl.col("end_ns").is_not_null() & (pl.col("ts_ns") < pl.col("end_ns"))
                    ).select("rank", "device_id", "op", "bytes")


def _sizes_text(sizes: list[tuple[int, int]]) -> str:
    from traceparse.units import size

    return ", ".join(f"{n} x {b} B ({size(b)})" for b, n in sizes)


def allocation_changes(base: Timeline, new: Timeline, *, top: int | None = None
                       ) -> pl.DataFrame:
    """Top-level ops whose allocations appeared or grew in NEW.

    Per (rank, device, op name): instances and the largest rise of the allocated level over
    one instance on each side (:func:`traceparse.analyses.memory.op_peaks`), and
    ``new_sizes``: allocation sizes made inside the op in NEW that it never made in BASE
    (count x size). ``status`` is ``appeared`` (the op did not allocate in BASE: no rise,
    or not run) or ``grew``. Rows with a rise change > 0 or new sizes, largest change first.
    """
    if not (has_memory(base) and has_memory(new)):
        return pl.DataFrame(schema=ALLOC_SCHEMA)
    key = ["rank", "device_id", "name"]
    oa, ob = mem.op_peaks(base), mem.op_peaks(new)
    empty = pl.DataFrame(schema={"rank": pl.Int32, "device_id": pl.Int32, "name": pl.String,
                                 "instances": pl.UInt32, "max_rise_bytes": pl.Int64})
    oa = oa.select(*key, "instances", "max_rise_bytes") if oa.height else empty
    ob = ob.select(*key, "instances", "max_rise_bytes") if ob.height else empty
    j = ob.join(oa, on=key, how="full", coalesce=True, suffix="_base")
    sa, sb = _op_alloc_sizes(base), _op_alloc_sizes(new)
    seen = {(r, d, o, b) for r, d, o, b in sa.unique().iter_rows()}
    fresh: dict[tuple[Any, ...], dict[int, int]] = {}
    for r, d, o, b in sb.iter_rows():
        if (r, d, o, b) not in seen:
            c = fresh.setdefault((r, d, o), {})
            c[b] = c.get(b, 0) + 1
    rows = []
    for r in j.iter_rows(named=True):
        k = (r["rank"], r["device_id"], r["name"])
        rb, ra = r["max_rise_bytes"] or 0, r["max_rise_bytes_base"]
        change = rb - (ra or 0)
        sizes = sorted(fresh.get(k, {}).items(), key=lambda t: (-t[0] * t[1], -t[0]))
        if change <= 0 and not sizes:
            continue
        rows.append({"rank": k[0], "device_id": k[1], "op": k[2],
                     "instances_base": r["instances_base"] or 0,
                     "instances_new": r["instances"] or 0, "base_max_rise_bytes": ra,
                     "new_max_rise_bytes": r["max_rise_bytes"], "rise_change_bytes": change,
                     "new_sizes": _sizes_text(sizes),
                     "status": "appeared" if not ra else "grew"})
    out = pl.DataFrame(rows, schema=ALLOC_SCHEMA).sort(
        ["rise_change_bytes", "op"], descending=[True, False])
    return out.head(top) if top else out


def memory_failed(m: pl.DataFrame, above_pct: float | None, above_bytes: int | None
                  ) -> pl.Series:
    """Per row: the level grew by more than every threshold given (``above_pct`` % of BASE
    and ``above_bytes`` bytes); no threshold -> nothing fails; rows without both sides
    never fail (their levels are counted in the device and step rows)."""
    if (above_pct is None and above_bytes is None) or m.height == 0:
        return pl.Series("failed", [False] * m.height, dtype=pl.Boolean)
    cond = pl.col("change").is_not_null() & (pl.col("change") > 0)
    if above_pct is not None:
        # a level that grew from nothing (base <= 0) exceeds any percentage
        cond &= pl.col("change_pct").is_null() | (pl.col("change_pct") > above_pct)
    if above_bytes is not None:
        cond &= pl.col("change") > above_bytes
    return m.select(cond.fill_null(False).alias("failed"))["failed"]
