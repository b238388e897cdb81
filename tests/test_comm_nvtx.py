"""Issue 25: communication by NVTX domain (:func:`traceparse.categorize.by_nvtx`, run by the
nsys reader): a kernel launched inside a range of NCCL's own NVTX domain, or inside a range
named as an NCCL API call or a communication op, is communication whatever its name.

A generated export with a hand-computed answer, and every shared nsys export checked against
an independent sqlite3 count (kernels whose launch call lies inside such a range).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest
from conftest import ids, shared_files

from traceparse.analyses.attribution import breakdown
from traceparse.categorize import COMM_DOMAIN_RE, COMM_RANGE_RE
from traceparse.nsys.reader import read
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import PID, Activity, Call, Range, Scenario

US = 1_000
LAUNCH = "cudaLaunchKernel_v7000"
NSYS = shared_files("nsys", "*.sqlite")


def _export(path: Path, *, domain: str | None, range_name: str = "ncclAllReduce") -> Path:
    """Kernels (us): gemm [10,50) launched at [0,1); sym_reduce_kernel [60,100) launched at
    [52,53) inside the range [51,54); gemm [100,140) launched at [55,56) after it."""
    def k(name: str, s: int, e: int) -> Activity:
        return Activity("kernel", 7, s * US, (e - s) * US, name)

    sc = Scenario("nvtx-comm", "a custom-named collective kernel inside an NCCL range", (
        Call(LAUNCH, 0, 1 * US, k("gemm", 10, 50)),
        Call(LAUNCH, 52 * US, 53 * US, k("sym_reduce_kernel", 60, 100)),
        Call(LAUNCH, 55 * US, 56 * US, k("gemm", 100, 140))),
        ranges=(Range(range_name, 51 * US, 54 * US),))
    samplegen_sqlite.write(sc, path)
    if domain is not None:
        tid = samplegen_sqlite.global_tid(PID, PID)
        with sqlite3.connect(path) as db:
            db.execute("UPDATE NVTX_EVENTS SET domainId = 1 WHERE eventType = 59")
            db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                       "domainId) VALUES (0, NULL, 75, ?, ?, 1)", (domain, tid))
        db.close()
    return path


def _categories(path: Path) -> list[tuple[str, str]]:
    tl = read(path)
    return tl.gpu.sort("start_ns").select(pl.col("name").cast(pl.String),
                                          pl.col("category").cast(pl.String)).rows()


@pytest.mark.parametrize(("domain", "name", "comm"), [
    ("NCCL", "group", True),             # NCCL's own domain, whatever the range's text
    (None, "ncclAllReduce", True),       # an NCCL API call by name
    (None, "nccl:all_reduce", True),     # PyTorch's communication op
    ("cuBLAS", "gemm_batched", False),   # another library's domain
    (None, "allreduce_hook", False),     # a user range that only mentions a collective
])
def test_kernel_inside_a_communication_range(tmp_path: Path, domain: str | None, name: str,
                                             comm: bool) -> None:
    cats = _categories(_export(tmp_path / "t.sqlite", domain=domain, range_name=name))
    assert cats == [("gemm", "compute"),
                    ("sym_reduce_kernel", "communication" if comm else "compute"),
                    ("gemm", "compute")]


def test_nccl_range_kernel_is_exposed_communication(tmp_path: Path) -> None:
    # window [10,140) = 130 us: compute 40 + 40, the reduce kernel [60,100) exposed
    # communication 40, idle [50,60) = 10 (minus its launch: the call [52,53) is launch)
    tl = read(_export(tmp_path / "t.sqlite", domain="NCCL"))
    r = breakdown(tl).row(0, named=True)
    assert (r["window_ns"], r["compute_ns"], r["communication_ns"]) == (
        130 * US, 80 * US, 40 * US)


@pytest.mark.shared
@pytest.mark.parametrize("path", NSYS, ids=ids(NSYS))
def test_shared_exports_nvtx_communication(path: Path) -> None:
    # independent count with sqlite3: kernels launched (runtime call by correlation id and
    # process) inside a push/pop range of an NCCL/RCCL domain or named as a communication call
    import re

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    want = 0
    if {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"} <= tables:
        strings = dict(con.execute("SELECT id, value FROM StringIds"))
        cols = {r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")}
        tid = "textId" if "textId" in cols else "NULL"
        doms = {(g >> 24, d): t for g, d, t in con.execute(
            "SELECT globalTid, domainId, text FROM NVTX_EVENTS WHERE eventType = 75")}
        rngs = [(g, s, e) for g, s, e, t, ti, d in con.execute(
            f"SELECT globalTid, start, end, text, {tid}, domainId FROM NVTX_EVENTS "
            "WHERE eventType IN (59, 70) AND end IS NOT NULL")
            if re.search(COMM_RANGE_RE, t if t is not None else strings.get(ti, ""))
            or re.search(COMM_DOMAIN_RE, doms.get((g >> 24, d), "") or "")]
        if rngs:
            launches = con.execute(
                "SELECT r.globalTid, r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN "
                "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId AND "
                "k.globalPid = (r.globalTid & -16777216)").fetchall()
            want = sum(any(g == rg and s <= t < e for rg, s, e in rngs) for g, t in launches)
    con.close()
    tl = read(path)
    by_nvtx = tl.gpu.filter((pl.col("category").cast(pl.String) == "communication")
                            & (pl.col("kind").cast(pl.String) == "kernel")
                            & ~pl.col("name").cast(pl.String).str.contains(
                                r"(?i)nccl|rccl|all_?reduce|all_?gather")).height
    # kernels made communication only by a range (their names do not say so)
    assert by_nvtx <= want
    if want == 0:
        assert by_nvtx == 0
