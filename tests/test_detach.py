"""Kept partials hold only their own bytes (traceparse/detach.py; docs/performance.md,
"Memory in pieces").

A string column grouped, filtered or gathered from a window's rows keeps the window's
whole string buffer; :func:`estimated_size` does not show it, the Arrow buffers do. The
partials the chunked executor keeps between windows (pass 1's until folded, pass 2's
until composed) are checked here by their Arrow buffers on a generated export of long
kernel names cut into many windows: none holds more than about its own strings, so the
memory they keep does not grow with the window's rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from traceparse import payload_chunks as pc
from traceparse import summary_chunks as sc
from traceparse.detach import detach, detach_frame, has_views
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Scenario

#: Four kernel names of 400 bytes: every view points into a data buffer (over 12 bytes).
NAMES = [f"{c * 400}_kernel" for c in "abcd"]
KERNELS = 400
ROWS = 40  # GPU rows per window: ten windows


def held(frame: pl.DataFrame) -> int:
    """Bytes of the Arrow buffers behind ``frame``'s string and binary columns."""
    out = 0
    for name, dtype in frame.schema.items():
        if not has_views(dtype):
            continue
        arr = frame[name].to_arrow(compat_level=pl.CompatLevel.newest())
        for chunk in getattr(arr, "chunks", [arr]):
            out += sum(b.size for b in chunk.buffers() if b is not None)
    return out


def own(frame: pl.DataFrame) -> int:
    """Bytes its string and binary columns need: their values and 16-byte views."""
    return sum(int(frame[c].cast(pl.Binary).bin.size().sum() or 0) + 16 * frame.height
               for c, t in frame.schema.items() if has_views(t))


def frames(obj: Any) -> Iterator[pl.DataFrame]:
    if isinstance(obj, pl.DataFrame):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from frames(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from frames(x)


def _assert_own(obj: Any) -> int:
    n = 0
    for f in frames(obj):
        # the IPC reader's buffers are padded to 64 bytes per buffer
        assert held(f) <= 2 * own(f) + 4096, (f.columns, held(f), own(f))
        n += 1
    return n


def test_detach_frame_keeps_values_not_buffers() -> None:
    rows = pl.DataFrame({"name": pl.Series([NAMES[i % 4] for i in range(5000)]),
                         "v": range(5000)}).with_columns(pl.col("name").cast(pl.Categorical))
    small = rows.group_by(pl.col("name").cast(pl.String)).agg(pl.len()).sort("name")
    assert held(small) > 1_000_000  # the names of all 5,000 rows
    out = detach_frame(small)
    assert out.equals(small) and out.schema == small.schema
    assert held(out) <= 2 * own(out) + 4096
    nested = pl.DataFrame({"k": [1, 2], "l": [["x" * 50], None],
                           "s": [{"a": "y" * 40}, {"a": None}]})
    assert detach(nested).equals(nested)
    empty = small.clear()
    assert detach_frame(empty) is empty
    part = (small, [small], {"a": small}, 3)
    got = detach(part)
    assert type(got) is tuple and got[3] == 3 and got[0].equals(small)


def _export(path: Path) -> Path:
    calls = tuple(Call("cudaLaunchKernel", i * 20 * US, i * 20 * US + 2 * US,
                       Activity("kernel", 7, i * 20 * US + 5 * US, 10 * US, NAMES[i % 4]))
                  for i in range(KERNELS))
    samplegen_sqlite.write(Scenario("long_names", "long kernel names", calls), path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET smCount = 0, name = 'Test GPU'")
    return path


@pytest.mark.parametrize("what", ["summary", "fixes"])
def test_kept_partials_hold_their_own_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            what: str) -> None:
    path = str(_export(tmp_path / "names.sqlite"))
    seen = {"pass1": 0, "pass2": 0}
    mod = pc if what == "fixes" else sc
    merge1, compose = mod.merge_pass1, sc.compose

    def checked_merge(parts: Any, min_ns: int) -> Any:
        seen["pass1"] += _assert_own(parts)
        return merge1(parts, min_ns)

    def checked_compose(*args: Any, **kw: Any) -> Any:
        seen["pass2"] += _assert_own(args[7])  # the windows' span parts
        return compose(*args, **kw)

    monkeypatch.setattr(mod, "merge_pass1", checked_merge)
    monkeypatch.setattr(sc, "compose", checked_compose)
    if what == "fixes":
        got = pc.payload(path, chunk_rows=ROWS)
        assert got is not None and got["kernels"]["instances"] == KERNELS
    else:
        got = sc.summary(path, top=10, min_gap_ns=10_000, chunk_rows=ROWS)
        assert got is not None
        assert int(got["sections"]["top_kernels"]["instances"].sum()) == KERNELS
    assert seen["pass1"] > 10 * 10 and seen["pass2"] > 10
