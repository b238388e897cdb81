"""Every ``traceparse`` command in README.md runs as written (placeholders filled in with the
bundled sample traces), the Python example runs, and the README's general claims about the
CLI hold for every command. Add a command to the README and it is tested here."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.conftest import REPO
from traceparse.cli import main

README = (REPO / "README.md").read_text(encoding="utf-8")
SAMPLES = REPO / "sample_traces"


def readme_commands() -> list[str]:
    """``traceparse ...`` commands: in backticks (tables, text) and in indented blocks."""
    found = re.findall(r"`(traceparse [^`]+)`", README)
    found += re.findall(r"&& (traceparse [^\n]+)", README)
    return [c.replace("\\|", "|") for c in found]


COMMANDS = readme_commands()


def _fill(cmd: str, tmp: Path) -> list[str]:
    words = shlex.split(cmd)[1:]
    subs = {"TRACE": [str(SAMPLES / "mini_train.sqlite"), str(SAMPLES / "comm_bound.sqlite")],
            "BASE": [str(SAMPLES / "mini_train.sqlite")],
            "NEW": [str(SAMPLES / "mini_train.sqlite")],
            "CSV": [str(SAMPLES / "mini_train.ncu.csv")],
            "REGEX": ["^step"], "DIR": [str(tmp / "runs")], "OUT": [str(tmp / "out")]}
    used = {k: 0 for k in subs}
    out = []
    for w in words:
        if w in subs:
            vals = subs[w]
            out.append(vals[used[w] % len(vals)])
            used[w] += 1
        elif w.startswith("-") or "/" in w or "." not in w:
            out.append(w)
        else:  # an output file name such as report.html: into the temp directory
            out.append(str(tmp / w))
    return out


def test_readme_names_every_command() -> None:
    named = {shlex.split(c)[1] for c in COMMANDS if len(shlex.split(c)) > 1}
    hidden = {n for n, c in main.commands.items() if c.hidden}
    assert set(main.commands) - hidden - named == set(), "commands missing from README.md"


@pytest.mark.parametrize("cmd", COMMANDS)
def test_readme_command_runs(cmd: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                             ) -> None:
    (tmp_path / "runs").mkdir()
    for name in ("compute_bound", "memory_bound"):
        shutil.copy(SAMPLES / f"{name}.sqlite", tmp_path / "runs" / f"{name}.sqlite")
    monkeypatch.chdir(tmp_path)
    if " --calibration " in cmd:  # predict reads what the README's calibrate writes
        res = CliRunner().invoke(main, ["calibrate", str(SAMPLES / "mini_train.sqlite"),
                                        "-o", str(tmp_path / "calibration.json")])
        assert res.exit_code == 0, res.output
    args = _fill(cmd, tmp_path)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, f"{cmd!r} -> {args}: {res.output}"
    out = res.stdout + res.stderr
    assert out.strip(), cmd
    for i, a in enumerate(args):
        if a in ("-o", "--output") and args[0] != "batch":
            path = Path(args[i + 1])
            assert path.exists(), f"{cmd}: no {path}"
            assert f"wrote {path}" in res.stderr


def test_python_example_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    code = re.search(r"```python\n(.*?)```", README, re.S)
    assert code is not None
    text = code.group(1).replace('"run.sqlite"', repr(str(SAMPLES / "mini_train.sqlite")))
    monkeypatch.chdir(tmp_path)
    exec(compile(text, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "shape: (1, " in out  # one device: one breakdown row
    assert "shape: (5, 2)" in out and "dur_ns" in out  # .head() of the kernels


def test_readme_cli_claims_hold() -> None:
    """'Every command that prints data takes --format table|csv|json and -o FILE', and
    'every analysis command takes the same inputs'."""
    assert "takes `--format table|csv|json` and `-o FILE`" in README
    for name, cmd in main.commands.items():
        opts = {o for p in cmd.params for o in p.opts}
        if name in ("batch",):  # writes a dataset directory, prints a summary table only
            continue
        if "--format" in opts:
            fmt = next(p for p in cmd.params if "--format" in p.opts)
            assert isinstance(fmt.type, click.Choice)
            assert {"table", "csv", "json"} <= set(fmt.type.choices), name
            assert {"-o", "--force"} <= opts, name
    assert "pandas" in README and "'.[pandas]'" in README
    extras = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^pandas = \["pandas', extras, re.M)
