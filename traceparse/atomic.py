"""Write output files atomically: a temporary file beside the target, renamed on success,
so a failed command never leaves a partial output behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from traceparse.errors import TraceError


def _umask() -> int:
    """The process umask (read by setting it and putting it back; there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _check_parent(path: Path) -> None:
    if not path.parent.exists():
        raise TraceError(path, f"output directory {path.parent} does not exist")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` if the block succeeds.

    With ``directory=True`` the temporary path is a fresh directory, and an existing
    directory at ``path`` is replaced. The result gets the mode a plain ``open()`` or
    ``mkdir`` would give it (0666 or 0777 less the umask), not the 0600/0700 of a
    temporary file.
    """
    target = Path(path)
    _check_parent(target)
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, (0o777 if tmp.is_dir() else 0o666) & ~_umask())
        if directory and target.is_dir():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
