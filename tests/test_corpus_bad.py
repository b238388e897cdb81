"""The hostile-input corpus (tests/corpus_bad/generate.py) through the real CLI.

Each manifest row runs ``python -m traceparse ARGS`` in a subprocess, in the directory the
corpus was generated into (a fresh temporary directory per test session), and checks:

* ``error``: exit code 2; exactly one line on stderr, naming a path from the arguments and
  containing the expected fragment; no traceback; no output file or temporary file left
  behind; every input byte-identical afterwards (SHA-256) with an unchanged mtime.
* ``ingest``: exit code 0, the fragment in stdout (whitespace runs collapsed, so table
  alignment does not matter), inputs unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS_SRC = REPO / "tests" / "corpus_bad"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("corpus_generate", CORPUS_SRC / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["corpus_generate"] = mod
    spec.loader.exec_module(mod)
    return mod


GEN = _generator()
MANIFEST = GEN.build(CORPUS_SRC, dry=True)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus_bad")
    GEN.build(out, big=True)
    return out


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACEPARSE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "traceparse", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def _digest(path: Path) -> dict[str, tuple[str, int]]:
    """SHA-256 and mtime of ``path`` (every file below it for a directory)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in files}


def _inputs(args: list[str], cwd: Path) -> list[Path]:
    return [cwd / a for a in args if not a.startswith("-") and (cwd / a).exists()]


def test_manifest_is_broad() -> None:
    errors = [c for c in MANIFEST if c.outcome == "error"]
    ingests = [c for c in MANIFEST if c.outcome == "ingest"]
    assert len(MANIFEST) >= 40 and len(errors) >= 30 and len(ingests) >= 15
    prefixes = {c.file.split("_")[0] for c in MANIFEST}
    assert {"nsys", "torch", "ncu", "cli"} <= prefixes
    assert len({c.file for c in MANIFEST}) == len(MANIFEST)  # one row per file


@pytest.mark.parametrize("case", MANIFEST, ids=[c.file for c in MANIFEST])
def test_corpus_case(case, corpus: Path) -> None:  # type: ignore[no-untyped-def]
    args = [a.replace("{file}", case.file) for a in case.args]
    inputs = _inputs(args, corpus)
    before = {str(p): _digest(p) for p in inputs}
    listing = sorted(os.listdir(corpus))
    r = _run(args, corpus)
    assert "Traceback" not in r.stderr, r.stderr
    assert {str(p): _digest(p) for p in inputs} == before, "an input was modified"
    assert sorted(os.listdir(corpus)) == listing, "a file was left behind"
    for out in case.outputs:
        assert not (corpus / out).exists()
    if case.outcome == "error":
        assert r.returncode == 2, (r.returncode, r.stderr, r.stdout[:500])
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert case.fragment in lines[0], lines[0]
        named = [a for a in args if not a.startswith("-") and a not in (
            "info", "kernels", "memops", "api", "convert")]
        assert any(n in lines[0] for n in named), lines[0]
        assert r.stdout == ""
    else:
        assert r.returncode == 0, r.stderr
        assert case.fragment in " ".join(r.stdout.split()), r.stdout[-2000:]


def test_info_accounting_adds_up_on_corpus(corpus: Path) -> None:
    """Every ``input X`` line of ``info`` on an ingestible corpus file says N = P + S with
    N == P + S, and the skipped reasons listed for X add up to S."""
    import re

    for case in (c for c in MANIFEST if c.outcome == "ingest" and c.args[0] == "info"):
        out = _run(["info", case.file], corpus).stdout
        inputs = re.findall(r"^input (.+?)\s+(\d+) = (\d+) parsed \+ (\d+) skipped$", out,
                            re.M)
        assert inputs, case.file
        for source, n, p, s in inputs:
            assert int(n) == int(p) + int(s)
            reasons = re.findall(rf"^skipped {re.escape(source)}\s+(\d+) \(", out, re.M)
            assert sum(map(int, reasons)) == int(s), (case.file, source)


def test_unreadable_file(tmp_path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not block reads (the directory-as-file "
                    "case dir_as_file.csv covers the unreadable-path message)")
    p = tmp_path / "locked.sqlite"
    GEN.nsys_db(p)
    p.chmod(0)
    try:
        r = _run(["info", str(p)], tmp_path)
    finally:
        p.chmod(0o644)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "locked.sqlite" in r.stderr and "ermission" in r.stderr


def test_committed_corpus_is_current(corpus: Path) -> None:
    """The committed small files equal a fresh generation (SQLite files excepted: their
    bytes may differ between SQLite library versions)."""
    committed = [p for p in CORPUS_SRC.iterdir()
                 if p.is_file() and p.suffix not in (".py", ".sqlite") and p.name != ".gitignore"]
    assert len(committed) > 20
    for p in committed:
        assert p.read_bytes() == (corpus / p.name).read_bytes(), p.name
