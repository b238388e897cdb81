"""On every shared real trace, ``ingest`` accounting adds up to an independent count of the
source rows/events: parsed + skipped == input, per source.

Independent counts:

* nsys: ``SELECT COUNT(*)`` of each source table the reader reads (sqlite3, not the reader);
* torch: the number of elements of ``traceEvents`` (or of the bare list), from the stdlib
  ``json`` module; per category, the events with that ``cat``;
* ncu: the data rows after the header (``csv`` module), blank lines and the units row
  excluded.

Also: ``traceparse info`` prints ``input X  N = P parsed + S skipped`` with the same numbers.
"""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import ids, shared_files

from traceparse.cli import main
from traceparse.loader import load

NSYS = shared_files("nsys", "*.sqlite")
TORCH = shared_files("torch", "*.json*")
NCU = shared_files("ncu", "*.csv")


def _totals(path: Path) -> dict[str, int]:
    tl = load(path)
    return {str(k): int(v) for k, v in
            tl.ingest.group_by("source").agg(pl.col("count").sum()).iter_rows()}


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_nsys_accounting(path: Path) -> None:
    got = _totals(path)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS"):
        if t in tables:
            n = con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            assert got.get(t, 0) == n, (t, got.get(t), n)
    # every table of the export has an ingest row, with its own row count
    tables = {t for t in tables if not t.startswith("sqlite_")}
    assert set(got) == tables
    for t in sorted(tables):
        assert got[t] == con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0], t
    con.close()


def _events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc if isinstance(doc, list) else doc["traceEvents"]


@pytest.mark.shared
@pytest.mark.parametrize("path", TORCH, ids=ids(TORCH))
def test_torch_accounting(path: Path) -> None:
    events = _events(path)
    got = _totals(path)
    assert sum(got.values()) == len(events)
    # every category with a name is one source; its count is the events with that cat
    cats = Counter(e.get("cat") for e in events if isinstance(e.get("cat"), str))
    for cat, n in cats.items():
        assert got.get(cat) == n, (cat, got.get(cat), n)


def _ncu_rows(path: Path) -> int:
    text = path.read_bytes().decode("utf-8-sig", errors="replace")
    rows = list(csv.reader(text.splitlines()))
    head = next(i for i, r in enumerate(rows) if r and r[0].strip() == "ID")
    data = [r for r in rows[head + 1:] if any(c.strip() for c in r)]
    if data and data[0][0].strip() == "":  # units row of a raw page
        data = data[1:]
    return len(data)


@pytest.mark.shared
@pytest.mark.parametrize("path", NCU, ids=ids(NCU))
def test_ncu_accounting(path: Path) -> None:
    got = _totals(path)
    assert sum(got.values()) == _ncu_rows(path), got


@pytest.mark.shared
@pytest.mark.parametrize("path", [*NSYS[:3], *TORCH[:2], *NCU[:2]],
                         ids=ids([*NSYS[:3], *TORCH[:2], *NCU[:2]]))
def test_info_prints_the_accounting(path: Path) -> None:
    tl = load(path)
    res = CliRunner().invoke(main, ["info", str(path), "--format", "csv"])
    assert res.exit_code == 0, res.output
    lines = [r for r in csv.reader(res.output.splitlines()) if r and r[0].startswith("input ")]
    read = tl.ingest.filter(pl.col("outcome").cast(pl.String).is_in(["parsed", "skipped"]))
    totals = {str(k): int(v) for k, v in
              read.group_by("source").agg(pl.col("count").sum()).iter_rows()}
    assert len(lines) == len(totals)
    for item, value in lines:
        source = item.removeprefix("input ")
        n = int(value.split(" = ")[0])
        assert n == totals[source]
    assert sum(int(v.split(" = ")[0]) for _, v in lines) == int(read["count"].sum())
    # tables not read (or only looked up) get one line each with their row count and why
    other = [r for r in csv.reader(res.output.splitlines())
             if r and r[0].startswith(("not read ", "lookup "))]
    unread = tl.ingest.filter(pl.col("outcome").cast(pl.String).is_in(["lookup", "not read"]))
    assert len(other) == unread.height
    for item, value in other:
        assert value.endswith(")") and " rows (" in value, (item, value)
