""".nsys-rep input: exported with the user's nsys into the cache, or exit 2 with the command.

The end-to-end test needs the Nsight Systems CLI (``$NSYS`` or ``nsys`` on PATH;
../shared/reference/ORACLES.md) and a real report: ``$TRACEPARSE_NSYS_REP`` when set, else one
made with ``nsys profile`` (OS-runtime trace of a short Python process; no GPU needed). It
skips with the reason otherwise.
"""

from __future__ import annotations

import csv
import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse.cli import main
from traceparse.nsys.rep import export_command, find_nsys


def test_without_nsys_exit_2_with_the_export_command(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rep = tmp_path / "run1.nsys-rep"
    rep.write_bytes(b"\x00QDREP not really a report" * 10)
    monkeypatch.setenv("NSYS", str(tmp_path / "no-such-nsys"))
    res = CliRunner().invoke(main, ["--no-cache", "info", str(rep)])
    assert res.exit_code == 2
    msg = res.output.strip()
    assert len(msg.splitlines()) == 1 and "Traceback" not in msg
    assert "run1.nsys-rep" in msg
    assert "nsys export --type sqlite --force-overwrite true --output run1.sqlite" in msg


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nsys = find_nsys()
    if nsys is None:
        pytest.skip("Nsight Systems CLI not installed (set NSYS or put nsys on PATH; "
                    "see ../shared/reference/ORACLES.md)")
    given = os.environ.get("TRACEPARSE_NSYS_REP")
    if given:
        return Path(given)
    d = tmp_path_factory.mktemp("rep")
    proc = subprocess.run([nsys, "profile", "--trace=osrt", "--sample=none",
                           "--cpuctxsw=none", "-o", str(d / "probe"), sys.executable, "-c",
                           "import time; time.sleep(0.05)"],
                          capture_output=True, text=True, timeout=300, check=False)
    rep = d / "probe.nsys-rep"
    if not rep.is_file():
        last = (proc.stderr + proc.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"nsys profile made no .nsys-rep here: {last[0][:200]}")
    return rep


def test_real_report_end_to_end(real_report: Path, tmp_path: Path) -> None:
    nsys = find_nsys()
    assert nsys is not None
    # independent export with nsys itself, counted with sqlite3
    ref = tmp_path / "ref.sqlite"
    subprocess.run(export_command(real_report, ref, nsys), check=True, capture_output=True,
                   timeout=300)
    con = sqlite3.connect(f"file:{ref}?mode=ro", uri=True)
    tables = {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
              for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
              if not t.startswith("sqlite_")}
    con.close()
    cache = tmp_path / "cache"
    res = CliRunner().invoke(main, ["--cache-dir", str(cache), "info", str(real_report),
                                    "--format", "csv"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    facts = dict(r for r in csv.reader(io.StringIO(res.stdout)) if len(r) == 2)
    assert facts["file"] == real_report.name
    assert facts["format"] == "nsys-sqlite"
    assert facts["not read OSRT_API"].startswith(f"{tables['OSRT_API']} rows (")
    listed = {k.split(" ", 2)[-1] if k.startswith("not read") else k.split(" ", 1)[1]
              for k in facts if k.startswith(("input ", "not read ", "lookup "))}
    assert listed == set(tables)
    # the export is kept in the cache directory
    assert list((cache / "nsys-export").glob(f"*/{real_report.name[:-9]}.sqlite"))


def test_corrupt_report_with_nsys_exit_2(tmp_path: Path) -> None:
    if find_nsys() is None:
        pytest.skip("Nsight Systems CLI not installed (set NSYS or put nsys on PATH)")
    rep = tmp_path / "bad.nsys-rep"
    rep.write_bytes(b"not a report")
    res = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c"), "info", str(rep)])
    assert res.exit_code == 2
    assert "bad.nsys-rep: nsys export failed" in res.output
    assert not list((tmp_path / "c").glob("nsys-export/*/*.sqlite"))  # nothing half-written
