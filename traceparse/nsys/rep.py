"""``.nsys-rep`` (and older ``.qdrep``) input: converted with the user's own Nsight Systems.

A report file is NVIDIA's binary container; the documented way in is
``nsys export --type sqlite``. When an ``nsys`` binary is found (``$NSYS``, else ``nsys`` on
``PATH``) :func:`to_sqlite` runs it once per report version into the cache directory
(``<cache dir>/nsys-export/<hash of path, size, mtime>/<stem>.sqlite``) and returns the
export, which :mod:`traceparse.nsys` then reads. Without one, the error says exactly which
command to run. An nsys older than the capture refuses the report; its message is passed on.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from traceparse.errors import TraceError

#: File name endings of Nsight Systems reports.
SUFFIXES = (".nsys-rep", ".qdrep")
#: Seconds an export may take before it is abandoned.
EXPORT_TIMEOUT_S = 3600


def is_report(path: str | os.PathLike[str]) -> bool:
    """True for a ``.nsys-rep`` / ``.qdrep`` file name."""
    return str(path).lower().endswith(SUFFIXES)


def find_nsys() -> str | None:
    """The nsys binary: ``$NSYS`` when set (must exist), else ``nsys`` on ``PATH``."""
    env = os.environ.get("NSYS")
    if env:
        return env if Path(env).is_file() else None
    return shutil.which("nsys")


def export_command(report: Path, out: Path, nsys: str = "nsys") -> list[str]:
    """The ``nsys export`` command line converting ``report`` to SQLite at ``out``.

    Example:
        >>> export_command(Path("r.nsys-rep"), Path("r.sqlite"))
        ['nsys', 'export', '--type', 'sqlite', '--force-overwrite', 'true', '--output', \
'r.sqlite', 'r.nsys-rep']
    """
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output",
            str(out), str(report)]


def _stem(report: Path) -> str:
    name = report.name
    for suf in SUFFIXES:
        if name.lower().endswith(suf):
            return name[: -len(suf)] or "report"
    return report.stem


def to_sqlite(report: str | os.PathLike[str], cache_dir: Path) -> Path:
    """Export ``report`` to SQLite under ``cache_dir`` (reused while the report is unchanged).

    Raises:
        TraceError: no nsys binary (the message gives the export command to run), or the
            export failed (nsys's last error line).
    """
    rep = Path(report)
    st = rep.stat()
    key = f"{rep.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    out_dir = cache_dir / "nsys-export" / hashlib.blake2b(key, digest_size=16).hexdigest()
    out = out_dir / f"{_stem(rep)}.sqlite"
    if out.is_file():
        return out
    nsys = find_nsys()
    if nsys is None:
        cmd = shlex.join(export_command(rep, Path(f"{_stem(rep)}.sqlite")))
        raise TraceError(rep, "an Nsight Systems report; no nsys found (PATH or NSYS) to "
                              f"convert it: run `{cmd}` and pass the .sqlite")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{out.name}.{os.getpid()}.tmp.sqlite"
    try:
        proc = subprocess.run(export_command(rep, tmp, nsys), capture_output=True, text=True,
                              timeout=EXPORT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        tmp.unlink(missing_ok=True)
        raise TraceError(rep, f"nsys export did not run: {exc}") from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        last = lines[-1][:200] if lines else "no output"
        raise TraceError(rep, f"nsys export failed (exit {proc.returncode}): {last}")
    tmp.replace(out)
    return out
