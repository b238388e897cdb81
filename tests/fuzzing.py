"""Shared pieces of the fuzz tests (tests/test_fuzz_*.py) and benchmarks/fuzz_long.py.

The property under test, for every parser: on ANY input bytes it either returns a Timeline
that passes :meth:`Timeline.validate`, or raises :class:`TraceError`. Any other exception
(KeyError, polars errors, OverflowError, ...) is a crash.

Seeds are small real-looking inputs from ``tests/corpus_bad/generate.py``; mutations are
byte flips, byte-range deletions/duplications, truncations and random insertions.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from traceparse.errors import TraceError
from traceparse.timeline import Timeline

REPO = Path(__file__).resolve().parent.parent


def generator() -> Any:
    """The corpus generator module (tests/corpus_bad/generate.py)."""
    if "corpus_generate" in sys.modules:
        return sys.modules["corpus_generate"]
    spec = importlib.util.spec_from_file_location(
        "corpus_generate", REPO / "tests" / "corpus_bad" / "generate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["corpus_generate"] = mod
    spec.loader.exec_module(mod)
    return mod


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """``seed`` with 1-4 random edits (flip, delete range, duplicate range, insert, cut)."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "delete", "dup", "insert", "cut", "byte"]))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte":
            data[i] = draw(st.integers(0, 255))
        elif op == "delete":
            del data[i:i + draw(st.integers(1, 64))]
        elif op == "dup":
            data[i:i] = data[i:i + draw(st.integers(1, 64))]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[i:]
    return bytes(data)


def check(read: Any, path: Path) -> str:
    """Run ``read(path)``; return "ok" or "error"; let any other exception propagate."""
    try:
        tl = read(path)
    except TraceError as exc:
        assert "\n" not in str(exc)
        return "error"
    assert isinstance(tl, Timeline)
    tl.validate()
    return "ok"
