"""Generated nsys exports shared by the chunked-executor tests (their numbers are worked
out by hand in the tests that use them).

- :func:`pieces_export`: kernels and a pinned copy on stream 7 of one device, each
  launched by its own call (``summary`` and ``fixes`` in pieces), with room for more.
- :func:`launched_export`: given activities, each launched by its own call 500 ns before
  it starts, 100 ns long (window and lane edges).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Scenario

LAUNCH = "cudaLaunchKernel"


def pieces_calls() -> tuple[Call, ...]:
    """Device 0, stream 7: ``k1`` [5, 15) us (call [0, 4)), ``k2`` [40, 50) (call [30,
    38)), a 4 KiB pinned-to-device copy [60, 70) (call [52, 55)) and ``k1`` [75, 95)
    (call [72, 73))."""
    return (
        Call(LAUNCH, 0, 4 * US, Activity("kernel", 7, 5 * US, 10 * US, "k1")),
        Call(LAUNCH, 30 * US, 38 * US, Activity("kernel", 7, 40 * US, 10 * US, "k2")),
        Call("cudaMemcpyAsync", 52 * US, 55 * US,
             Activity("memcpy", 7, 60 * US, 10 * US, bytes=4096, copy_kind="HtoD",
                      src_kind="Pinned", dst_kind="Device")),
        Call(LAUNCH, 72 * US, 73 * US, Activity("kernel", 7, 75 * US, 20 * US, "k1")),
    )


def pieces_export(path: Path, name: str, description: str, more: Sequence[Call] = ()
                  ) -> Path:
    """:func:`pieces_calls` and then ``more`` written to ``path`` as scenario ``name``."""
    calls = (*pieces_calls(), *more)
    return samplegen_sqlite.write(Scenario(name, description, calls), path)


def launched_export(path: Path, acts: Sequence[Activity], description: str) -> Path:
    """``acts`` written to ``path`` (scenario ``edges``), each launched by its own call
    (a kernel's ``cudaLaunchKernel_v7000``, a copy's ``cudaMemcpyAsync_v3020``) from 500
    to 400 ns before it starts."""
    calls = tuple(Call("cudaLaunchKernel_v7000" if a.kind == "kernel"
                       else "cudaMemcpyAsync_v3020", a.start_ns - 500, a.start_ns - 400, a)
                  for a in acts)
    return samplegen_sqlite.write(Scenario("edges", description, calls), path)
