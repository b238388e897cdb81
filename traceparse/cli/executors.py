"""``--executor`` and its options, for the commands that can run on pieces of a trace
(:mod:`traceparse.executor`): ``kernels``, ``breakdown`` (each device's own window; also
``--gpu-only``), ``gaps``, ``launches --report graphs``, ``summary``
(:mod:`traceparse.summary_chunks`) and ``fixes`` (:mod:`traceparse.payload_chunks`); and
``whatif``
(:mod:`traceparse.replay_chunks`, in this process only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from traceparse.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

EXECUTORS = ("memory", "chunks", "dask")


def _check(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    kind, _, address = value.partition("=")
    if kind not in EXECUTORS or (address and kind != "dask") or value.endswith("="):
        raise click.BadParameter(f"must be memory, chunks, dask or dask=ADDRESS, got {value!r}")
    return value


def split_executor(value: str) -> tuple[str, str | None]:
    """``"dask=tcp://h:8786"`` -> ``("dask", "tcp://h:8786")``; ``"chunks"`` -> (chunks,
    None)."""
    kind, _, address = value.partition("=")
    return kind, address or None


def executor_options(func: F) -> F:
    """Add ``--executor`` (spelled as ``batch``'s: ``dask=ADDRESS`` names a running
    scheduler), ``--chunk-rows`` and ``-j/--workers``."""
    func = click.option(
        "-j", "--workers", "workers", type=click.IntRange(1, 4096), default=4,
        show_default=True,
        help="--executor dask: worker processes of the local cluster (one thread each).")(func)
    func = click.option(
        "--chunk-rows", "chunk_rows", type=click.IntRange(min=1), default=1 << 18,
        show_default=True, help="--executor chunks/dask: GPU activities per piece.")(func)
    func = click.option(
        "--executor", "executor", default="memory", show_default=True, callback=_check,
        help="memory: build the whole timeline; chunks: read one nsys SQLite export a "
             "piece at a time (memory follows the piece, not the trace); dask: the pieces "
             "on a local Dask cluster, dask=ADDRESS on a running one (its workers must "
             "read TRACE at the same path; needs traceparse[dask]). Same output on "
             "each.")(func)
    return func


def chunks_options(func: F) -> F:
    """``--executor memory|chunks`` and ``--chunk-rows``, for a command that runs on the
    pieces of one export in this process only (``whatif``: the replay is sequential in
    time, so there is nothing for Dask workers to share)."""
    func = click.option(
        "--chunk-rows", "chunk_rows", type=click.IntRange(min=1), default=1 << 18,
        show_default=True, help="--executor chunks: GPU activities per piece.")(func)
    func = click.option(
        "--executor", "executor", type=click.Choice(["memory", "chunks"]), default="memory",
        show_default=True,
        help="memory: build the whole timeline; chunks: read one nsys SQLite export a piece "
             "at a time in time order (memory follows the piece, not the trace). Same "
             "output on each.")(func)
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


def computed_in_memory(path: str, what: str, why: str) -> None:
    """The one stderr line of a chunked command that falls back to the whole timeline
    (``what``: e.g. ``"gaps computed"``, ``"whatif replayed"``): the output is then the
    memory path's, never a chunked guess."""
    click.echo(f"traceparse: {path}: {what} in memory, not in chunks: {why}", err=True)


def run_chunked(compute: Callable[..., T | None], traces: Sequence[str], *, executor: str,
                chunk_rows: int, workers: int, word: str,
                falls_back: type[Exception] | tuple[type[Exception], ...],
                refused: str | None = None, sample_default: bool = False,
                **options: Any) -> T | None:
    """A command on a chunked executor: ``compute(path, chunk_rows=, executor=, workers=,
    scheduler=, **options)`` on the one nsys export of ``traces`` (with none, the bundled
    sample when ``sample_default``). None when the memory path must compute it:
    ``compute`` returned None (no busy GPU activity), or raised one of ``falls_back`` (a
    part that cannot be computed exactly in pieces), and then one stderr line says
    ``WORD computed in memory, not in chunks: WHY`` (:func:`computed_in_memory`).

    Raises:
        UsageError: ``refused``, an option the chunked executor does not take (worded
            after ``--executor KIND``), checked before the inputs; the inputs, as
            :func:`~traceparse.cli.inputs.resolve` and :func:`chunked_input`.
    """
    from traceparse.cli.inputs import resolve

    kind, address = split_executor(executor)
    if refused is not None:
        raise UsageError(None, f"--executor {kind} {refused}")
    path = chunked_input(resolve(traces, sample_default=sample_default), kind)
    try:
        return compute(path, chunk_rows=chunk_rows, executor=kind, workers=workers,
                       scheduler=address, **options)
    except falls_back as exc:  # exact in memory; that part is not in pieces
        computed_in_memory(path, f"{word} computed", str(exc))
    return None
