"""The wheel installs one top-level import package, ``traceparse``, and works from it.

Builds the wheel from a copy of the tracked files (so the checkout gets no build/ or
egg-info), installs it with ``--no-deps`` into a fresh venv that sees the system
site-packages (for polars & co.), and checks which names appeared in the venv's
site-packages, then that the installed package (not the checkout) runs: the CLI, its
package data (GPU table, report template, calibration schema) and a report of the sample.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    res = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, f"{args} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str], set[str]]:
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: cannot list the tracked files")
    tmp = tmp_path_factory.mktemp("pkg")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    src = tmp / "src"
    for name in filter(None, files):
        s, d = ROOT / name, src / name
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_symlink():
            os.symlink(os.readlink(s), d)
        elif s.is_file():
            shutil.copy2(s, d)
    _run(sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", tmp / "dist", cwd=src)
    wheels = list((tmp / "dist").glob("traceparse-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp).strip())
    before = {p.name for p in site.iterdir()}
    _run(py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
         wheels[0], cwd=tmp)
    after = {p.name for p in site.iterdir()}
    return env_dir, before, after


def test_only_traceparse_lands_top_level(installed: tuple[Path, set[str], set[str]]) -> None:
    _env, before, after = installed
    new = after - before
    assert "traceparse" in new
    dist_info = [n for n in new if n.endswith(".dist-info")]
    assert len(dist_info) == 1 and dist_info[0].startswith("traceparse-")
    assert new == {"traceparse", dist_info[0]}


def test_installed_package_runs_with_its_data(installed: tuple[Path, set[str], set[str]],
                                              tmp_path: Path) -> None:
    env_dir, _b, _a = installed
    py = env_dir / "bin" / "python"
    env = {**os.environ, "TRACEPARSE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTHONPATH", None)
    where = _run(py, "-c", "import traceparse, traceparse.analyses.calibrate as c; "
                 "print(traceparse.__file__); print(len(c.schema_path().read_text()))",
                 cwd=tmp_path, env=env).split()
    assert where[0].startswith(str(env_dir))  # the wheel's copy, not the checkout
    assert int(where[1]) > 1000
    # the generic names are not importable from the install
    _run(py, "-c", "import importlib.util as u; "
         "assert all(u.find_spec(n) is None for n in ('analyses', 'roofline', 'reports'))",
         cwd=tmp_path, env=env)
    gpus = _run(env_dir / "bin" / "traceparse", "gpus", "--format", "csv", cwd=tmp_path,
                env=env)
    assert gpus.splitlines()[0].startswith("name,")
    assert any(line.startswith("H100 SXM5 80GB,") for line in gpus.splitlines())
    _run(env_dir / "bin" / "traceparse", "report", "-o", "r.html", cwd=tmp_path, env=env)
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "mini_train" in html
