"""The :class:`Timeline` container: the unified tables of one or more traces.

A Timeline holds one polars frame per schema table (``gpu``, ``api``, ``ranges``,
``devices``, ``ncu``, ``sources``, ``ingest``) plus a small ``meta`` dict. It is created by a
parser, validated against :mod:`traceparse.schema`, and saved to / loaded from Parquet: parse
once, analyse and render many times.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceparse import schema
from traceparse.atomic import atomic_path
from traceparse.errors import TraceError

_META_FILE = "timeline.json"
#: ``ingest.reason`` of a source table a partial read left out (``traceparse.nsys.reader.read``
#: with ``tables=``): its rows exist but this timeline does not hold them.
NOT_REQUESTED = "not requested: the caller asked for a partial timeline without this table"


@dataclass
class Timeline:
    """Unified kernel timeline.

    Attributes:
        gpu: GPU activities (kernels, memcpy, memset, sync), one row each.
        api: host API calls (CUDA/HIP runtime and driver).
        ranges: host and GPU ranges (NVTX, torch ops, annotations, steps).
        devices: one row per (rank, device).
        ncu: per-launch Nsight Compute metrics.
        metrics: sampled GPU hardware metrics (nsys GPU_METRICS), one row per sample.
        memory: device memory events (allocations, frees, usage samples).
        sources: one row per input file.
        ingest: accounting of source rows parsed and skipped, with reasons.
        meta: free-form facts a parser wants to keep (JSON-serialisable).
    """

    gpu: pl.DataFrame = field(default_factory=lambda: schema.empty("gpu"))
    api: pl.DataFrame = field(default_factory=lambda: schema.empty("api"))
    ranges: pl.DataFrame = field(default_factory=lambda: schema.empty("ranges"))
    devices: pl.DataFrame = field(default_factory=lambda: schema.empty("devices"))
    ncu: pl.DataFrame = field(default_factory=lambda: schema.empty("ncu"))
    metrics: pl.DataFrame = field(default_factory=lambda: schema.empty("metrics"))
    memory: pl.DataFrame = field(default_factory=lambda: schema.empty("memory"))
    sources: pl.DataFrame = field(default_factory=lambda: schema.empty("sources"))
    ingest: pl.DataFrame = field(default_factory=lambda: schema.empty("ingest"))
    meta: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> pl.DataFrame:
        """Return the frame of table ``name``."""
        if name not in schema.TABLES:
            raise KeyError(name)
        frame: pl.DataFrame = getattr(self, name)
        return frame

    def tables(self) -> dict[str, pl.DataFrame]:
        """All tables by name, in schema order."""
        return {name: self.table(name) for name in schema.TABLES}

    def rows(self, name: str) -> int:
        """Row count of table ``name`` (a lazily loaded timeline answers from the file's
        metadata without reading the rows)."""
        return self.table(name).height

    def ncu_only(self) -> bool:
        """True for an Nsight Compute page read alone: kernels measured one launch at a time,
        no timeline (no GPU activity rows)."""
        return not self.rows("gpu") and self.rows("ncu") > 0

    def validate(self) -> Timeline:
        """Validate every table against the schema; return self."""
        for name, frame in self.tables().items():
            schema.validate(name, frame)
        return self

    @property
    def kernels(self) -> pl.DataFrame:
        """GPU rows of kind ``kernel``."""
        return self.gpu.filter(pl.col("kind") == "kernel")

    def span_ns(self) -> tuple[int, int] | None:
        """(first start, last end) over GPU activities, API calls and ranges; None if empty."""
        starts: list[int] = []
        ends: list[int] = []
        for frame in (self.gpu, self.api, self.ranges):
            if frame.height:
                starts.append(int(frame["start_ns"].min()))  # type: ignore[arg-type]
                last = frame.select(pl.max_horizontal("start_ns", "end_ns").max()).item()
                ends.append(int(last))
        if not starts:
            return None
        return min(starts), max(ends)

    def to_pandas(self, name: str = "gpu") -> Any:
        """Table ``name`` as a pandas DataFrame (needs pandas; for interop only)."""
        return self.table(name).to_pandas()

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | os.PathLike[str], *, compression: str = "zstd") -> Path:
        """Save to a directory of Parquet files (one per table) plus ``timeline.json``.

        The write is atomic: a temporary directory is renamed onto ``path``.
        ``compression`` is the Parquet codec (``"uncompressed"`` reads ~40% faster and is
        ~2.5x larger: the timeline cache uses it).
        """
        self.validate()
        target = Path(path)
        with atomic_path(target, directory=True) as tmp:
            for name, frame in self.tables().items():
                frame.write_parquet(tmp / f"{name}.parquet", statistics=False,
                                    compression=compression)  # type: ignore[arg-type]
            info = {"schema_version": schema.SCHEMA_VERSION, "meta": self.meta}
            (tmp / _META_FILE).write_text(json.dumps(info, sort_keys=True, indent=1))
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, validate: bool = True,
             lazy: bool = False) -> Timeline:
        """Load a timeline saved by :meth:`save`; raise :class:`TraceError` if it is not one
        or was written with another schema version.

        ``validate=False`` checks only each table's column names and dtypes, not the values
        (``dur_ns == end_ns - start_ns`` etc.): for trusted copies such as the cache, which
        validated them when writing. ``lazy=True`` (implies ``validate=False``) checks each
        table's Parquet schema now and reads a table's rows on its first use
        (:class:`LazyTimeline`): a command that needs only some tables, or only derived values
        kept beside the cache (:mod:`traceparse.derived_store`), never holds the others.
        """
        src = Path(path)
        meta_file = src / _META_FILE
        if not meta_file.is_file():
            raise TraceError(src, "not a saved traceparse timeline (no timeline.json)")
        try:
            info = json.loads(meta_file.read_text())
        except (OSError, ValueError) as exc:
            raise TraceError(src, f"unreadable timeline.json: {exc}") from None
        if info.get("schema_version") != schema.SCHEMA_VERSION:
            raise TraceError(src, f"saved with schema {info.get('schema_version')}, "
                                  f"this traceparse reads {schema.SCHEMA_VERSION}")
        if lazy:
            for name in schema.TABLES:
                try:
                    got = pl.read_parquet_schema(src / f"{name}.parquet")
                except (OSError, pl.exceptions.PolarsError) as exc:
                    raise TraceError(src, f"unreadable {name}.parquet: {exc}") from None
                if dict(got) != dict(schema.polars_schema(name)):
                    raise TraceError(src, f"saved timeline does not match the schema: "
                                          f"{name}: schema {dict(got)}")
            lazy_tl = LazyTimeline.__new__(LazyTimeline)
            lazy_tl.__dict__.update(meta=info.get("meta", {}), _lazy_dir=src, _lazy_loaded={})
            return lazy_tl
        tables = {name: _read_table(src, name) for name in schema.TABLES}
        tl = cls(**tables, meta=info.get("meta", {}))
        try:
            if validate:
                tl.validate()
            else:
                for name, frame in tl.tables().items():
                    if frame.schema != schema.polars_schema(name):
                        raise schema.SchemaError(f"{name}: schema {dict(frame.schema)}")
        except schema.SchemaError as exc:
            raise TraceError(src, f"saved timeline does not match the schema: {exc}") from None
        return tl


def _read_table(src: Path, name: str) -> pl.DataFrame:
    try:
        return pl.read_parquet(src / f"{name}.parquet")
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise TraceError(src, f"unreadable {name}.parquet: {exc}") from None


class LazyTimeline(Timeline):
    """A :class:`Timeline` loaded with ``Timeline.load(path, lazy=True)``: each table is read
    from its Parquet file on first access, then kept like any other field (assigning a table
    replaces it as usual). ``_lazy_loaded`` holds the frames read from disk, so
    :func:`traceparse.derived.cached` can tell a table still as loaded (read or not yet
    read) from one a caller replaced. When a table cannot be read back (a cache entry
    deleted meanwhile, or one Parquet cannot hold), ``_lazy_fallback`` (set by
    :func:`traceparse.load`) parses the input again instead, as an eager cache lookup
    would have."""

    def __getattr__(self, name: str) -> pl.DataFrame:
        # only called for attributes not set yet: the tables not read so far
        if name not in schema.TABLES or "_lazy_dir" not in self.__dict__:
            raise AttributeError(name)
        try:
            frame = _read_table(self.__dict__["_lazy_dir"], name)
        except TraceError:
            fallback = self.__dict__.pop("_lazy_fallback", None)
            if fallback is None:
                raise
            self._replace_unread(fallback())
            result: pl.DataFrame = self.__dict__[name]
            return result
        self.__dict__[name] = frame
        self.__dict__["_lazy_loaded"][name] = frame
        return frame

    def _replace_unread(self, fresh: Timeline) -> None:
        """Take every table not read yet from ``fresh`` (the input parsed again because the
        cache entry could not be read back); no table counts as the entry's any more."""
        for table in schema.TABLES:
            if table not in self.__dict__:
                self.__dict__[table] = getattr(fresh, table)
        self.__dict__["_lazy_loaded"] = {}

    def rows(self, name: str) -> int:
        """Row count of table ``name``, from the Parquet metadata while it is unread."""
        if name in self.__dict__ or name not in schema.TABLES:
            return super().rows(name)
        path = self.__dict__["_lazy_dir"] / f"{name}.parquet"
        try:
            return int(pl.scan_parquet(path).select(pl.len()).collect().item())
        except (OSError, pl.exceptions.PolarsError):
            return self.table(name).height  # read it: an unreadable table falls back


def concat(timelines: list[Timeline]) -> Timeline:
    """Concatenate timelines (e.g. one per rank) into one long timeline.

    Each input should already carry its own ``rank`` values. ``meta`` dicts are kept under
    ``meta["parts"]``.
    """
    if len(timelines) == 1:
        return timelines[0]
    out = {}
    for name in schema.TABLES:
        frames = [t.table(name) for t in timelines]
        out[name] = pl.concat(frames, how="vertical") if frames else schema.empty(name)
    return Timeline(**out, meta={"parts": [t.meta for t in timelines]})


def ingest_rows(rank: int, table: str, source: str, parsed: int,
                skipped: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Rows for the ``ingest`` accounting table: one ``parsed`` row and one ``skipped`` row
    per reason. ``parsed + sum(skipped) == input rows`` must hold for the source."""
    rows: list[dict[str, Any]] = [
        {"rank": rank, "table": table, "source": source, "outcome": "parsed", "reason": None,
         "count": parsed}
    ]
    for reason, n in sorted((skipped or {}).items()):
        if n:
            rows.append({"rank": rank, "table": table, "source": source, "outcome": "skipped",
                         "reason": reason, "count": n})
    return rows


def ingest_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Build a schema-conformant ``ingest`` frame from :func:`ingest_rows` output."""
    if not rows:
        return schema.empty("ingest")
    return schema.conform("ingest", pl.DataFrame(rows, infer_schema_length=None))
