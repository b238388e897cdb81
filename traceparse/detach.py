"""Partials that keep only their own bytes (docs/performance.md, "Memory in pieces").

A polars string column is a view array: a ``filter``, ``unique``, ``group_by`` key or
gather of it copies the 16-byte views and keeps **every** data buffer of its source
alive. A 24-row partial whose names were grouped from a 65,536-row window therefore
holds that window's whole name buffer (about 10 MiB at x17), and
:meth:`polars.DataFrame.estimated_size` does not show it; ``rechunk``, ``clone`` and
``shrink_to_fit`` keep the buffers. :func:`detach` rewrites such columns through an
uncompressed Arrow IPC buffer, which writes only the bytes the views reach, so a kept
partial's memory is its own size. The values, order, dtypes and nulls are unchanged.
"""

from __future__ import annotations

import io
from typing import Any, TypeVar

import polars as pl

T = TypeVar("T")


def has_views(dtype: pl.DataType) -> bool:
    """Whether columns of ``dtype`` hold view buffers (strings or binary, at any depth)."""
    if isinstance(dtype, (pl.String, pl.Binary)):
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return has_views(dtype.inner)  # type: ignore[arg-type]
    if isinstance(dtype, pl.Struct):
        return any(has_views(f.dtype) for f in dtype.fields)  # type: ignore[arg-type]
    return False


def detach_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its string and binary columns in buffers of their own (module
    docstring); the same frame when it has none or no rows."""
    cols = [c for c, t in frame.schema.items() if has_views(t)]
    if not cols or frame.height == 0:
        return frame
    buf = io.BytesIO()
    frame.select(cols).write_ipc(buf, compression="uncompressed")
    buf.seek(0)
    return frame.with_columns(pl.read_ipc(buf).get_columns())


def detach(obj: T) -> T:
    """``obj`` with every data frame in it detached (:func:`detach_frame`): frames,
    tuples (named tuples too), lists and dicts are walked; anything else is returned
    as it is."""
    out: Any = obj
    if isinstance(obj, pl.DataFrame):
        out = detach_frame(obj)
    elif isinstance(obj, tuple):
        items = [detach(x) for x in obj]
        out = type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    elif isinstance(obj, list):
        out = [detach(x) for x in obj]
    elif isinstance(obj, dict):
        out = {k: detach(v) for k, v in obj.items()}
    return out  # type: ignore[no-any-return]
