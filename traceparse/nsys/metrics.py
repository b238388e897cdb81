"""Nsight Systems GPU metrics (``nsys profile --gpu-metrics-devices``) -> ``metrics`` table.

Source tables (FORMATS.md A.12):

* ``GPU_METRICS(timestamp, typeId, metricId, value)`` - one row per metric per sample
  (newer exports add ``rawTimestamp``, ignored);
* ``TARGET_INFO_GPU_METRICS(typeId, sourceId, typeName, metricId, metricName)`` - the
  names. ``metricId`` is "not assumed to be stable" across types, so names join on
  ``(typeId, metricId)`` when both tables have ``typeId``, else on ``metricId`` alone.

Schema variants handled (each has a generated export in the tests):

1. 2024.x: both tables with ``typeId``; names without a unit tag ("SM Active",
   "GPC Clock Frequency" in Hz, "DRAM Read Throughput" in % of peak);
2. newer names carry the unit in brackets ("SM Active [Throughput %]",
   "GPC Clock Frequency [MHz]", "DRAM Read Bandwidth [Throughput %]"): the bracket sets the
   unit (MHz/GHz/kHz are converted to Hz) and the bare name becomes ``metric``; except
   that nsys 2025.3 writes its clocks in Hz under the "[MHz]" tag (1,980,004,750 on an
   H100: sample_traces/h100_captures/scenarios_nsys), so a clock whose converted median
   would exceed :data:`MAX_CLOCK_HZ` (100 GHz) is kept in Hz;
3. no ``typeId`` in ``GPU_METRICS``: names join on ``metricId``;
4. no ``TARGET_INFO_GPU_METRICS``: samples cannot be named and are counted as skipped.

Device: each GPU sampled has its own ``typeId``. A ``typeName`` containing "GPU <n>" names
the device; otherwise the k-th ``typeId`` (ascending) is the k-th ``TARGET_INFO_GPU.id``
(with one GPU, simply that GPU).

Period: a sample covers ``[timestamp, next timestamp of the same metric on the device)``;
the last one gets the median period. Negative values (the first sample of a clock counter
before it is valid: -1964454041 Hz in resest__report2) are skipped and counted.
"""

from __future__ import annotations

import re

import polars as pl

from traceparse import schema
from traceparse.nsys.db import NsysDB

METRICS_TABLE = "GPU_METRICS"
NAMES_TABLE = "TARGET_INFO_GPU_METRICS"
SOURCE = "nsys GPU_METRICS"

_BRACKET = re.compile(r"^(?P<name>.*?)\s*\[(?P<unit>[^\]]*)\]\s*$")
_GPU_N = re.compile(r"\bGPU\s*(\d+)\b", re.IGNORECASE)
_HZ = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
#: Above any GPU or memory clock (Hz): a clock metric whose unit tag would put it here was
#: written in Hz despite its tag (see :func:`read_metrics`).
MAX_CLOCK_HZ = 1e11


def split_unit(raw: str) -> tuple[str, str, float]:
    """Metric name, unit and scale to that unit from a raw nsys metric name.

    Example:
        >>> split_unit("GPC Clock Frequency [MHz]")
        ('GPC Clock Frequency', 'Hz', 1000000.0)
        >>> split_unit("SM Active")
        ('SM Active', '%', 1.0)
        >>> split_unit("Compute Warps in Flight [Avg Warps per Cycle]")
        ('Compute Warps in Flight [Avg Warps per Cycle]', 'Avg Warps per Cycle', 1.0)
    """
    m = _BRACKET.match(raw)
    name, tag = (m.group("name"), m.group("unit").strip()) if m else (raw.strip(), "")
    if tag:
        low = tag.lower()
        if low in _HZ:
            return name, "Hz", _HZ[low]
        if "%" in low:
            return name, "%", 1.0
        if low == "requests":
            return name, "count", 1.0
        # other tags ("Avg", "Avg Warps per Cycle") name a second view of the same counter
        # as its "[Throughput %]" one: keep the full name so the two stay apart
        return raw.strip(), tag, 1.0
    low = name.lower()
    if "clock" in low or "frequency" in low:
        return name, "Hz", 1.0  # untagged clocks are in Hz (2024.2 exports: ~1.96e9)
    if "requests" in low:
        return name, "count", 1.0
    return name, "%", 1.0  # throughput / active / in-flight metrics are % of peak


def read_metrics(db: NsysDB, devices: pl.DataFrame, rank: int
                 ) -> tuple[pl.DataFrame, int, dict[str, int]]:
    """Read GPU metric samples into a ``metrics`` frame.

    Returns:
        (frame, parsed rows, skipped rows by reason); an empty frame when the export has
        no ``GPU_METRICS`` table.
    """
    if not db.has(METRICS_TABLE):
        return schema.empty("metrics"), 0, {}
    db.require(METRICS_TABLE, ("timestamp", "metricId", "value"))
    cols = set(db.columns(METRICS_TABLE))
    # names join on typeId only when both tables have it
    has_type = "typeId" in cols and "typeId" in set(db.columns(NAMES_TABLE))
    sel = "timestamp AS start_ns, metricId AS _mid, value" + (", typeId AS _tid" if has_type
                                                              else "")
    raw = db.table_frame(METRICS_TABLE, sel)
    if "_tid" not in raw.columns:
        raw = raw.with_columns(pl.lit(0, dtype=pl.Int64).alias("_tid"))
    raw = raw.with_columns(pl.col("start_ns").cast(pl.Int64), pl.col("_mid").cast(pl.Int64),
                           pl.col("_tid").cast(pl.Int64), pl.col("value").cast(pl.Float64))
    skipped: dict[str, int] = {}
    names = _names(db, has_type)
    if names is None:
        skipped[f"no {NAMES_TABLE} table to name the metrics"] = raw.height
        return schema.empty("metrics"), 0, skipped
    raw = raw.join(names, on=["_tid", "_mid"], how="left")
    for reason, bad in (("timestamp is null", pl.col("start_ns").is_null()),
                        (f"metric id not in {NAMES_TABLE}", pl.col("metric").is_null()),
                        ("negative value (counter not valid yet)", pl.col("value") < 0)):
        n = raw.filter(bad).height
        if n:
            skipped[reason] = n
            raw = raw.filter(~bad | bad.is_null())
    dev_map = _device_map(names, devices)
    # a clock tagged [MHz] whose samples are already in Hz (nsys 2025.3 writes 1.98e9 under
    # "GPC Clock Frequency [MHz]" on an H100): no GPU clock reaches MAX_CLOCK_HZ, so a
    # metric whose median scaled sample would is taken as Hz (per metric and device)
    over = (pl.col("value").median() * pl.col("_scale").first()).over("_tid", "_mid")
    scale = (pl.when((pl.col("unit") == "Hz") & (over > MAX_CLOCK_HZ)).then(1.0)
             .otherwise(pl.col("_scale")))
    frame = raw.with_columns(
        (pl.col("value") * scale).alias("value"),
        pl.col("_tid").replace_strict(dev_map, default=0, return_dtype=pl.Int32)
        .alias("device_id"),
    ).sort("device_id", "metric", "start_ns")
    nxt = pl.col("start_ns").shift(-1).over("device_id", "metric")
    frame = frame.with_columns(_next=nxt)
    period = frame.select((pl.col("_next") - pl.col("start_ns")).median()).item()
    period = int(period) if period is not None and period > 0 else 0
    frame = frame.with_columns(
        end_ns=pl.col("_next").fill_null(pl.col("start_ns") + period).cast(pl.Int64))
    frame = frame.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"),
                               rank=pl.lit(rank, dtype=pl.Int32), source=pl.lit(SOURCE))
    frame = frame.drop("_tid", "_mid", "_scale", "_next", "_type_name")
    frame = schema.conform("metrics", frame).sort("device_id", "start_ns", "metric")
    return frame, frame.height, skipped


def _names(db: NsysDB, has_type: bool) -> pl.DataFrame | None:
    """(typeId, metricId) -> metric, unit, scale, type name; None without a names table."""
    cols = set(db.columns(NAMES_TABLE))
    if not {"metricId", "metricName"} <= cols:
        return None
    join_type = has_type and "typeId" in cols
    tname = ", typeName" if "typeName" in cols else ""
    tsel = "typeId" if "typeId" in cols else "0"
    rows = db.frame(f"SELECT {tsel} AS _tid, metricId AS _mid, metricName{tname} "
                    f"FROM {NAMES_TABLE}")
    out: dict[str, list[object]] = {"_tid": [], "_mid": [], "metric": [], "unit": [],
                                    "_scale": [], "_type_name": [], "_raw": []}
    seen: set[tuple[int, int]] = set()
    for row in rows.iter_rows(named=True):
        tid = int(row["_tid"]) if join_type and row["_tid"] is not None else 0
        key = (tid, int(row["_mid"]))
        if key in seen:
            continue
        seen.add(key)
        metric, unit, scale = split_unit(str(row["metricName"]))
        out["_tid"].append(tid)
        out["_mid"].append(key[1])
        out["metric"].append(metric)
        out["unit"].append(unit)
        out["_scale"].append(scale)
        out["_type_name"].append(str(row.get("typeName") or ""))
        out["_raw"].append(str(row["metricName"]))
    frame = pl.DataFrame(out, schema={"_tid": pl.Int64, "_mid": pl.Int64, "metric": pl.String,
                                      "unit": pl.String, "_scale": pl.Float64,
                                      "_type_name": pl.String, "_raw": pl.String})
    # two raw names that reduce to one metric name on a device: keep the raw names
    dup = pl.col("metric").is_duplicated().over("_tid")
    frame = frame.with_columns(
        pl.when(dup).then(pl.col("_raw")).otherwise(pl.col("metric")).alias("metric"),
    ).drop("_raw")
    if not join_type:
        # GPU_METRICS rows get _tid 0 too (see read_metrics)
        frame = frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("_tid")).unique(
            ["_tid", "_mid"], keep="first", maintain_order=True)
    return frame


def _device_map(names: pl.DataFrame, devices: pl.DataFrame) -> dict[int, int]:
    """typeId -> device ordinal ("GPU <n>" in typeName, else k-th typeId -> k-th device)."""
    types = names.select("_tid", "_type_name").unique("_tid").sort("_tid")
    ids = sorted(int(d) for d in devices["device_id"].unique().to_list()) if devices.height \
        else []
    out: dict[int, int] = {}
    for k, (tid, tname) in enumerate(types.iter_rows()):
        m = _GPU_N.search(tname or "")
        if m:
            out[int(tid)] = int(m.group(1))
        else:
            out[int(tid)] = ids[k] if k < len(ids) else k
    return out
