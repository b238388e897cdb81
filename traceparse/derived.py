"""Frames derived from a timeline, computed once per timeline and kept on it.

Several analyses of one command need the same derived table (the launch-link table of
:func:`traceparse.links.launch_links`, the call classification of
:func:`traceparse.analyses.attribution.classify_calls`). :func:`cached` stores such a
value on the :class:`~traceparse.timeline.Timeline` object itself, tagged with the table
objects it was computed from; when a caller assigns a new ``tl.gpu`` (or any table the
value depends on) the stored value no longer matches and is computed again. Stored
values are not fields: they are never saved, compared or exported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from traceparse.derived_store import AS_LOADED, store_of
from traceparse.timeline import Timeline

T = TypeVar("T")
_SLOT = "_derived"


def table_token(tl: Timeline, name: str) -> object:
    """What a derived value of ``tl`` depends on for table ``name``: the frame object, or
    :data:`AS_LOADED` for a table of a lazily loaded timeline that nobody replaced (so
    checking a dependency never reads a table)."""
    current = tl.__dict__.get(name, AS_LOADED)
    loaded = tl.__dict__.get("_lazy_loaded")
    if loaded is not None and (current is AS_LOADED or loaded.get(name) is current):
        return AS_LOADED
    return current


def cached(tl: Timeline, name: str, tables: Sequence[str], compute: Callable[[], T]) -> T:
    """The value ``compute()`` for ``tl``, computed once while ``tl``'s ``tables`` are the
    same objects.

    Example:
        ``cached(tl, "links", ("gpu", "api"), lambda: f(tl))`` calls ``f`` on the first
        use; later calls return the same object until ``tl.gpu`` or ``tl.api`` is replaced.
    """
    store: dict[str, tuple[tuple[Any, ...], Any]] = tl.__dict__.setdefault(_SLOT, {})
    deps = tuple(table_token(tl, t) for t in tables)
    hit = store.get(name)
    if hit is not None and len(hit[0]) == len(deps) and all(
            a is b for a, b in zip(hit[0], deps, strict=True)):
        value: T = hit[1]
        return value
    disk = store_of(tl)
    if disk is not None and not disk.usable(dict(zip(tables, deps, strict=True))):
        disk = None  # a table was replaced: the entry's values do not describe it
    if disk is not None:
        loaded = disk.read(name)
        if loaded is not None:
            store[name] = (deps, loaded)
            return loaded  # type: ignore[no-any-return]  # written from compute()'s value
    value = compute()
    store[name] = (deps, value)
    if disk is not None:
        disk.write(name, value)
    return value


def released(tl: Timeline, names: Sequence[str], compute: Callable[[], T]) -> T:
    """``compute()``, then drop the derived values ``names`` that it stored on ``tl``
    (values stored before the call are kept).

    For a large intermediate that only one computation needs: the replay's preparation
    (~1 GB at 10M kernels) serves every what-if replay of the savings engine, whose result
    is cached; holding it until the command ends only raised the peak of what came after
    (docs/performance.md, "Rule for a large intermediate only one result needs").

    Example:
        ``released(tl, ("replay_prep",), lambda: _savings(tl))``: a later replay computes
        its preparation again.
    """
    store: dict[str, Any] = tl.__dict__.setdefault(_SLOT, {})
    before = {n for n in names if n in store}
    try:
        return compute()
    finally:
        for n in names:
            if n not in before:
                store.pop(n, None)
