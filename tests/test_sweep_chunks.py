"""The attribution sweep in time-ordered chunks (issue 28): :func:`sweep.attribute` cuts
the boundaries into key ranges of about ``chunk`` boundaries and carries the running count
of every label and the open part run across each edge. Whatever the chunk size, the frames
must be those of the one-pass sweep (:func:`sweep.priority_segments`, the path used before
chunking, still taken when everything fits one chunk) and of the general
``intervals.segments`` sweep (``tests/test_default_segments.py``'s check, rerun here with
small chunks so every real trace crosses tens of edges)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceparse
from tests import test_default_segments as ds
from tests.conftest import ids, shared_files
from traceparse.analyses import attribution, sweep
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

PARTS = ("a_ns", "b_ns", "idle_ns")


def _set(gid: list[int], start: list[int], end: list[int]
         ) -> tuple[np.ndarray, pl.Series, pl.Series]:
    return (np.array(gid, np.int64), pl.Series(start, dtype=pl.Int64),
            pl.Series(end, dtype=pl.Int64))


def _example() -> list[tuple[np.ndarray, pl.Series, pl.Series]]:
    # group 0: window [0, 100), a [10, 30) and [30, 50), b [20, 60) and [90, 95)
    # group 1: window [0, 40), a [0, 10), b [5, 40)
    return [_set([0, 1], [0, 0], [100, 40]),
            _set([0, 0, 1], [10, 30, 0], [30, 50, 10]),
            _set([0, 0, 1], [20, 90, 5], [60, 95, 40])]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 1000])
def test_chunked_sweep_by_hand(chunk: int) -> None:
    keys = pl.DataFrame({"g": ["x", "y"]})
    out = sweep.attribute(keys, _example(), PARTS, ("b",), chunk=chunk)
    # group x: a covers [10, 50) = 40; b alone [50, 60) + [90, 95) = 15; idle 100-55 = 45
    # (overlap a&b [20, 50) = 30); group y: a [0, 10) = 10, b alone [10, 40) = 30
    assert out["sums"].to_dicts() == [
        {"g": "x", "a_ns": 40, "b_ns": 15, "idle_ns": 45, "overlapped_comm_ns": 30},
        {"g": "y", "a_ns": 10, "b_ns": 30, "idle_ns": 0, "overlapped_comm_ns": 5}]
    # parts: merged runs per group and part name, a's [10, 30) and [30, 50) as one
    assert out["parts"].rows() == [
        ("x", "a_ns", 10, 50), ("x", "b_ns", 50, 60), ("x", "b_ns", 90, 95),
        ("x", "idle_ns", 0, 10), ("x", "idle_ns", 60, 90), ("x", "idle_ns", 95, 100),
        ("y", "a_ns", 0, 10), ("y", "b_ns", 10, 40)]
    # free: segments a does not cover, with b's count
    assert out["free"].rows() == [
        ("x", 0, 10, 0), ("x", 50, 60, 1), ("x", 60, 90, 0), ("x", 90, 95, 1),
        ("x", 95, 100, 0), ("y", 10, 40, 1)]


def test_chunks_cover_the_one_pass_sweep() -> None:
    sets = _example()
    whole = sweep.priority_segments(sets)
    for chunk in (1, 2, 4, 7):
        pieces = list(sweep.chunk_segments(sets, chunk))
        assert len(pieces) > 1
        for k in ("gid", "start", "end"):
            np.testing.assert_array_equal(np.concatenate([p[k] for p in pieces]), whole[k])
        np.testing.assert_array_equal(np.concatenate([p["count"] for p in pieces], axis=1),
                                      whole["count"])


def _fresh(tl: Timeline) -> Timeline:
    return Timeline(**{k: getattr(tl, k) for k in Timeline.__dataclass_fields__})


def _compare(tl: Timeline, monkeypatch: pytest.MonkeyPatch) -> None:
    # about 4 boundaries per activity: ~8 and ~40 chunks on every trace
    n = tl.gpu.height
    for group in ds.GROUPS:
        one = attribution._default_segments(_fresh(tl), list(group))
        for chunk in (max(16, n // 2), max(4, n // 10)):
            monkeypatch.setattr(sweep, "CHUNK_BOUNDARIES", chunk)
            got = attribution._default_segments(_fresh(tl), list(group))
            monkeypatch.setattr(sweep, "CHUNK_BOUNDARIES", 1 << 40)
            for k in one:
                assert_frame_equal(got[k], one[k])
    monkeypatch.setattr(sweep, "CHUNK_BOUNDARIES", max(8, n // 4))
    ds._check(tl)  # the independent general sweep, in ~16 chunks


@pytest.mark.parametrize("name", sorted(samplegen.SCENARIOS))
def test_chunked_equals_one_pass_on_scenarios(name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(samplegen.scenario_timeline(name), monkeypatch)


SHARED = shared_files("nsys", "*.sqlite") + shared_files("torch", "*.json*")


@pytest.mark.shared
@pytest.mark.parametrize("path", SHARED, ids=ids(SHARED))
def test_chunked_equals_one_pass_on_shared_traces(path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(traceparse.load(path), monkeypatch)
