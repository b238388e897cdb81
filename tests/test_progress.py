"""The stderr progress line: silent unless stderr is a terminal."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from traceparse.progress import Progress, enabled


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_tty() -> None:
    stream = io.StringIO()
    with Progress("reading x", total=3, stream=stream, delay=0, interval=0.01) as bar:
        bar.advance(2)
        time.sleep(0.05)
    assert stream.getvalue() == ""


def test_draws_and_erases_on_a_tty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEPARSE_PROGRESS", raising=False)
    stream = _Tty()
    with Progress("batch", total=4, unit="traces", stream=stream, delay=0,
                  interval=0.01) as bar:
        bar.advance(2)
        time.sleep(0.1)
    text = stream.getvalue()
    # 2 of 4 done: half of the 20-character bar filled
    assert "traceparse: batch [##########..........] 2/4 traces" in text
    assert text.endswith("\r")  # the line is erased at the end
    assert "\n" not in text


def test_short_work_is_never_drawn_and_env_disables(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Tty()
    with Progress("quick", stream=stream, delay=5):
        pass
    assert stream.getvalue() == ""
    monkeypatch.setenv("TRACEPARSE_PROGRESS", "0")
    assert not enabled(_Tty())


def test_cli_writes_nothing_extra_to_a_non_tty_stderr(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
         "args": {"device": 0, "stream": 7, "correlation": 1}}]}))
    env = {"PYTHONPATH": str(REPO), "TRACEPARSE_CACHE_DIR": str(tmp_path / "c"),
           "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-m", "traceparse", "--no-cache", "info", str(trace)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""
    assert "gpu kernel" in res.stdout
