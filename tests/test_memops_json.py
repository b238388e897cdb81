"""``memops --format json``: time and size reports in one JSON document, checked by hand and
against a real trace's own memcpy/memset events (read with json, not the parser)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import ids, shared_files
from traceparse.cli.main import main

NCCL = shared_files("torch", "hta__nccl_data.json.gz")


def _memops(*args: str) -> Any:
    res = CliRunner().invoke(main, ["--no-cache", "memops", *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)  # one document (it was two arrays, not JSON)


def _copy(name: str, cat: str, ts: float, dur: float, nbytes: int) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": int(ts), "bytes": nbytes}}


def test_both_reports_are_one_json_document(tmp_path: Path) -> None:
    # HtoD copies of 10 us / 1,000,000 B and 30 us / 3,000,000 B; a memset of 5 us / 500 B
    h2d = "Memcpy HtoD (Pageable -> Device)"
    doc = {"traceEvents": [_copy(h2d, "gpu_memcpy", 100, 10, 1_000_000),
                           _copy(h2d, "gpu_memcpy", 200, 30, 3_000_000),
                           _copy("Memset (Device)", "gpu_memset", 300, 5, 500)]}
    p = tmp_path / "m.pt.trace.json"
    p.write_text(json.dumps(doc))
    out = _memops(str(p))
    assert sorted(out) == ["size", "time"]
    time = {r["Operation"]: r for r in out["time"]}
    # HtoD: 10 + 30 = 40 us = 40,000 ns over 2 copies; memset 5,000 ns
    assert (time[h2d]["Total Time (ns)"], time[h2d]["Count"]) == (40_000, 2)
    assert time["Memset (Device)"]["Total Time (ns)"] == 5_000
    size = {r["Operation"]: r for r in out["size"]}
    # 1 MB + 3 MB = 4 MB (10^6 bytes); the memset 500 B = 0.0005 MB, printed as nsys
    # does to 3 decimals rounded half up: 0.001
    assert size[h2d]["Total (MB)"] == pytest.approx(4.0)
    assert size["Memset (Device)"]["Total (MB)"] == pytest.approx(0.001)
    # each part equals the single report
    assert out["time"] == _memops(str(p), "--report", "time")
    assert out["size"] == _memops(str(p), "--report", "size")


@pytest.mark.shared
@pytest.mark.parametrize("path", NCCL, ids=ids(NCCL))
def test_real_copies_match_the_file(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    want: dict[str, list[float]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("gpu_memcpy", "gpu_memset"):
            w = want.setdefault(e["name"], [0, 0.0, 0])
            w[0] += 1
            w[1] += e["dur"] * 1000
            w[2] += e["args"]["bytes"]
    out = _memops(str(path))
    assert {r["Operation"] for r in out["time"]} == set(want)
    for r in out["time"]:
        n, dur, _ = want[r["Operation"]]
        assert r["Count"] == n and abs(r["Total Time (ns)"] - dur) <= n
    size = {r["Operation"]: r for r in out["size"]}
    assert set(size) == set(want)
    for name, (n, _, nbytes) in want.items():
        assert size[name]["Count"] == n
        assert size[name]["Total (MB)"] == pytest.approx(nbytes / 1e6, abs=5e-4)
