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
None. The CLI exits 2 with that line unless ``--as-one-job`` is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def disagreement(paths: Sequence[str], tls: Sequence[Timeline]) -> str | None:
    """One line naming why ``tls`` (read from ``paths``) are not one job, or None."""
    names = [Path(p).name for p in paths]
    first: dict[str, tuple[str, Any]] = {}
    for name, tl in zip(names, tls, strict=True):
        models = _models(tl)
        if models:
            if "gpu" in first and first["gpu"][1] != models:
                other, seen = first["gpu"]
                return (f"{other} and {name} are not one job: different GPUs "
                        f"({', '.join(sorted(seen))} vs {', '.join(sorted(models))}); "
                        "give --as-one-job to analyse them together anyway")
            first.setdefault("gpu", (name, models))
    drivers = [(name, d) for name, tl in zip(names, tls, strict=True)
               if (d := tl.meta.get("driver_version"))]
    for name, d in drivers[1:]:
        other, seen = drivers[0]
        if _comparable(seen, d) != _comparable(d, seen):
            return (f"{other} and {name} are not one job: different drivers ({seen} vs "
                    f"{d}); give --as-one-job to analyse them together anyway")
    owner: dict[int, str] = {}
    for name, tl in zip(names, tls, strict=True):
        for r in sorted(_claimed_ranks(tl)):
            if r in owner:
                return (f"{owner[r]} and {name} are not one job: both are rank {r}; "
                        "give --as-one-job to analyse them together anyway")
            owner[r] = name
    wins = [(name, w) for name, tl in zip(names, tls, strict=True)
            if (w := _window(tl)) is not None]
    for i, (a, wa) in enumerate(wins):
        for b, wb in wins[i + 1:]:
            if wa[1] < wb[0] or wb[1] < wa[0]:
                apart = max(wb[0] - wa[1], wa[0] - wb[1])
                return (f"{a} and {b} are not one job: their captures do not overlap in "
                        f"time ({units.duration(apart)} apart); give --as-one-job to "
                        "analyse them together anyway")
    return None
