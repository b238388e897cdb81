"""Counter tracks for the Chrome-trace export: GPU metrics and device memory.

Perfetto draws each ``"ph": "C"`` series as a counter track on its process:

* GPU metrics: one track per metric on the device's GPU process, named
  ``"<metric> (<unit>)"``, one event per sample (``args.value`` = the sample's value, held
  until the next sample);
* memory: one track ``"memory (bytes)"`` per device with ``args.allocated`` (and
  ``args.reserved`` where recorded) after each event, from
  :func:`traceparse.analyses.memory.device_levels`; host memory (device -1) goes on the
  rank's host lane process. Events of kinds not in the device's own memory
  (``memory.NOT_DEVICE``: Managed, Pinned, Pageable ...) get their own track
  ``"memory not on the device (bytes)"`` beside it, as ``memory`` reports them beside the
  device peak: every memory event of the timeline is one counter event.
"""

from __future__ import annotations

import polars as pl

from traceparse.analyses.memory import device_levels
from traceparse.reports.chrome_ids import HOST_PID_BASE, _gpu_pid, _us
from traceparse.timeline import Timeline


def metric_counters(tl: Timeline, base: int, multi: bool) -> pl.DataFrame:
    """One ``C`` event per GPU-metric sample."""
    m = tl.metrics
    if m.height == 0:
        return pl.DataFrame()
    return m.sort("rank", "device_id", "metric", "start_ns").select(
        pl.concat_str(pl.col("metric").cast(pl.String), pl.lit(" ("),
                      pl.col("unit").cast(pl.String).fill_null("?"), pl.lit(")"))
        .alias("name"),
        pl.lit("C").alias("ph"),
        _us("start_ns", base).alias("ts"),
        _gpu_pid(multi).alias("pid"),
        pl.lit(0, dtype=pl.Int64).alias("tid"),
        pl.struct(pl.col("value")).alias("args"),
    )


def memory_counters(tl: Timeline, base: int, multi: bool) -> pl.DataFrame:
    """One ``C`` event per memory event: the allocated (reserved) level after it, of the
    device's own memory or, on a second track, of the kinds not on the device."""
    parts = [_levels(device_levels(tl, on_device=on), name, base, multi)
             for on, name in ((True, "memory (bytes)"),
                              (False, "memory not on the device (bytes)"))]
    parts = [p for p in parts if p.height]
    return pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame()


def _levels(lv: pl.DataFrame, name: str, base: int, multi: bool) -> pl.DataFrame:
    if lv.height == 0:
        return pl.DataFrame()
    has_res = lv["reserved_bytes"].null_count() < lv.height
    fields = [pl.col("allocated_bytes").alias("allocated")]
    if has_res:
        fields.append(pl.col("reserved_bytes").alias("reserved"))
    pid = pl.when(pl.col("device_id") >= 0).then(_gpu_pid(multi)) \
        .otherwise(HOST_PID_BASE + pl.col("rank").cast(pl.Int64))
    return lv.sort("rank", "device_id", "ts_ns", maintain_order=True).select(
        pl.lit(name).alias("name"),
        pl.lit("C").alias("ph"),
        _us("ts_ns", base).alias("ts"),
        pid.alias("pid"),
        pl.lit(0, dtype=pl.Int64).alias("tid"),
        pl.struct(fields).alias("args"),
    )
