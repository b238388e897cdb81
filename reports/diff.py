"""Render a :class:`traceparse.analyses.diff.Comparison` (time, tail and memory of NEW
against BASE) as terminal text, CSV/JSON rows, Markdown for a pull-request comment or
self-contained HTML.

Every format starts from :func:`gated_rows`: one row per gated quantity (``section`` time,
tail or memory) with ``base, new, change, change_pct``, the p-value or interval and
``failed``; JSON adds the verdict, thresholds, notes and the allocation changes. HTML goes
through jinja2 with autoescaping on (kernel names contain ``<`` and ``&``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from traceparse import units

if TYPE_CHECKING:
    from traceparse.analyses.diff import Comparison

ROW_SCHEMA = {"section": pl.String, "level": pl.String, "name": pl.String,
              "metric": pl.String, "rank": pl.Int32, "device_id": pl.Int32,
              "n_base": pl.Int64, "n_new": pl.Int64, "base": pl.Float64, "new": pl.Float64,
              "change": pl.Float64, "change_pct": pl.Float64, "p_value": pl.Float64,
              "ci_low": pl.Float64, "ci_high": pl.Float64, "flag": pl.String,
              "failed": pl.Boolean}
FLAGGED = ("regression", "improvement")


def gated_rows(c: Comparison) -> pl.DataFrame:
    """Every compared quantity in one frame (the CSV, and JSON's ``rows``)."""
    t = c.time.select(
        pl.lit("time").alias("section"), "level", "name",
        pl.when((pl.col("level") == "category") & (pl.col("per") == "step"))
        .then(pl.lit("median_per_step_ns")).otherwise(pl.lit("median_ns")).alias("metric"),
        pl.lit(None, pl.Int32).alias("rank"), pl.lit(None, pl.Int32).alias("device_id"),
        "n_base", "n_new", pl.col("base_median_ns").alias("base"),
        pl.col("new_median_ns").alias("new"),
        (pl.col("new_median_ns") - pl.col("base_median_ns")).alias("change"),
        pl.col("delta_pct").alias("change_pct"), "p_value",
        pl.lit(None, pl.Float64).alias("ci_low"), pl.lit(None, pl.Float64).alias("ci_high"),
        "flag", "failed")
    tl = c.tail.select(pl.lit("tail").alias("section"), "level", "name", "metric",
                       pl.lit(None, pl.Int32).alias("rank"),
                       pl.lit(None, pl.Int32).alias("device_id"), "n_base", "n_new", "base",
                       "new", "change", "change_pct", "p_value", "ci_low", "ci_high", "flag",
                       "failed")
    m = c.memory.select(pl.lit("memory").alias("section"), "level", "name",
                        pl.col("metric").str.replace(" ", "_") + "_bytes", "rank",
                        "device_id", pl.lit(None, pl.Int64).alias("n_base"),
                        pl.lit(None, pl.Int64).alias("n_new"), "base", "new", "change",
                        "change_pct", pl.lit(None, pl.Float64).alias("p_value"),
                        pl.lit(None, pl.Float64).alias("ci_low"),
                        pl.lit(None, pl.Float64).alias("ci_high"), "flag", "failed")
    return pl.concat([f.cast(ROW_SCHEMA) for f in (t, tl, m)], how="vertical")  # type: ignore[arg-type]


def _thresholds(c: Comparison) -> dict[str, Any]:
    t = c.thresholds
    return {"fail_above_pct": t.time_pct, "fail_tail_above_pct": t.tail_pct,
            "fail_memory_above_pct": t.memory_pct, "fail_memory_above_bytes": t.memory_bytes}


def to_json(c: Comparison, *, base: str, new: str) -> str:
    """``verdict, base, new, thresholds, failed`` (per gate), ``steps``, ``notes``, ``rows``
    (:func:`gated_rows`) and ``allocations``."""
    def clean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
                for r in rows]

    doc = {"verdict": c.verdict, "base": base, "new": new, "thresholds": _thresholds(c),
           "failed": c.failed, "steps": {"base": c.steps[0], "new": c.steps[1]},
           "notes": list(c.notes), "rows": clean(gated_rows(c).to_dicts()),
           "allocations": clean(c.allocations.to_dicts())}
    return json.dumps(doc, indent=1, default=str) + "\n"


# -- human formatting ------------------------------------------------------------------

def _signed(text: str, v: float | None) -> str:
    return f"+{text}" if v is not None and v > 0 else text


def _value(metric: str, v: float | None, *, sign: bool = False) -> str:
    if v is None or v != v:
        return ""
    if metric.endswith("_ns"):
        text = units.duration(abs(v) if sign else v)
        text = ("-" + text) if sign and v < 0 else text
    elif metric.endswith("bytes") or metric.startswith("peak"):
        text = units.size(v)
    elif metric == "tokens_per_s":
        text = f"{units.significant(v)} tok/s"
    else:
        text = f"{v:,.4g}"
    return _signed(text, v) if sign else text


def _pct(v: float | None) -> str:
    return "" if v is None or v != v else f"{v:+.1f}%"


def _p(v: float | None) -> str:
    return "" if v is None or v != v else (f"{v:.2g}" if v < 0.01 else f"{v:.3f}")


def _interval(r: dict[str, Any]) -> str:
    if r["ci_low"] is None:
        return ""
    return f"[{_value(r['metric'], r['ci_low'], sign=True)}, " \
           f"{_value(r['metric'], r['ci_high'], sign=True)}]"


def human_rows(rows: pl.DataFrame) -> list[dict[str, str]]:
    """Rows of :func:`gated_rows` as text cells for tables."""
    out = []
    for r in rows.iter_rows(named=True):
        metric = r["metric"]
        where = r["name"]
        if r["section"] == "memory" and r["level"] != "device":
            where = f"{r['name']} (device {r['device_id']})" if r["device_id"] != -1 \
                else f"{r['name']} (host)"
        out.append({"gate": r["section"], "level": r["level"], "name": where,
                    "metric": metric.removesuffix("_ns").removesuffix("_bytes"),
                    "base": _value(metric, r["base"]), "new": _value(metric, r["new"]),
                    "change": _value(metric, r["change"], sign=True),
                    "change %": _pct(r["change_pct"]),
                    "p / interval": _interval(r) or _p(r["p_value"]),
                    "flag": r["flag"] or "", "failed": "FAILED" if r["failed"] else ""})
    return out


def _gate_lines(c: Comparison, rows: pl.DataFrame) -> list[dict[str, str]]:
    t = c.thresholds
    mem = " and ".join(x for x in (f"> {t.memory_pct:g}%" if t.memory_pct is not None else "",
                                   f"> {units.size(t.memory_bytes)}" if t.memory_bytes
                                   is not None else "") if x)
    spec = {"time": ("median per kernel/op/range/category/step (Mann-Whitney)",
                     f"> {t.time_pct:g}%" if t.time_pct is not None else "not gated"),
            "tail": ("step P50/P95/P99, tokens/s (bootstrap)",
                     f"> {t.tail_pct:g}%" if t.tail_pct is not None else "not gated"),
            "memory": ("peak allocated/reserved per device/step/op", mem or "not gated")}
    out = []
    for gate, (what, th) in spec.items():
        part = rows.filter(pl.col("section") == gate)
        reg = int((part["flag"] == "regression").sum())
        bad = int(part["failed"].sum())
        status = "FAIL" if bad else ("pass" if th != "not gated" else "-")
        if part.height == 0 and gate != "time":
            status = "not compared"
        out.append({"gate": gate, "compares": what, "threshold": th,
                    "result": status, "failed": str(bad), "regressions": str(reg),
                    "rows": str(part.height)})
    return out


def _shown(rows: pl.DataFrame, top: int) -> tuple[pl.DataFrame, int]:
    """Failed rows, then other flagged regressions/improvements, then memory device rows;
    at most ``top`` per gate. Returns the rows and how many compared rows are not shown."""
    key = (pl.when(pl.col("failed")).then(0)
           .when(pl.col("flag") == "regression").then(1)
           .when(pl.col("flag") == "improvement").then(2)
           .when((pl.col("section") == "memory") & (pl.col("level") == "device")).then(3)
           .otherwise(9))
    order = {"time": 0, "tail": 1, "memory": 2}
    r = rows.with_columns(key.alias("_k"), pl.col("section").replace_strict(order).alias("_s"),
                          pl.col("change_pct").abs().alias("_a"))
    pick = (r.filter(pl.col("_k") < 9).sort(["_s", "_k", "_a"], descending=[False, False, True],
                                            nulls_last=True)
            .group_by("_s", maintain_order=True).head(top))
    return pick.drop("_k", "_s", "_a"), rows.height - pick.height


def _md_table(rows: list[dict[str, str]], width: int = 80) -> list[str]:
    """A Markdown table; cells cut to ``width`` characters (long kernel names)."""
    if not rows:
        return []
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    def cell(col: str, text: str) -> str:
        text = units.shorten(text, width).replace("|", "\\|")
        # names as code: GitHub would take a kernel's <...> for an HTML tag
        return f"`{text.replace('`', chr(39))}`" if col in ("name", "op") and text else text

    lines += ["| " + " | ".join(cell(c, r[c]) for c in cols) + " |" for r in rows]
    return lines


def _alloc_rows(c: Comparison, top: int) -> list[dict[str, str]]:
    return [{"op": r["op"], "device": "host" if r["device_id"] == -1 else str(r["device_id"]),
             "status": r["status"], "instances": f"{r['instances_base']} -> "
                                                 f"{r['instances_new']}",
             "largest rise": f"{units.size(r['base_max_rise_bytes'] or 0)} -> "
                             f"{units.size(r['new_max_rise_bytes'] or 0)}",
             "change": _signed(units.size(r["rise_change_bytes"]), r["rise_change_bytes"]),
             "new sizes": r["new_sizes"]}
            for r in c.allocations.head(top).iter_rows(named=True)]


def to_markdown(c: Comparison, *, base: str, new: str, top: int = 10) -> str:
    """Verdict first, one line per gate, then the failed and flagged rows (``top`` per gate)
    and the allocations that appeared or grew: short enough for a pull-request comment."""
    rows = gated_rows(c)
    shown, hidden = _shown(rows, top)
    lines = [f"**traceparse diff: {c.verdict}** `{base}` -> `{new}`", ""]
    lines += _md_table(_gate_lines(c, rows))
    lines += [""] + [f"- {n}" for n in c.notes]
    if shown.height:
        lines += ([""] if c.notes else []) + _md_table(human_rows(shown))
    if hidden:
        lines += ["", f"{hidden} compared rows without a flag not shown (`--format json` "
                      "has every row)."]
    alloc = _alloc_rows(c, top)
    if alloc:
        lines += ["", "Allocations that appeared or grew (per top-level op):", ""]
        lines += _md_table(alloc)
    return "\n".join(lines) + "\n"


def _sections(c: Comparison, rows: pl.DataFrame, top: int
              ) -> list[tuple[str, list[dict[str, str]], str]]:
    """(title, text rows, note) of each section of the text and HTML outputs: time (flagged
    rows, then the ``top`` unflagged per level), tail, memory (device rows, flagged steps
    and ops) and the allocations."""
    out: list[tuple[str, list[dict[str, str]], str]] = []
    mark = pl.col("flag").is_in(FLAGGED) | pl.col("failed")
    time_rows = rows.filter(pl.col("section") == "time")
    flagged = time_rows.filter(mark)
    rest = (time_rows.filter(~mark)
            .with_columns(pl.int_range(pl.len()).over("level").alias("_r")))
    shown = rest.filter(pl.col("_r") < top).drop("_r")
    hidden = rest.height - shown.height
    per_step = time_rows.filter(pl.col("metric") == "median_per_step_ns").height > 0
    out.append(("time (median per instance" + ("; categories: their time per step)"
                                               if per_step else ")"),
                human_rows(pl.concat([flagged, shown])),
                f"{hidden} unflagged rows not shown." if hidden else ""))
    tail = rows.filter(pl.col("section") == "tail")
    if tail.height:
        out.append(("tail (step time, finish to finish where steps overlap; interval: "
                    "bootstrap of the difference)",
                    human_rows(tail), ""))
    mem = rows.filter(pl.col("section") == "memory")
    if mem.height:
        show = mem.filter((pl.col("level") == "device") | mark)
        n = mem.height - show.height
        out.append(("memory (peaks; steps and ops shown when flagged)", human_rows(show),
                    f"{n} step and op rows without a flag not shown." if n else ""))
    alloc = _alloc_rows(c, top)
    if alloc:
        out.append(("allocations that appeared or grew (per top-level op)", alloc, ""))
    return out


def to_text(c: Comparison, *, base: str, new: str, top: int = 20) -> str:
    """Terminal text: the verdict, the gates, the notes, then :func:`_sections`."""
    from traceparse.cli.common import render_table

    def table(rows: list[dict[str, str]], drop: str = "gate") -> str:
        rows = [{k: v for k, v in r.items() if k != drop} for r in rows]
        return render_table(pl.DataFrame(rows, schema=dict.fromkeys(rows[0], pl.String)),
                            max_width=70) if rows else ""

    rows = gated_rows(c)
    out = [f"traceparse diff: {c.verdict}  ({base} -> {new})", "",
           table(_gate_lines(c, rows), drop=""), *c.notes]
    for title, data, note in _sections(c, rows, top):
        out += ["", title, "", table(data) if data else "(none)"]
        if note:
            out.append(note)
    return "\n".join(x.rstrip("\n") for x in out) + "\n"


_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>traceparse diff</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.n{text-align:left;
max-width:60em;overflow-wrap:anywhere}tr.regression{background:#fdd}
tr.improvement{background:#dfd}tr.FAILED{background:#f99}</style></head><body>
<h1>traceparse diff: {{ base }} &rarr; {{ new }}</h1>
<p><b>{{ verdict }}</b></p>
{% for n in notes %}<p>{{ n }}</p>{% endfor %}
{% for t in tables %}<h2>{{ t.title }}</h2>
<table><tr>{% for c in t.cols %}<th>{{ c }}</th>{% endfor %}</tr>
{% for r in t.rows %}<tr class="{{ r.get('flag', '') }} {{ r.get('failed', '') }}">
{% for c in t.cols %}<td{% if c in ('name', 'op', 'new sizes') %} class="n"{% endif %}>
{{ r[c] }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if t.note %}<p>{{ t.note }}</p>{% endif %}{% endfor %}
</body></html>
"""


def to_html(c: Comparison, *, base: str, new: str, top: int = 20) -> str:
    """Self-contained HTML: verdict, notes, gates and :func:`_sections`; all autoescaped."""
    import jinja2

    rows = gated_rows(c)
    tables = [{"title": "gates", "cols": list(_gate_lines(c, rows)[0]),
               "rows": _gate_lines(c, rows), "note": ""}]
    tables += [{"title": title, "cols": list(data[0]), "rows": data, "note": note}
               for title, data, note in _sections(c, rows, top) if data]
    env = jinja2.Environment(autoescape=True)
    return env.from_string(_HTML).render(base=base, new=new, verdict=c.verdict,
                                         tables=tables, notes=c.notes)
