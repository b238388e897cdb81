"""Generated nsys exports with extra tables (GPU metrics, memory usage, CUDA graphs).

A base export comes from :mod:`traceparse.samplegen.sqlite` (kernels at known times); the
extra tables are added with plain ``sqlite3`` in the column layouts of FORMATS.md A.12-A.14,
one variant per nsys schema generation.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import Activity, Call, Scenario

#: memoryBandwidth of the generated GPU (samplegen_sqlite.GPU_INFO), bytes/s.
PEAK_BW = 3352320000000
TYPE_ID = (1 << 48) | (1 << 32)


def kernel_scenario(kernels: Sequence[tuple[str, int, int]], name: str = "extra") -> Scenario:
    """One cudaLaunchKernel per (name, start_ns, end_ns) on stream 7 of device 0."""
    calls = tuple(
        Call("cudaLaunchKernel_v7000", s - 5_000, s - 4_000,
             Activity("kernel", 7, s, e - s, n))
        for n, s, e in kernels)
    return Scenario(name, "generated for extra-table tests", calls)


def write_base(path: Path, kernels: Sequence[tuple[str, int, int]]) -> Path:
    return samplegen_sqlite.write(kernel_scenario(kernels), path)


def add_table(path: Path, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
              ) -> None:
    """Create ``table`` with ``columns`` (all INTEGER unless the name says text) and rows."""
    text = {"typeName", "metricName", "name", "data"}
    ddl = ", ".join(f'"{c}" {"TEXT" if c in text else "INTEGER"}' for c in columns)
    with sqlite3.connect(path) as db:
        db.execute(f'CREATE TABLE "{table}" ({ddl})')
        marks = ", ".join("?" for _ in columns)
        db.executemany(f'INSERT INTO "{table}" VALUES ({marks})', rows)
    db.close()


def add_metrics(path: Path, samples: dict[str, Sequence[tuple[int, int]]], *,
                variant: str = "2024", type_ids: Sequence[int] = (TYPE_ID,),
                type_names: Sequence[str] = ("",)) -> None:
    """Add GPU_METRICS samples {metric name: [(timestamp, value)]} for each type id.

    Variants: ``2024`` (typeId in both tables), ``no_type`` (GPU_METRICS without typeId),
    ``names_no_type`` (TARGET_INFO_GPU_METRICS without typeId), ``no_names`` (no
    TARGET_INFO_GPU_METRICS).
    """
    names, rows = [], []
    for t, tname in zip(type_ids, type_names, strict=True):
        for mid, (metric, pts) in enumerate(samples.items()):
            names.append((t, t, tname, mid, metric))
            for ts, v in pts:
                rows.append((ts, t, mid, v) if variant != "no_type" else (ts, mid, v))
    cols = ["timestamp", "typeId", "metricId", "value"]
    add_table(path, "GPU_METRICS", cols if variant != "no_type" else
              ["timestamp", "metricId", "value"], rows)
    if variant == "names_no_type":
        add_table(path, "TARGET_INFO_GPU_METRICS", ["metricId", "metricName"],
                  [(n[3], n[4]) for n in names])
    elif variant != "no_names":
        add_table(path, "TARGET_INFO_GPU_METRICS",
                  ["typeId", "sourceId", "typeName", "metricId", "metricName"], names)


#: Independent SQL (written apart from traceparse's reader) over an nsys export with GPU
#: metrics: ``s`` = the samples of one metric (bound as the parameter), each lasting until
#: the next sample of the same metric; ``k`` = every kernel launch with its name. Tests
#: append their own SELECT over ``k JOIN s``.
KERNEL_SAMPLES_SQL = """
    WITH s AS (
      SELECT g.timestamp AS t0,
             LEAD(g.timestamp) OVER (PARTITION BY g.typeId, g.metricId ORDER BY g.timestamp) AS t1,
             g.value AS v
      FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS n
           ON n.typeId = g.typeId AND n.metricId = g.metricId
      WHERE n.metricName = ? AND g.value >= 0),
    k AS (SELECT k.start AS ks, k."end" AS ke, sid.value AS name
          FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds sid ON sid.id = k.demangledName)
"""
