"""``--executor`` and its options, for the commands that can run on pieces of a trace
(:mod:`traceparse.executor`): ``kernels`` and ``breakdown --gpu-only``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from traceparse.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])

EXECUTORS = ("memory", "chunks", "dask")


def executor_options(func: F) -> F:
    """Add ``--executor``, ``--chunk-rows``, ``--workers`` and ``--scheduler``."""
    func = click.option(
        "--scheduler", "scheduler", default=None, metavar="ADDRESS",
        help="--executor dask: a running Dask scheduler (its workers must be able to read "
             "TRACE at the same path) instead of a local cluster.")(func)
    func = click.option(
        "--workers", "workers", type=click.IntRange(min=1), default=4, show_default=True,
        help="--executor dask: worker processes of the local cluster (one thread each).")(func)
    func = click.option(
        "--chunk-rows", "chunk_rows", type=click.IntRange(min=1), default=1 << 18,
        show_default=True, help="--executor chunks/dask: GPU activities per piece.")(func)
    func = click.option(
        "--executor", "executor", type=click.Choice(EXECUTORS), default="memory",
        show_default=True,
        help="memory: build the whole timeline; chunks: read one nsys SQLite export a "
             "piece at a time (memory follows the piece, not the trace); dask: the pieces "
             "on Dask workers (needs the 'distributed' package). Same output on each.")(func)
    return func


def chunked_input(paths: Sequence[str], executor: str) -> str:
    """The one nsys SQLite export a chunked executor reads.

    Raises:
        UsageError: several inputs, or one that is not an nsys SQLite export.
    """
    from traceparse.loader import detect

    if len(paths) != 1:
        raise UsageError(None, f"--executor {executor} reads one nsys SQLite export "
                               f"(got {len(paths)} inputs)")
    kind = detect(paths[0])
    if kind != "nsys-sqlite":
        raise UsageError(paths[0], f"--executor {executor} reads nsys SQLite exports only "
                                   f"(this is {kind}); use --executor memory")
    return paths[0]
