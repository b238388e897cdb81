"""Fuzz the Kineto JSON reader: a validated Timeline or a TraceError, never a crash.

Byte-level mutations of a small generated trace (plain and gzip), and structured fuzz:
events whose fields (ph, cat, ts, dur, name, pid, tid, args) hold random JSON values.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

from fuzzing import check, generator, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceparse.kineto import reader as kineto

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))
_TMP = Path(tempfile.mkdtemp(prefix="fuzz_kineto_"))
DOC = generator().kineto_doc(3)
SEED = json.dumps(DOC).encode()
SEED_GZ = gzip.compress(SEED, mtime=0)

SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
                   st.sampled_from(["1.5", "-3", "1e30", "12.3456789", "", "X", "kernel"]))
JSON = st.recursive(SCALAR, lambda c: st.one_of(st.lists(c, max_size=3),
                                               st.dictionaries(st.text(max_size=8), c,
                                                               max_size=3)), max_leaves=6)
CATS = st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "gpu_memcpy", "gpu_memset",
                        "user_annotation", "gpu_user_annotation", "cuda_driver", "ac2g",
                        "python_function", "Kernel", "Runtime"])
ARGS = st.fixed_dictionaries({}, optional={"correlation": JSON, "device": JSON,
                                           "stream": JSON, "External id": JSON,
                                           "Collective name": JSON, "grid": JSON,
                                           "bytes": JSON})
EVENT = st.fixed_dictionaries(
    {"ph": st.one_of(st.just("X"), JSON), "cat": st.one_of(CATS, JSON)},
    optional={"ts": JSON, "dur": JSON, "name": st.one_of(st.text(max_size=10), JSON),
              "pid": JSON, "tid": JSON, "args": st.one_of(ARGS, JSON)})
HEADER = st.fixed_dictionaries({}, optional={
    "baseTimeNanoseconds": JSON, "distributedInfo": JSON, "deviceProperties": JSON,
    "schemaVersion": JSON})


@SETTINGS
@given(mutated(SEED))
def test_mutated_json_bytes(data: bytes) -> None:
    p = _TMP / "m.json"
    p.write_bytes(data)
    check(kineto.read, p)


@settings(SETTINGS, max_examples=60)
@given(mutated(SEED_GZ))
def test_mutated_gzip_bytes(data: bytes) -> None:
    p = _TMP / "m.json.gz"
    p.write_bytes(data)
    check(kineto.read, p)


@SETTINGS
@given(st.lists(EVENT, max_size=6), HEADER)
def test_structured_events(events: list[dict], header: dict) -> None:
    doc = {**DOC, **header, "traceEvents": DOC["traceEvents"] + events}
    p = _TMP / "s.json"
    p.write_bytes(json.dumps(doc).encode())
    check(kineto.read, p)
