"""Do several inputs belong to one job? (docs/cli.md, "Inputs that belong together").

Several inputs given to one command are analysed as the ranks of one job. They are one job
only when they agree:

* **same GPU model**: every input that names its GPUs names the same set of models;
* **same driver**: every input that names its GPU driver (nsys ``TARGET_INFO_SYSTEM_ENV``
  ``CudaDriverVersion``/``NvDriverVersion``; Kineto ``cuda_driver_version`` /
  ``hip_driver_version``) names the same one: the ranks of one job run one software stack.
  Inputs that do not name it are not compared; an nsys export names the CUDA version and
  the kernel-mode driver, a Kineto trace only the CUDA version, so between the two only the
  CUDA version is compared;
* **ranks not repeated**: no rank is claimed by two inputs from the trace itself
  (Kineto ``distributedInfo``, MPI rank thread names); ranks that are only the readers'
  default or file order are renumbered by :func:`traceparse.reports.payload.combine` and
  do not count;
* **overlapping wall-clock windows**: inputs whose clock is absolute (Kineto traces, whose
  times are epoch-based, and nsys exports with their session start time) must overlap in
  time: ranks of one job run at the same time. Inputs without an absolute clock are not
  compared on time.

:func:`disagreement` returns one line naming the first disagreement (and the two files), or
None; :func:`rank_disagreement` applies the same rules to the files of one directory of
per-rank Kineto traces (a directory of unrelated runs is not one job either). The CLI exits
2 with that line unless ``--as-one-job`` is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceparse import units
from traceparse.timeline import Timeline

#: ``sources.rank_source`` values that are the readers' choice, not the trace's claim.
UNCLAIMED = ("default", "file order", "process order", "file name")


def _models(tl: Timeline) -> frozenset[str]:
    names = tl.devices["name"].drop_nulls().cast(str).to_list() if tl.devices.height else []
    return frozenset(n for n in names if n)


def _claimed_ranks(tl: Timeline) -> set[int]:
    s = tl.sources
    if s.height == 0:
        return set()
    return {int(r["rank"]) for r in s.iter_rows(named=True)
            if r["rank"] is not None and r.get("rank_source") not in UNCLAIMED}


def _window(tl: Timeline) -> tuple[int, int] | None:
    """The input's window on the UTC epoch clock, or None when its clock is relative."""
    fmt = tl.meta.get("format")
    span = tl.span_ns()
    if not span:
        return None
    if fmt == "kineto-json" or (tl.sources.height
                                and set(tl.sources["format"].cast(str)) == {"kineto-json"}):
        return int(span[0]), int(span[1])
    base: Any = tl.meta.get("session_start_utc_ns")
    if fmt == "nsys-sqlite" and base is not None:
        return int(base) + int(span[0]), int(base) + int(span[1])
    return None


def _comparable(driver: str, other: str) -> str:
    """What of ``driver`` can be compared with ``other``: the whole description when both
    name the kernel-mode driver (two nsys exports), else the CUDA version alone
    (``CUDA 12.8 (NVIDIA 570.86.15)`` against a Kineto trace's ``CUDA 12.8``)."""
    return driver if " (" in driver and " (" in other else driver.split(" (")[0]


@dataclass(frozen=True)
class Facts:
    """What one input says about the job it belongs to."""

    name: str
    models: frozenset[str]
    driver: str | None
    claimed: frozenset[int]
    window: tuple[int, int] | None


def facts(path: str, tl: Timeline) -> Facts:
    """The :class:`Facts` of one input read from ``path``."""
    return Facts(Path(path).name, _models(tl), tl.meta.get("driver_version") or None,
                 frozenset(_claimed_ranks(tl)), _window(tl))


def disagreement(paths: Sequence[str], tls: Sequence[Timeline]) -> str | None:
    """One line naming why ``tls`` (read from ``paths``) are not one job, or None."""
    return first_disagreement([facts(p, tl) for p, tl in zip(paths, tls, strict=True)])


def rank_disagreement(tl: Timeline) -> str | None:
    """For a directory of per-rank Kineto files read as one timeline
    (:func:`traceparse.kineto.ranks.read_dir`): one line naming why its files are not the
    ranks of one job (the same rules as for several inputs), or None. Ranks claimed twice
    were already refused by the reader."""
    files, parts = tl.meta.get("files"), tl.meta.get("parts")
    ranks = tl.meta.get("ranks")
    if not files or not parts or not ranks or len(files) < 2:
        return None
    spans = _rank_spans(tl)
    dev = tl.devices
    out = []
    for name, rank, meta in zip(files, ranks, parts, strict=True):
        names = (dev.filter(pl.col("rank") == rank)["name"].drop_nulls().cast(pl.String)
                 .to_list() if dev.height else [])
        out.append(Facts(name, frozenset(n for n in names if n),
                         meta.get("driver_version") or None, frozenset(), spans.get(rank)))
    return first_disagreement(out, note=" (files of one directory, read as its ranks)")


def _rank_spans(tl: Timeline) -> dict[int, tuple[int, int]]:
    """Each rank's (first event start, last event end): its file's span as the reader
    recorded it (``sources``), else from its rows (a group-by over the tables costs ~40 MB
    more peak on the 8-rank DLRM x20 set, so it is only the fallback)."""
    s = tl.sources
    if s.height and s.select(pl.col("start_ns", "end_ns").is_not_null().all()).row(0) \
            == (True, True):
        return {int(r): (int(a), int(b)) for r, a, b in
                s.select("rank", "start_ns", "end_ns").iter_rows()}
    spans: dict[int, tuple[int, int]] = {}
    for frame in (tl.gpu, tl.api, tl.ranges):
        if not frame.height:
            continue
        agg = frame.group_by("rank").agg(
            pl.col("start_ns").min().alias("a"),
            pl.max_horizontal("start_ns", "end_ns").max().alias("b"))
        for r, a, b in agg.iter_rows():
            lo, hi = spans.get(int(r), (int(a), int(b)))
            spans[int(r)] = (min(lo, int(a)), max(hi, int(b)))
    return spans


def first_disagreement(inputs: Sequence[Facts], *, note: str = "") -> str | None:
    """One line naming the first disagreement among ``inputs`` (see the module docstring),
    or None; ``note`` goes after the disagreement, before the hint."""
    anyway = f"{note}; give --as-one-job to analyse them together anyway"
    seen_gpu = next((f for f in inputs if f.models), None)
    for f in inputs:
        if f.models and seen_gpu is not None and f.models != seen_gpu.models:
            return (f"{seen_gpu.name} and {f.name} are not one job: different GPUs "
                    f"({', '.join(sorted(seen_gpu.models))} vs {', '.join(sorted(f.models))})"
                    f"{anyway}")
    drivers = [f for f in inputs if f.driver]
    for f in drivers[1:]:
        first, d0, d1 = drivers[0], drivers[0].driver or "", f.driver or ""
        if _comparable(d0, d1) != _comparable(d1, d0):
            return (f"{first.name} and {f.name} are not one job: different drivers ({d0} vs "
                    f"{d1}){anyway}")
    owner: dict[int, str] = {}
    for f in inputs:
        for r in sorted(f.claimed):
            if r in owner:
                return f"{owner[r]} and {f.name} are not one job: both are rank {r}{anyway}"
            owner[r] = f.name
    wins = [f for f in inputs if f.window is not None]
    for i, a in enumerate(wins):
        for b in wins[i + 1:]:
            (a0, a1), (b0, b1) = a.window or (0, 0), b.window or (0, 0)
            if a1 < b0 or b1 < a0:
                apart = max(b0 - a1, a0 - b1)
                return (f"{a.name} and {b.name} are not one job: their captures do not "
                        f"overlap in time ({units.duration(apart)} apart){anyway}")
    return None
