"""Shared CLI plumbing: the options every command spells the same way, rendering frames as
table/CSV/JSON, and the one output rule (docs/cli.md).

Output rule: ``-o FILE`` writes FILE atomically with the umask's permissions and says
``wrote FILE`` on stderr; an existing FILE is kept unless ``--force`` is given (exit 2).
Without ``-o`` the data goes to stdout. Tables are for people (human units, see
:mod:`traceparse.units`); CSV and JSON keep the raw columns (``*_ns`` integers etc.).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
import polars as pl

from traceparse import units
from traceparse.atomic import write_bytes, write_text
from traceparse.cache import Cache
from traceparse.errors import UsageError
from traceparse.timeline import Timeline

F = TypeVar("F", bound=Callable[..., Any])

FORMATS = ("table", "csv", "json")


def output_options(func: F | None = None, *, formats: Sequence[str] = FORMATS,
                   default: str = "table", output_help: str = "Write to FILE instead of "
                   "stdout.") -> Any:
    """Add ``--format`` (``formats``), ``-o/--output FILE`` and ``--force`` to a command.
    Use as ``@output_options`` or ``@output_options(formats=(...), default=...)``."""
    def deco(f: F) -> F:
        f = click.option("--force", "force", is_flag=True,
                         help="Replace FILE if it exists (otherwise an existing FILE is "
                              "kept and the command exits 2).")(f)
        f = click.option("-o", "--output", "output", type=click.Path(dir_okay=False),
                         default=None, metavar="FILE", help=output_help)(f)
        f = click.option("--format", "fmt", type=click.Choice(list(formats)),
                         default=default, show_default=True, help="Output format.")(f)
        return f

    return deco(func) if func is not None else deco


def _as_one_job(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    ctx.meta["traceparse.as_one_job"] = bool(value)


def traces_argument(func: F) -> F:
    """``TRACE...``: one or more trace files, rank directories or globs
    (:mod:`traceparse.cli.inputs`), and ``--as-one-job`` (analyse several inputs as one job
    even when they disagree, :mod:`traceparse.jobcheck`)."""
    func = click.option("--as-one-job", is_flag=True, expose_value=False,
                        callback=_as_one_job,
                        help="Analyse several inputs as one job even when their GPUs, "
                             "ranks or capture times disagree.")(func)
    return click.argument("traces", nargs=-1, type=click.Path(dir_okay=True),
                          metavar="[TRACE]...")(func)


def _alias_of(dest: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """Callback of a hidden old spelling: hand its value to option ``dest``."""
    def cb(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        if ctx.params.get(dest) is not None:
            raise click.UsageError(f"give --{dest.replace('_', '-')} once")
        ctx.params[dest] = value
        ctx.meta[f"traceparse.alias.{dest}"] = value

    return cb


def _main_of(dest: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def cb(ctx: click.Context, _param: click.Parameter, value: Any) -> Any:
        alias = ctx.meta.get(f"traceparse.alias.{dest}")
        return alias if value is None and alias is not None else value

    return cb


def steps_option(func: F) -> F:
    """``--steps REGEX``: host ranges whose name matches REGEX are the steps (old spellings
    ``--step`` and ``--step-regex`` are accepted, hidden)."""
    func = click.option("--step-regex", "--step", "steps_alias", default=None, hidden=True,
                        expose_value=False, callback=_alias_of("steps"))(func)
    return click.option("--steps", "steps", default=None, metavar="REGEX",
                        callback=_main_of("steps"),
                        help="Host ranges (NVTX, annotations) whose name matches REGEX are "
                             "the steps (default: ProfilerStep#N ranges).")(func)


def min_gap_option(func: F) -> F:
    """``--min-gap-us US``: shortest idle gap reported (old spelling ``--min-us``, hidden)."""
    func = click.option("--min-us", "min_gap_alias", type=float, default=None, hidden=True,
                        expose_value=False, callback=_alias_of("min_gap_us"))(func)
    return click.option("--min-gap-us", "min_gap_us", type=float, default=None,
                        metavar="US", callback=_main_of("min_gap_us"),
                        help="Shortest idle gap listed, in microseconds  [default: 10]")(func)


def gpu_option(func: F) -> F:
    """``--gpu NAME``: take every device to be this row of the GPU table (ceilings)."""
    return click.option("--gpu", "gpu", default=None, metavar="NAME",
                        help="Use the ceilings of this GPU-table row for every device "
                             "(e.g. 'H100 SXM5 80GB'; `traceparse gpus` lists them) instead "
                             "of the one the trace names.")(func)


def min_gap_ns(min_gap_us: float | None) -> int:
    """``--min-gap-us`` in nanoseconds (default 10 µs)."""
    return round((10.0 if min_gap_us is None else min_gap_us) * 1000)


def _humanize(frame: pl.DataFrame, start_ns: int | None
              ) -> tuple[pl.DataFrame, set[str]]:
    """Unit columns as human text (:mod:`traceparse.units`); returns the frame and the
    columns to right-align. ``*_ns`` times named start/end/at/ts (``peak_ts_ns``) are
    relative to ``start_ns``."""
    out: dict[str, pl.Series] = {}
    right: set[str] = set()
    for c in frame.columns:
        col = frame[c]
        fn: Callable[[Any], str] | None = None
        header = c
        if col.dtype.is_numeric() and c.endswith(" (ns)"):  # nsys stats column names
            fn, header = units.duration, c[: -len(" (ns)")]
        elif col.dtype.is_numeric() and c.endswith("_ns"):
            stem = c[:-3]
            if start_ns is not None and (stem in ("start", "end", "at", "ts")
                                         or stem.endswith(("_start", "_end", "_ts"))):
                def fn(v: Any, t0: int = start_ns) -> str:
                    return units.timestamp(v, t0)
            else:
                fn = units.duration
            header = stem
        elif col.dtype.is_numeric() and c.endswith("_hz"):
            fn, header = units.clock, c[:-3]
        elif col.dtype.is_numeric() and c.endswith("tflop_per_s"):  # already in TFLOP/s
            def fn(v: Any) -> str:
                return units.tflops(None if v is None else v * 1e12)
            header = "tflop/s"
        elif col.dtype.is_numeric() and c.endswith("flop_per_s"):
            fn, header = units.tflops, c[: -len("_per_s")] + "/s"
        elif col.dtype.is_numeric() and c.endswith("bytes_per_s"):
            fn, header = units.gbps, c[: -len("_per_s")] + "/s"
        elif col.dtype.is_numeric() and (c == "bytes" or c.endswith("_bytes")):
            fn = units.size
        if fn is None:
            out[c] = col
            continue
        if header != c and header in frame.columns:
            header = c  # a column already has the short name: keep the unit in this one
        f = fn
        out[header] = pl.Series(header, [None if v is None else f(v) for v in col.to_list()],
                                dtype=pl.String)
        right.add(header)
    return pl.DataFrame(out), right


def _cell(value: Any, decimals: int | None, *, human: bool = False) -> str:
    """One cell as text. Floats: ``decimals`` places when given; otherwise, for people
    (``human``), 3 significant digits below 1000, thousands separators above (never an
    exponent); for machines, the shortest text that round-trips."""
    if value is None:
        return ""
    if isinstance(value, float):
        if decimals is not None:
            return f"{value:.{decimals}f}"
        if not human or value != value or value in (float("inf"), float("-inf")):
            return repr(value)
        mag = abs(value)
        if mag >= 1000:  # never an exponent in a table for people
            return f"{value:,.0f}"
        return units.significant(value).rstrip("0").rstrip(".") if "." in \
            units.significant(value) else units.significant(value)
    return str(value)


def render_table(frame: pl.DataFrame, *, decimals: dict[str, int] | None = None,
                 max_width: int = 80, right: set[str] | None = None) -> str:
    """Render ``frame`` as an aligned plain-text table (numbers and the ``right`` columns
    right-aligned; long text cut to ``max_width`` characters between words,
    :func:`traceparse.units.shorten`)."""
    decimals = decimals or {}
    right = right or set()
    cols = frame.columns
    rows = [[_cell(v, decimals.get(c), human=True) for c, v in zip(cols, r, strict=True)]
            for r in frame.iter_rows()]
    rows = [[units.shorten(c, max_width) for c in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    numeric = [frame.schema[c].is_numeric() or c in right for c in cols]

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
           title: str | None = None, nsys_csv: bool = False, human: bool = True,
           start_ns: int | None = None, right: set[str] | None = None) -> str:
    """Render ``frame`` in ``fmt`` (table, csv or json); with ``nsys_csv`` the CSV is
    written exactly as ``nsys stats`` writes its reports (:func:`render_nsys_csv`).

    Tables show unit columns in human units (``human``; ``*_ns`` durations scaled,
    start/end times relative to ``start_ns``, the trace start); CSV and JSON never do."""
    if fmt == "csv":
        if nsys_csv:
            return render_nsys_csv(frame, decimals=decimals)
        return render_csv(frame, decimals=decimals)
    if fmt == "json":
        return render_json(frame)
    right = set(right or ())
    if human and "metric" in frame.columns and frame.schema["metric"] == pl.String:
        frame, unit_cols = metric_rows(frame)
        right |= unit_cols
    elif human:
        frame, unit_cols = _humanize(frame, start_ns)
        right |= unit_cols
    text = render_table(frame, decimals=decimals, right=right)
    return f"{title}\n\n{text}" if title else text


#: Statistics-frame columns that hold counts or identifiers (a rank is not a duration).
COUNT_COLS = ("count", "steps", "outliers", "rank", "device_id", "launches", "kernels")


def metric_rows(frame: pl.DataFrame) -> tuple[pl.DataFrame, set[str]]:
    """A statistics frame (one row per ``metric``, columns mean/p50/...) for people: a row
    whose metric ends in ``_ns`` shows durations (and loses the suffix), a ``*_pct`` row
    percentages; counts stay integers. Returns the frame and the columns to right-align."""
    stats = [c for c in frame.columns if c != "metric"]
    rows = []
    for r in frame.iter_rows(named=True):
        metric = str(r["metric"])
        cells: dict[str, str] = {}
        for c in stats:
            v = r[c]
            if v is None:
                cells[c] = ""
            elif c in COUNT_COLS or isinstance(v, bool | str):  # counts and ids, never times
                cells[c] = str(v)
            elif metric.endswith("_ns"):
                cells[c] = units.duration(v)
            elif metric.endswith("_pct"):
                cells[c] = f"{v:.1f}%"
            else:
                cells[c] = _cell(v, None, human=True)
        rows.append({"metric": metric.removesuffix("_ns"), **cells})
    out = pl.DataFrame(rows, schema=dict.fromkeys(["metric", *stats], pl.String))
    return out, set(stats)


def _force() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.params.get("force"))


def check_output(path: str | os.PathLike[str], *, force: bool | None = None) -> None:
    """Apply the overwrite rule before any work: an existing ``path`` is an error (exit 2)
    unless ``--force`` was given."""
    if os.path.lexists(path) and not (_force() if force is None else force):
        raise UsageError(path, "exists; use --force to replace it or -o to choose another "
                               "name")


def wrote(path: str | os.PathLike[str], detail: str = "") -> None:
    """Say ``wrote PATH`` (and ``detail``) on stderr."""
    click.echo(f"wrote {path}" + (f" ({detail})" if detail else ""), err=True)


def emit(text: str, output: str | None) -> None:
    """Write ``text`` to stdout, or to ``output`` (overwrite rule, atomic, ``wrote``)."""
    if output is None:
        click.echo(text, nl=False)
        return
    check_output(output)
    write_text(output, text)
    wrote(output)


def emit_bytes(data: bytes, output: str, detail: str = "") -> None:
    """Write ``data`` to ``output`` (overwrite rule, atomic, ``wrote``)."""
    check_output(output)
    write_bytes(output, data)
    wrote(output, detail)


def emit_frame(frame: pl.DataFrame, fmt: str, output: str | None, *, empty: str,
               start_ns: int | None = None, **kw: Any) -> None:
    """:func:`render` ``frame`` and :func:`emit` it; an empty ``frame`` prints ``empty``
    (one line saying why there is nothing) instead of a bare table header. CSV and JSON
    still get their header / ``[]`` (scripts read them) and the line goes to stderr."""
    if frame.height == 0:
        if fmt == "table":
            emit(empty.rstrip(".") + ".\n", output)
            return
        click.echo(f"traceparse: {empty}", err=True)
    emit(render(frame, fmt, start_ns=start_ns, **kw), output)


def trace_start(tl: Timeline) -> int | None:
    """The trace start (first event on the trace clock) that table timestamps count from."""
    span = tl.span_ns()
    return int(span[0]) if span else None


def no_events(tl: Timeline, traces: Sequence[str]) -> str | None:
    """One line when the inputs hold no event at all (e.g. ``{"traceEvents": []}``)."""
    if any(tl.rows(t) for t in ("gpu", "api", "ranges", "ncu")):
        return None
    names = ", ".join(os.path.basename(t) for t in traces) or "the input"
    return f"{names}: no events in the trace (no GPU activity, API calls or ranges), " \
           "nothing to analyse"


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


def load_trace(path: str, ctx: click.Context | None = None, *,
               tables: Sequence[str] | None = None) -> Timeline:
    """Load ``path`` the way every command does: format detected, through the cache chosen
    by the global options (see :func:`cache_of`). ``tables``: the only timeline tables the
    command uses (None: all), see :func:`traceparse.loader.load`."""
    from traceparse.loader import load

    return load(path, cache=cache_of(ctx), tables=tables)
