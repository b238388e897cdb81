"""Shared fixtures: the real-trace corpus in ../shared and generated samples.

The corpus lives beside the checkout (``../shared``) or where ``TRACEPARSE_SHARED`` points.
Without it, tests marked ``shared`` are skipped with a clear reason; with
``TRACEPARSE_REQUIRE_SHARED=1`` (set by ``.ci/run``) a missing corpus is an error instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEPARSE_SHARED", REPO.parent / "shared")).resolve()
TRACES = SHARED / "traces"
ORACLE = SHARED / "oracle"
HAVE_SHARED = (TRACES / "nsys").is_dir()
SKIP_REASON = (f"real-trace corpus not found at {TRACES} (clone with ../shared beside the "
               "checkout or set TRACEPARSE_SHARED)")


#: PyTorch is not a traceparse dependency; .ci/run installs its CPU build and sets
#: TRACEPARSE_REQUIRE_TORCH=1, so there a missing torch fails the capture tests instead.
HAVE_TORCH = importlib.util.find_spec("torch") is not None
REQUIRE_TORCH = os.environ.get("TRACEPARSE_REQUIRE_TORCH") == "1"


def needs_torch(what: str) -> pytest.MarkDecorator:
    """Skip marker for tests that run PyTorch (``what`` names them in the reason)."""
    return pytest.mark.skipif(
        not HAVE_TORCH and not REQUIRE_TORCH,
        reason=f"PyTorch is not installed (not a traceparse dependency; `pip install torch` "
               f"to run {what} on the CPU)")


def shared_files(kind: str, pattern: str = "*") -> list[Path]:
    """Sorted real files of ``kind`` (nsys, ncu, torch); empty list without the corpus."""
    d = TRACES / kind
    return sorted(d.glob(pattern)) if d.is_dir() else []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_SHARED:
        return
    if os.environ.get("TRACEPARSE_REQUIRE_SHARED") == "1":
        raise pytest.UsageError(f"TRACEPARSE_REQUIRE_SHARED=1 but {SKIP_REASON}")
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        # tests parametrized over an empty list of shared files say why, not "empty parameter set"
        empty = any("empty parameter set" in str(m.kwargs.get("reason", ""))
                    for m in item.iter_markers(name="skip"))
        if "shared" in item.keywords or empty:
            item.add_marker(skip, append=False)


def ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.fixture(autouse=True, scope="session")
def _private_timeline_cache(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Keep every test's timeline cache (CLI default: ~/.cache/traceparse) in a temporary
    directory: tests must never write to the real home cache. Subprocesses inherit it."""
    old = os.environ.get("TRACEPARSE_CACHE_DIR")
    os.environ["TRACEPARSE_CACHE_DIR"] = str(tmp_path_factory.mktemp("timeline-cache"))
    yield
    if old is None:
        os.environ.pop("TRACEPARSE_CACHE_DIR", None)
    else:
        os.environ["TRACEPARSE_CACHE_DIR"] = old
