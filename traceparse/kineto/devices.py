"""The GPUs a Kineto trace describes (``deviceProperties``) and which of them ran its work.

:func:`device_frame` reads ``deviceProperties``: one row per GPU the profiled process could
see, by its index **in that process**. The GPU activities carry the tracer's device index:
on ROCm (roctracer) the physical GPU's, so an SGLang worker that sees one MI300X
(``HIP_VISIBLE_DEVICES``) lists device 0 while its kernels run on device 9, and torch's
``[memory]`` events name device 0 too (the allocator's index). A process can only run work
on a GPU it sees: when it sees exactly one and all its GPU activities name one other index,
that index *is* the listed GPU (:func:`one_visible_gpu`), so the description and the
memory events are moved to it and ``meta["device_alias"]`` says so. With several listed GPUs
the indices cannot be matched (a vLLM capture lists 8, runs on 2 and allocates on 0) and
nothing is moved.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceparse import schema


def int_or_none(value: Any) -> int | None:
    """An int, or a string of digits, as int; anything else (bools too) None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def device_frame(header: dict[str, Any], rank: int) -> pl.DataFrame:
    """The ``devices`` table of ``deviceProperties`` (empty without it)."""
    props = header.get("deviceProperties")
    rows = []
    for d in props if isinstance(props, list) else []:
        if not isinstance(d, dict) or int_or_none(d.get("id")) is None:
            continue
        warp = int_or_none(d.get("warpSize"))
        rows.append({
            "rank": rank, "device_id": int_or_none(d.get("id")),
            "name": None if d.get("name") is None else str(d.get("name")),
            "vendor": "amd" if warp == 64 else "nvidia",
            "sm_count": int_or_none(d.get("numSms")),
            "memory_bytes": int_or_none(d.get("totalGlobalMem")),
            "compute_major": int_or_none(d.get("computeMajor")),
            "compute_minor": int_or_none(d.get("computeMinor")),
        })
    if not rows:
        return schema.empty("devices")
    return schema.conform("devices", pl.DataFrame(rows, infer_schema_length=None))


def one_visible_gpu(devices: pl.DataFrame, gpu: pl.DataFrame, memory: pl.DataFrame
                    ) -> tuple[pl.DataFrame, pl.DataFrame, str | None]:
    """``(devices, memory, note)``: where the process saw exactly one GPU and every GPU
    activity names one other index, the device row and the memory events of the listed
    index take the activities' index (module docstring); otherwise unchanged, note None."""
    if devices.height != 1 or gpu.height == 0:
        return devices, memory, None
    ids = gpu.get_column("device_id").drop_nulls().unique()
    listed = devices.get_column("device_id")[0]
    if ids.len() != 1 or listed is None or ids[0] == listed:
        return devices, memory, None
    run = int(ids[0])
    devices = devices.with_columns(pl.lit(run, dtype=devices.schema["device_id"])
                                   .alias("device_id"))
    if memory.height and "device_id" in memory.columns:
        memory = memory.with_columns(
            pl.when(pl.col("device_id") == listed).then(pl.lit(run))
            .otherwise(pl.col("device_id")).cast(memory.schema["device_id"])
            .alias("device_id"))
    return devices, memory, (
        f"the process saw one GPU (deviceProperties id {listed}) and its GPU activities name "
        f"device {run} (the tracer's index): that GPU is device {run}, its memory events too")
