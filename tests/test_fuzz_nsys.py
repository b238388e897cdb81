"""Fuzz the nsys SQLite reader: a validated Timeline or a TraceError, never a crash.

Byte-level: mutate a small generated export (flips, deletions, duplications, cuts).
Structured: a valid export whose kernel / runtime / NVTX rows hold random SQLite values
(SQLite is dynamically typed: any column can hold NULL, int, real, text or blob).
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from pathlib import Path

from fuzzing import check, generator, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceparse.nsys import reader as nsys

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
_TMP = Path(tempfile.mkdtemp(prefix="fuzz_nsys_"))
SEED = generator().nsys_db(_TMP / "seed.sqlite", kernels=6, nvtx_types=(59, 34, 75))
SEED_BYTES = SEED.read_bytes()

SQL_VALUE = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(),
                      st.text(max_size=20), st.binary(max_size=8))


@SETTINGS
@given(mutated(SEED_BYTES))
def test_mutated_bytes(data: bytes) -> None:
    p = _TMP / "m.sqlite"
    p.write_bytes(data)
    check(nsys.read, p)


@settings(SETTINGS, max_examples=40)
@given(st.sampled_from(["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                        "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMCPY", "StringIds"]),
       st.lists(st.tuples(st.integers(0, 15), SQL_VALUE), min_size=1, max_size=6))
def test_random_cell_values(table: str, edits: list[tuple[int, object]]) -> None:
    p = _TMP / "s.sqlite"
    p.write_bytes(SEED_BYTES)
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({table})")]
    for col_idx, value in edits:
        col = cols[col_idx % len(cols)]
        # IntegrityError: e.g. NOT NULL / duplicate primary key in StringIds
        with contextlib.suppress(sqlite3.IntegrityError):
            con.execute(f'UPDATE {table} SET "{col}" = ? WHERE rowid = '
                        f"(SELECT MIN(rowid) FROM {table})", (value,))
    con.commit()
    con.close()
    check(nsys.read, p)
