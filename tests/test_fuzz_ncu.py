"""Fuzz the Nsight Compute CSV reader: a validated Timeline or a TraceError, never a crash.

Byte-level mutations of a small raw page and a small details page, and structured fuzz of
raw-page cells (random text, numbers, quotes, separators, units).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from fuzzing import check, generator, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceparse.ncu import reader as ncu

SETTINGS = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
_TMP = Path(tempfile.mkdtemp(prefix="fuzz_ncu_"))
GEN = generator()
RAW = GEN.ncu_text(3).encode()
DETAILS = (
    b'"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    b'"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    b'"Metric Value","Rule Name","Rule Type","Rule Description"\n'
    b'"0","1","a","h","k(float*)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
    b'"GPU Speed Of Light Throughput","Duration","usecond","1.50"\n'
    b'"0","1","a","h","k(float*)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
    b'"GPU Speed Of Light Throughput","DRAM Throughput","%","12.5"\n'
    b'"0","1","a","h","k(float*)","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
    b'"SOL","","","","SOLBottleneck","WRN","advice"\n')
CELL = st.one_of(st.text(max_size=12), st.sampled_from(
    ["", "nan", "inf", "-1e400", "1,234.5", "(1, 2)", '"', "n/a", "usecond", "Gbyte/second",
     "%", "-", "0", "-7", "99999999999999999999999"]))


@SETTINGS
@given(mutated(RAW))
def test_mutated_raw_page(data: bytes) -> None:
    p = _TMP / "r.csv"
    p.write_bytes(data)
    check(ncu.read, p)


@SETTINGS
@given(mutated(DETAILS))
def test_mutated_details_page(data: bytes) -> None:
    p = _TMP / "d.csv"
    p.write_bytes(data)
    check(ncu.read, p)


@settings(SETTINGS, max_examples=80)
@given(st.lists(st.tuples(st.integers(0, 12), CELL), min_size=1, max_size=6),
       st.integers(0, 1))
def test_random_cells(edits: list[tuple[int, str]], units_row: int) -> None:
    import csv
    import io

    rows = list(csv.reader(io.StringIO(RAW.decode())))
    for col, value in edits:
        rows[2 + (col % 3)][col] = value
    if not units_row:
        rows[1] = [""] * len(rows[1])
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    p = _TMP / "c.csv"
    p.write_text(buf.getvalue())
    check(ncu.read, p)
