"""Render a :func:`traceparse.analyses.diff.diff` frame as Markdown or self-contained HTML.

HTML goes through jinja2 with autoescaping on (kernel names contain ``<`` and ``&``), with
inline CSS and no external resources. Both show the flagged rows first, then up to ``top``
unflagged rows per level by |total delta| (the rest is counted, not listed).
"""

from __future__ import annotations

from typing import Any

import polars as pl

_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>traceparse diff</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.n{text-align:left;
max-width:60em;overflow-wrap:anywhere}tr.regression{background:#fdd}
tr.improvement{background:#dfd}</style></head><body>
<h1>traceparse diff: {{ base }} &rarr; {{ new }}</h1>
<p>{{ summary }}</p>
<table><tr>{% for c in cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for r in rows %}<tr class="{{ r.flag }}">{% for c in cols %}
<td{% if c == 'name' %} class="n"{% endif %}>{{ r[c] }}</td>{% endfor %}</tr>
{% endfor %}</table>{% if hidden %}<p>{{ hidden }} unflagged rows not shown.</p>{% endif %}
</body></html>
"""

COLS = ["level", "name", "n_base", "n_new", "base_median_ns", "new_median_ns", "delta_pct",
        "total_delta_ns", "p_value", "flag"]


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-2 and v != 0 else f"{v:,.1f}"
    return str(v)


def _selected(d: pl.DataFrame, top: int) -> tuple[list[dict[str, str]], int, str]:
    flagged = d.filter(pl.col("flag").is_in(["regression", "improvement"]))
    rest = (d.filter(~pl.col("flag").is_in(["regression", "improvement"]))
            .with_columns(pl.int_range(pl.len()).over("level").alias("_r")))
    shown = rest.filter(pl.col("_r") < top).drop("_r")
    rows = [{c: _fmt(r[c]) for c in COLS} for r in pl.concat([flagged, shown]).iter_rows(
        named=True)]
    n_reg = int((d["flag"] == "regression").sum())
    n_imp = int((d["flag"] == "improvement").sum())
    summary = f"{n_reg} regressions, {n_imp} improvements flagged over {d.height} keys."
    return rows, rest.height - shown.height, summary


def to_markdown(d: pl.DataFrame, *, base: str, new: str, top: int = 20) -> str:
    """Markdown summary (flagged rows, then the top unflagged rows per level)."""
    rows, hidden, summary = _selected(d, top)
    esc = [{k: v.replace("|", "\\|") for k, v in r.items()} for r in rows]
    lines = [f"# traceparse diff: `{base}` -> `{new}`", "", summary, "",
             "| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    lines += ["| " + " | ".join(r[c] for c in COLS) + " |" for r in esc]
    if hidden:
        lines += ["", f"{hidden} unflagged rows not shown."]
    return "\n".join(lines) + "\n"


def to_html(d: pl.DataFrame, *, base: str, new: str, top: int = 20) -> str:
    """Self-contained HTML summary, every string autoescaped."""
    import jinja2

    rows, hidden, summary = _selected(d, top)
    env = jinja2.Environment(autoescape=True)
    return env.from_string(_HTML).render(base=base, new=new, rows=rows, cols=COLS,
                                         hidden=hidden, summary=summary)
