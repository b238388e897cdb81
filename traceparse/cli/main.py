"""The click group and the one place where exceptions become exit codes.

Exit codes: 0 success; 2 bad input or usage (one line on stderr naming the file and the
problem, no traceback); 1 internal error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from traceparse import __version__
from traceparse.errors import TraceError


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TraceError as exc:
            click.echo(f"traceparse: error: {exc}", err=True)
            ctx.exit(2)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # an internal error: one line unless debugging
            if os.environ.get("TRACEPARSE_DEBUG"):
                raise
            msg = " ".join(f"{type(exc).__name__}: {exc}".split())
            click.echo(f"traceparse: internal error: {msg} (set TRACEPARSE_DEBUG=1 for a "
                       "traceback)", err=True)
            ctx.exit(1)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="traceparse")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Parse inputs again instead of reusing (or filling) the timeline cache.")
@click.option("--cache-dir", "cache_dir", type=click.Path(file_okay=False), default=None,
              envvar="TRACEPARSE_CACHE_DIR", show_envvar=True,
              help="Where parsed timelines are cached (default ~/.cache/traceparse).")
@click.pass_context
def main(ctx: click.Context, no_cache: bool, cache_dir: str | None) -> None:
    """traceparse: where the GPU time went, from nsys, ncu and PyTorch profiler traces.

    Parsed traces are cached as Parquet keyed by the input's size, mtime and content hash,
    so a second command on the same trace starts in a fraction of a second.
    """
    from traceparse.cache import Cache, default_dir

    ctx.ensure_object(dict)
    ctx.obj["cache"] = None if no_cache else Cache(Path(cache_dir) if cache_dir
                                                     else default_dir())


#: glibc ``mallopt`` parameter: the size from which ``malloc`` maps a block of its own.
_M_MMAP_THRESHOLD = -3


def keep_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at its initial 128 KiB: a block that large gets its own
    mapping, which ``free`` returns to the system. glibc otherwise raises the threshold to
    the size of each mapped block freed (up to 32 MiB), after which the per-row arrays of an
    analysis (numpy arrays, Arrow buffers of the reader) come from the heap, whose freed
    pages stay resident: on the 1M-kernel export the resident set then held ~0.3 GB more
    after each analysis than it used (docs/performance.md, "Freed memory"). True when set
    (False where the C library has no ``mallopt``, e.g. macOS or musl)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_MMAP_THRESHOLD, 128 * 1024))


def run() -> None:
    """Console-script entry point."""
    keep_mmap_threshold()
    sys.exit(main.main(prog_name="traceparse"))
