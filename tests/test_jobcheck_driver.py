"""Issue 25: several inputs are one job only with the same GPU driver
(:mod:`traceparse.jobcheck`); the readers keep it (nsys ``TARGET_INFO_SYSTEM_ENV``, Kineto
``cuda_driver_version``). Two generated inputs of each format, and the shared exports'
drivers checked against sqlite3."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import TRACES, shared_files
from nsys_extra import write_base

from traceparse.cli.main import main
from traceparse.loader import load


def _nsys(path: Path, cuda: str, nv: str) -> Path:
    """A generated export (the same kernels, GPU and session start every time) whose capture
    names the driver ``cuda`` / ``nv`` as nsys writes them."""
    write_base(path, [("k", 10_000, 20_000), ("k", 30_000, 40_000)])
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV "
                   "(globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, "
                   "value TEXT)")
        db.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (0, 'x', ?, 0, ?)",
                       [("CudaDriverVersion", cuda), ("NvDriverVersion", nv)])
    db.close()
    return path


def _kineto(path: Path, rank: int, driver: int) -> Path:
    """A Kineto trace of rank ``rank`` (of 2) on an H100, one kernel at the same epoch time
    as the other rank's, naming ``cuda_driver_version`` ``driver``."""
    doc = {"schemaVersion": 1, "baseTimeNanoseconds": 1_700_000_000_000_000_000,
           "cuda_driver_version": driver,
           "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
           "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                 "numSms": 132}],
           "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                            "ts": 100.0, "dur": 50.0,
                            "args": {"device": 0, "stream": 7, "correlation": 1}}]}
    path.write_text(json.dumps(doc))
    return path


def test_two_nsys_exports_with_different_drivers_are_not_one_job(tmp_path: Path) -> None:
    a = _nsys(tmp_path / "a.sqlite", "12080", "570.86.15")
    b = _nsys(tmp_path / "b.sqlite", "13000", "580.95.05")
    same = _nsys(tmp_path / "c.sqlite", "12080", "570.86.15")
    assert load(a).meta["driver_version"] == "CUDA 12.8 (NVIDIA 570.86.15)"
    r = CliRunner().invoke(main, ["summary", str(a), str(b)])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert r.output.strip() == (
        "traceparse: error: a.sqlite and b.sqlite are not one job: different drivers "
        "(CUDA 12.8 (NVIDIA 570.86.15) vs CUDA 13.0 (NVIDIA 580.95.05)); give --as-one-job "
        "to analyse them together anyway")
    assert CliRunner().invoke(main, ["summary", str(a), str(same)]).exit_code == 0
    assert CliRunner().invoke(main, ["summary", "--as-one-job", str(a), str(b)]).exit_code == 0
    # seven digits are the older encoding: 5156501 = 515.65.01
    old = _nsys(tmp_path / "d.sqlite", "11070", "5156501")
    assert load(old).meta["driver_version"] == "CUDA 11.7 (NVIDIA 515.65.01)"


def test_two_kineto_ranks_with_different_drivers_are_not_one_job(tmp_path: Path) -> None:
    r0 = _kineto(tmp_path / "r0.json", 0, 12080)
    r1 = _kineto(tmp_path / "r1.json", 1, 13000)
    ok = _kineto(tmp_path / "r1b.json", 1, 12080)
    assert load(r0).meta["driver_version"] == "CUDA 12.8"
    r = CliRunner().invoke(main, ["summary", str(r0), str(r1)])
    assert r.exit_code == 2 and "different drivers (CUDA 12.8 vs CUDA 13.0)" in r.output
    assert CliRunner().invoke(main, ["summary", str(r0), str(ok)]).exit_code == 0
    # an nsys export and a Kineto trace compare their CUDA versions only
    from traceparse.jobcheck import disagreement

    n = load(_nsys(tmp_path / "n.sqlite", "12080", "570.86.15"))
    k = load(r0)
    assert "different drivers" not in (disagreement(["n.sqlite", "r0.json"], [n, k]) or "")


NSYS = shared_files("nsys", "*.sqlite")


@pytest.mark.shared
@pytest.mark.skipif(not NSYS, reason="no nsys exports in the corpus")
def test_shared_exports_name_the_driver_they_record() -> None:
    # every export with TARGET_INFO_SYSTEM_ENV's CudaDriverVersion has it, decoded
    for path in NSYS:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = "
                              "'CudaDriverVersion'").fetchone()
        except sqlite3.OperationalError:
            row = None
        con.close()
        got = load(path).meta.get("driver_version")
        if row is None or not str(row[0]).isdigit():
            assert got is None, path.name
        else:
            v = int(row[0])
            assert got.startswith(f"CUDA {v // 1000}.{v % 1000 // 10}"), path.name
    # nsys-ai's before/after exports share GPU and driver (CUDA 13.0, NVIDIA 580.95.05):
    # what keeps them apart is time (captures 4809 s apart), not the driver
    r = CliRunner().invoke(main, ["summary", str(TRACES / "nsys/nsys-ai__mfu_2gpu_before.sqlite"),
                                  str(TRACES / "nsys/nsys-ai__mfu_2gpu_after.sqlite")])
    assert r.exit_code == 2 and "do not overlap in time" in r.output
