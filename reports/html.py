"""Render a report payload (:func:`traceparse.reports.payload.build_payload`) as one self-contained
HTML
file.

The page inlines everything: CSS, a few lines of JS (table sort/search and an error catcher),
SVG figures drawn by :mod:`traceparse.reports.figures`, and the payload itself as JSON in a
``<script type="application/json" id="payload">`` block. It loads nothing from the network
and holds no external URL, so it works offline and from an e-mail attachment.

Escaping: the jinja2 environment autoescapes every string (kernel names, NVTX text, file
names come from traces and are untrusted). The embedded JSON is written with ``<``, ``>``
and ``&`` as ``\\u003c``, ``\\u003e``, ``\\u0026``, so no trace string can close the script
element. SVG markup from matplotlib is the only markup inserted unescaped, and matplotlib
escapes the text it writes.

Determinism: the output is a pure function of the payload (no date, no host, no path), so
the same input gives the same bytes.
"""

from __future__ import annotations

from typing import Any

import jinja2
import orjson
from markupsafe import Markup, escape

from traceparse import units
from traceparse.reports import figures
from traceparse.vendor import amd_vendors

ATTRIBUTION_PARTS = ("compute", "memory", "communication", "launch_overhead", "warmup",
                     "host_sync", "idle")


def json_for_script(value: Any) -> Markup:
    """``value`` as JSON safe to place inside a ``<script>`` element.

    Example:
        >>> str(json_for_script({"k": "</script>&"}))
        '{"k":"\\\\u003c/script\\\\u003e\\\\u0026"}'
    """
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    text = text.replace("://", ":\\/\\/")  # JSON-equal; keeps URL text out of the page
    return Markup(text)


def fmt_duration(ns: Any) -> str:
    """A duration in human units (ns, µs, ms, s), as the CLI prints it; '' for none."""
    return "" if ns is None else units.duration(round(float(ns)))


def _finalize(value: Any) -> Any:
    """Escape every printed string ourselves (autoescape would do the same) and write
    ``://`` as ``:&#47;&#47;``, so a URL inside trace text (NVTX, file names, datasheet
    sources) renders the same but the page holds no ``http://`` / ``https://`` at all."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return Markup(str(escape(value)).replace("://", ":&#47;&#47;"))
    return value


def fmt_ms(ns: Any, digits: int = 3) -> str:
    """Nanoseconds as milliseconds text (``""`` for missing)."""
    if ns is None:
        return ""
    return f"{float(ns) / 1e6:,.{digits}f}"


def fmt_us(ns: Any, digits: int = 2) -> str:
    """Nanoseconds as microseconds text."""
    if ns is None:
        return ""
    return f"{float(ns) / 1e3:,.{digits}f}"


def fmt_pct(x: Any, digits: int = 1) -> str:
    """A percentage value (already in %) as text."""
    if x is None:
        return ""
    return f"{float(x):.{digits}f}%"


def fmt_int(x: Any) -> str:
    """An integer with thousands separators; a float is rounded, not truncated (tokens/s
    15,556.9 is ``15,557``, as the CLI prints it)."""
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:,.0f}"
    return f"{int(x):,}"


def fmt_num(x: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits."""
    if x is None:
        return ""
    if isinstance(x, int):
        return f"{x:,}"
    return f"{float(x):,.{digits}g}" if abs(float(x)) < 1e6 else f"{float(x):,.0f}"


def fmt_bytes(x: Any) -> str:
    """Bytes with a binary unit."""
    if x is None:
        return ""
    v = float(x)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    return str(x)


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_si(x: Any, unit: str, digits: int = 3) -> str:
    """A rate or frequency with an SI prefix and ``digits`` significant digits:
    ``fmt_si(3.35232e12, "B/s")`` is ``3.35 TB/s``. Clocks are whole MHz, as the clock notes
    write them: ``fmt_si(1.695e9, "Hz")`` is ``1,695 MHz``."""
    if x is None:
        return ""
    v = float(x)
    if unit == "Hz":
        return f"{v / 1e6:,.0f} MHz"
    # trailing zeros kept (1.60 GFLOP/s, never 1.6), never an exponent
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{units.significant(v / scale, digits)} {prefix}{unit}"
    return f"{units.significant(v, digits)} {unit}"


def fmt_id(x: Any) -> str:
    """An identifier (thread, process, correlation id): the integer, no thousands separators."""
    if x is None:
        return ""
    return str(int(x))


def fmt_bool(x: Any) -> str:
    """A flag as ``yes`` / ``no`` (``""`` for missing)."""
    if x is None:
        return ""
    return "yes" if x else "no"


def environment() -> jinja2.Environment:
    """The jinja2 environment of the report templates (autoescape on for every template)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("traceparse.reports", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
    )
    env.filters.update(ms=fmt_ms, us=fmt_us, pct=fmt_pct, int=fmt_int, num=fmt_num,
                       bytes=fmt_bytes, si=fmt_si, id=fmt_id, bool=fmt_bool,
                       duration=fmt_duration, script_json=json_for_script)
    return env


def _figures(payload: dict[str, Any]) -> dict[str, Markup]:
    """Every SVG figure the payload supports, as markup."""
    out: dict[str, Markup] = {}
    tl = payload.get("timeline")
    if tl and tl.get("lanes"):
        out["timeline"] = Markup(figures.timeline_overview(tl))
    attr = payload.get("attribution")
    if attr and attr.get("rows"):
        present = [p for p in ATTRIBUTION_PARTS
                   if (attr.get("totals") or {}).get(f"{p}_ns", 1)]  # no legend for absent parts
        out["attribution"] = Markup(figures.attribution_bars(attr["rows"], present))
    launches = payload.get("launches")
    if launches and launches.get("histogram") and launches["histogram"].get("counts"):
        h = launches["histogram"]
        out["launches"] = Markup(figures.histogram(
            h["edges_us"], h["counts"], xlabel="launch latency: API call start to kernel "
            "start (µs)", logx=bool(h.get("log"))))
    steps = payload.get("steps")
    if steps and steps.get("rows"):
        vals = [r["dur_ns"] / 1e6 for r in steps["rows"]]
        labels = [str(r.get("label", i)) for i, r in enumerate(steps["rows"])]
        marks = {k.upper(): steps["stats"][k] / 1e6 for k in ("p50", "p95", "p99")
                 if steps.get("stats", {}).get(k) is not None}
        out["steps"] = Markup(figures.step_bars(labels, vals, marks))
    tree = payload.get("op_tree")
    if tree and tree.get("nodes"):
        from traceparse.reports.llm_sections import icicle_svg

        out["icicle"] = Markup(icicle_svg(tree["nodes"]))
    roof = payload.get("roofline")
    if roof and roof.get("points") and roof.get("ceilings"):
        out["roofline"] = Markup(figures.roofline(roof["points"], roof["ceilings"],
                                                  title=roof.get("title") or "Roofline"))
    from traceparse.reports.hw_figures import figures as hw_figures

    out.update({k: Markup(v) for k, v in hw_figures(payload).items()})
    return out


def _c(key: str, label: str, fmt: str = "text") -> dict[str, str]:
    return {"key": key, "label": label, "fmt": fmt}


def overview_bar(attribution: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The first screen's attribution bar: one segment per part present in the summed
    windows (``part``, ``label``, ``ns``, ``pct`` of the summed windows, ``color``).

    Example:
        >>> bar = overview_bar({"totals": {"compute_ns": 30, "idle_ns": 10, "memory_ns": 0,
        ...                                "window_ns": 40}})
        >>> [(b["part"], b["pct"]) for b in bar]
        [('compute', 75.0), ('idle', 25.0)]
    """
    tot = (attribution or {}).get("totals") or {}
    window = tot.get("window_ns") or 0
    if not window:
        return []
    return [{"part": part, "label": part.replace("_", " "), "ns": tot[f"{part}_ns"],
             "pct": 100.0 * tot[f"{part}_ns"] / window,
             "color": figures.COLORS.get(part, "#999999")}
            for part in ATTRIBUTION_PARTS if tot.get(f"{part}_ns")]


def attribution_table(attribution: dict[str, Any]) -> dict[str, Any]:
    """The attribution table for the page: one column per part the trace has (ms, with its
    share of the window beside it), the communication-overlap columns only when the trace
    has communication. 18 columns did not fit 1,400 px; parts that are zero on every device
    say nothing."""
    data = attribution["rows"]
    tot = attribution.get("totals") or {}
    cols = [_c("label", "rank / device"), _c("window_ns", "window (ms)", "ms")]
    for part in ATTRIBUTION_PARTS:
        if tot.get(f"{part}_ns"):
            cols.append({"key": f"{part}_ns", "label": part.replace("_", " "),
                         "fmt": "ms_pct", "pct": f"{part}_pct"})
    comm = tot.get("communication_ns") or tot.get("overlapped_comm_ns")
    if comm:
        cols += [_c("overlapped_comm_ns", "comm hidden (ms)", "ms"),
                 _c("comm_overlap_pct", "comm overlap", "pct")]
    return {"columns": cols, "rows": data}


def _view(payload: dict[str, Any]) -> dict[str, Any]:
    """Display tables (column specs + rows) for the parts of the payload that the template
    prints as tables without a section-provided spec."""
    k = payload["kernels"]
    kernel_cols = [_c("name", "kernel"), _c("category", "category"),
                   _c("total_ns", "total (ms)", "ms"), _c("pct", "time %", "pct"),
                   _c("instances", "instances", "int"), _c("avg_ns", "avg (µs)", "us"),
                   _c("med_ns", "median (µs)", "us"), _c("min_ns", "min (µs)", "us"),
                   _c("max_ns", "max (µs)", "us"), _c("std_ns", "stddev (µs)", "us")]
    other = k.get("other")
    footer = None
    if other:
        footer = {"name": f"other ({other['names']:,} kernels)", "total_ns": other["total_ns"],
                  "pct": other["pct"], "instances": other["instances"]}
    dev_rows = payload["devices"]
    hidden = 0
    if len({r.get("rank") for r in dev_rows}) > 1:
        # several ranks each list every GPU of their node (8 DLRM ranks: 64 rows, 56 idle):
        # keep the devices that ran something and say how many rows were folded
        active = [r for r in dev_rows if r.get("activities")]
        if active:
            hidden, dev_rows = len(dev_rows) - len(active), active
    # AMD devices have compute units, as the CLI says (traceparse.vendor)
    units_label = "compute units" if amd_vendors(r.get("vendor") for r in dev_rows) else "SMs"
    dev_keys = [("name", "name", "text"), ("sm_count", units_label, "int"),
                ("clock_hz", "max clock", "hz"), ("memory_bytes", "memory", "bytes"),
                ("memory_bandwidth_bps", "memory bandwidth", "bps"),
                ("compute_major", "CC major", "int"), ("compute_minor", "CC minor", "int"),
                ("activities", "GPU activities", "int"),
                ("busy_ns", "activity time, summed (ms)", "ms")]
    present = {key for r in dev_rows for key, v in r.items() if v is not None}
    dev_cols = [_c("rank", "rank", "int"), _c("device_id", "device", "int")] + [
        _c(key, label, fmt) for key, label, fmt in dev_keys if key in present]
    prov = payload["provenance"]
    extra: dict[str, Any] = {"overview_bar": overview_bar(payload.get("attribution"))}
    if payload.get("attribution"):
        extra["attribution_table"] = attribution_table(payload["attribution"])
    return payload | extra | {
        "kernel_table": {"columns": kernel_cols, "rows": k["rows"], "footer": footer},
        "device_table": {"columns": dev_cols, "rows": dev_rows, "hidden": hidden},
        "provenance_tables": {
            "sources": {"columns": [_c("rank", "rank", "int"), _c("file", "file"),
                                    _c("format", "format"), _c("tool_version", "tool version"),
                                    _c("format_version", "format version"),
                                    _c("rank_source", "rank from")],
                        "rows": prov["sources"]},
            "parsed": {"columns": [_c("rank", "rank", "int"), _c("table", "table"),
                                   _c("count", "rows", "int")], "rows": prov["parsed"]},
            "skipped": {"columns": [_c("rank", "rank", "int"), _c("table", "table"),
                                    _c("source", "source"), _c("reason", "reason"),
                                    _c("count", "rows", "int")], "rows": prov["skipped"]},
        },
    }


def render_html(payload: dict[str, Any]) -> str:
    """The report page for ``payload`` (a str; write it with :mod:`traceparse.atomic`)."""
    figs = _figures(payload)
    data = payload
    return environment().get_template("report.html.j2").render(
        p=_view(payload), figs=figs, data=data, parts=ATTRIBUTION_PARTS)
