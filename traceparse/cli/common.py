"""Shared CLI plumbing: output options, rendering frames as table/CSV/JSON, atomic writes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click
import polars as pl

from traceparse.atomic import write_text
from traceparse.cache import Cache
from traceparse.timeline import Timeline

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "csv", "json")


def output_options(func: F) -> F:
    """Add ``--format table|csv|json`` and ``-o/--output FILE`` to a command."""
    func = click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
                        default=None, help="Write to FILE instead of stdout.")(func)
    func = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
                        show_default=True, help="Output format.")(func)
    return func


def _cell(value: Any, decimals: int | None, *, human: bool = False) -> str:
    """One cell as text. Floats: ``decimals`` places when given; otherwise, for people
    (``human``), 3 significant digits below 1000, thousands separators up to 1e9 and
    scientific notation above; for machines, the shortest text that round-trips."""
    if value is None:
        return ""
    if isinstance(value, float):
        if decimals is not None:
            return f"{value:.{decimals}f}"
        if not human or value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        mag = abs(value)
        if mag >= 1e9:
            return f"{value:.3e}"
        if mag >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def render_table(frame: pl.DataFrame, *, decimals: dict[str, int] | None = None,
                 max_width: int = 80) -> str:
    """Render ``frame`` as an aligned plain-text table (numbers right-aligned, long text cut
    to ``max_width`` characters)."""
    decimals = decimals or {}
    cols = frame.columns
    rows = [[_cell(v, decimals.get(c), human=True) for c, v in zip(cols, r, strict=True)]
            for r in frame.iter_rows()]
    rows = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    numeric = [frame.schema[c].is_numeric() for c in cols]

    def fmt(cells: list[str]) -> str:
        out = [c.rjust(w) if num else c.ljust(w)
               for c, w, num in zip(cells, widths, numeric, strict=True)]
        return "  ".join(out).rstrip()

    lines = [fmt(list(cols)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines) + "\n"


def render_csv(frame: pl.DataFrame, *, decimals: dict[str, int] | None = None) -> str:
    """Render ``frame`` as CSV (header, minimal quoting); floats to ``decimals`` places."""
    import csv

    decimals = decimals or {}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(frame.columns)
    for r in frame.iter_rows():
        w.writerow([_cell(v, decimals.get(c)) for c, v in zip(frame.columns, r, strict=True)])
    return buf.getvalue()


def render_nsys_csv(frame: pl.DataFrame, *, decimals: dict[str, int] | None = None) -> str:
    """CSV exactly as ``nsys stats --format csv`` writes it: a field is quoted only when it
    holds a comma or a line break (a bare ``"`` stays as is); floats to ``decimals``."""
    decimals = decimals or {}

    def cell(col: str, v: object) -> str:
        if v is None:
            return ""
        text = f"{v:.{decimals[col]}f}" if isinstance(v, float) and col in decimals else str(v)
        if "," in text or "\n" in text:
            return '"' + text.replace('"', '""') + '"'
        return text

    lines = [",".join(frame.columns)]
    lines += [",".join(cell(c, v) for c, v in zip(frame.columns, row, strict=True))
              for row in frame.iter_rows()]
    return "\n".join(lines) + "\n"


def render_json(frame: pl.DataFrame) -> str:
    """Render ``frame`` as a JSON list of row objects."""
    return json.dumps(frame.to_dicts(), default=str, indent=1) + "\n"


def render(frame: pl.DataFrame, fmt: str, *, decimals: dict[str, int] | None = None,
           title: str | None = None, nsys_csv: bool = False) -> str:
    """Render ``frame`` in ``fmt`` (table, csv or json); with ``nsys_csv`` the CSV is
    written exactly as ``nsys stats`` writes its reports (:func:`render_nsys_csv`)."""
    if fmt == "csv":
        if nsys_csv:
            return render_nsys_csv(frame, decimals=decimals)
        return render_csv(frame, decimals=decimals)
    if fmt == "json":
        return render_json(frame)
    text = render_table(frame, decimals=decimals)
    return f"{title}\n\n{text}" if title else text


def emit(text: str, output: str | None) -> None:
    """Write ``text`` to ``output`` atomically, or to stdout when ``output`` is None."""
    if output is None:
        click.echo(text, nl=False)
    else:
        write_text(output, text)


def cache_of(ctx: click.Context | None = None) -> Cache | None:
    """The timeline cache chosen by the global ``--no-cache`` / ``--cache-dir`` options
    (None = do not cache). Outside a ``traceparse`` invocation: the default cache."""
    ctx = ctx or click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    if root is not None and isinstance(root.obj, dict) and "cache" in root.obj:
        cache: Cache | None = root.obj["cache"]
        return cache
    from traceparse.cache import default_dir

    return Cache(default_dir())


def load_trace(path: str, ctx: click.Context | None = None) -> Timeline:
    """Load ``path`` the way every command does: format detected, through the cache chosen
    by the global options (see :func:`cache_of`)."""
    from traceparse.loader import load

    return load(path, cache=cache_of(ctx))
