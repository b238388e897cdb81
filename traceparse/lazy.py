"""Lazy re-exports for the format packages (``traceparse.nsys.read`` and the like).

A package's public names live in one of its modules; importing the package (which every
import of a submodule does) must not import that module and everything it needs, so the
names are looked up on first use (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any


def lazy_exports(package: str, module: str, names: Sequence[str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that returns ``names`` from
    ``package.module``, imported on first use.

    Example:
        >>> getattr_ = lazy_exports("traceparse.ncu", "reader", ["read"])
        >>> getattr_("read").__module__
        'traceparse.ncu.reader'
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
