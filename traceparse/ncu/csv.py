"""Read any Nsight Compute CSV page into two frames: launches (identity) and metrics (long).

Pages (detected from the header, never from the file name):
    * ``raw`` / ``raw_base``: one row per launch, one column per metric identifier, and a
      units row first (its ``ID`` cell is empty). ``raw_base`` when every unit in the units
      row is already a base unit (``--print-units base``).
    * ``details``: one row per (launch, section, metric label), plus rule rows.
    * ``roofline``: a details page of the ``SpeedOfLight_RooflineChart`` section printed with
      ``--print-details all`` (a ``Body Item Label`` column names the chart item).

Tolerated (FORMATS B.9): ``==PROF==`` / ``==WARNING==`` lines and program output before or
between rows, CRLF line ends, quoted commas and newlines, rows shorter than the header (rule
columns omitted), thousands separators, per-cell auto-scaled units, ``n/a`` and ``nan``.
Columns are found by header name; unknown identity columns between ``Host Name`` and
``Kernel Name`` (NVTX context from ``--nvtx``) are joined into one ``nvtx`` text.

The metrics frame has one row per printed numeric or text value:
``launch_id, section, item, label, metric, unit, base_unit, text, value, tol`` where
``metric`` is the metric identifier (raw pages; ``Command line profiler metrics`` rows; and
details labels known in :mod:`traceparse.ncu.labels`), ``value`` is in the base unit, and
``tol`` is half a unit of the last printed digit in the base unit.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field

import polars as pl

from traceparse.errors import NotATrace, TraceError
from traceparse.ncu.labels import label_metric_frame
from traceparse.ncu.units import normalise_unit

#: Identity columns ncu prints before the metrics (all versions, FORMATS B.2/B.3).
IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time",
            "Context", "Stream", "Block Size", "Grid Size", "Device", "CC")
#: Long-format (details) columns.
DETAIL_COLS = ("Section Name", "Body Item Label", "Metric Name", "Metric Unit", "Metric Value",
               "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
               "Estimated Speedup")
LOG_PREFIXES = ("==PROF==", "==WARNING==", "==ERROR==", "==INFO==")


@dataclass
class NcuPage:
    """One parsed ncu CSV page.

    Attributes:
        kind: ``raw``, ``raw_base``, ``details`` or ``roofline``.
        launches: one row per launch: ``launch_id`` plus the identity columns as text.
        metrics: long frame of values (see module docstring).
        rows: data rows read (after the header; the units row not counted).
        skipped: rows not used, by reason.
        rules: number of rule rows (details pages).
        log_lines: ``==PROF==``-style and other non-CSV lines seen.
    """

    kind: str
    launches: pl.DataFrame
    metrics: pl.DataFrame
    rows: int
    skipped: dict[str, int] = field(default_factory=dict)
    rules: int = 0
    log_lines: int = 0


#: Largest decompressed size accepted for a gzipped CSV (a gzip bomb is refused past it).
MAX_CSV_BYTES = 4 << 30


def _gunzip(path: str | os.PathLike[str], data: bytes) -> bytes:
    """Decompress a gzipped CSV, refusing truncated streams and output past MAX_CSV_BYTES."""
    import zlib

    d = zlib.decompressobj(wbits=31)
    try:
        out = d.decompress(data, MAX_CSV_BYTES + 1)
    except zlib.error as exc:
        raise TraceError(path, f"corrupt gzip stream: {exc}") from None
    if len(out) > MAX_CSV_BYTES:
        raise TraceError(path, f"gzip expands past {MAX_CSV_BYTES >> 30} GiB: refused")
    if not d.eof:
        raise TraceError(path, "truncated gzip stream")
    return out


def _read_text(path: str | os.PathLike[str]) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(path, data)
    if not data.strip():
        raise TraceError(path, "empty file")
    for enc in ("utf-8-sig", "latin-1"):
        try:
            return data.decode(enc)
        except UnicodeDecodeError:
            continue
    raise TraceError(path, "not a text file")  # pragma: no cover (latin-1 never fails)


#: The section titles of ``ncu --import R --csv --page session`` (no kernel table).
_SESSION_RE = re.compile(r'^(Session Info|Device Attributes)\r?\n"(Session|Device) Attribute",',
                         re.MULTILINE)


def _find_header(path: str | os.PathLike[str], text: str) -> tuple[int, int]:
    """Offset of the header line and the number of non-CSV lines before it."""
    pos = 0
    before = 0
    first_log = ""
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        if stripped.startswith('"ID",') or stripped.startswith("ID,"):
            return pos + (len(line) - len(stripped)), before
        if stripped.strip():
            before += 1
            if not first_log and stripped.startswith("==ERROR=="):
                first_log = stripped.strip()
        pos += len(line)
    if _SESSION_RE.search(text[:4096]):
        raise NotATrace(path, "an Nsight Compute session page (--page session): launch "
                              "settings, session and device attributes, no kernel rows; "
                              "export --page raw or --page details for the kernels")
    hint = f" (first error line: {first_log[:120]})" if first_log else ""
    # with ncu's own log lines it is a failed profile; without, some other CSV
    raise (TraceError if first_log else NotATrace)(
        path, f'no Nsight Compute CSV in the file: no header row starting with "ID" among '
              f"{before} non-empty lines{hint}")


def _rows(path: str | os.PathLike[str], text: str) -> tuple[list[str], list[list[str]], int]:
    start, before = _find_header(path, text)
    # ncu prints whole kernel signatures; allow fields up to the file size (default 128 KiB)
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    try:
        rows = list(csv.reader(io.StringIO(text[start:], newline="")))
    except csv.Error as exc:
        raise TraceError(path, f"malformed CSV: {exc}") from None
    header = [h.strip() for h in rows[0]]
    while header and header[-1] == "":
        header.pop()
    return header, rows[1:], before


def _launch_frame(header: list[str], rows: list[list[str]]) -> pl.DataFrame:
    """Identity columns of the launch rows (first row per ID)."""
    idx = {h: i for i, h in enumerate(header)}
    host = idx.get("Host Name", -1)
    kern = idx["Kernel Name"]
    nvtx_cols = [i for i in range(host + 1, kern) if header[i] not in IDENTITY] if host >= 0 \
        else []
    seen: dict[int, list[str | None]] = {}
    for r in rows:
        lid = int(r[0])
        if lid in seen:
            continue
        vals: list[str | None] = [r[idx[c]] if c in idx and idx[c] < len(r) else None
                                  for c in IDENTITY[1:]]
        nv = " | ".join(r[i].strip() for i in nvtx_cols if i < len(r) and r[i].strip())
        seen[lid] = [*vals, nv or None]
    cols = ["launch_id", *[c.lower().replace(" ", "_") for c in IDENTITY[1:]], "nvtx"]
    data = [[lid, *v] for lid, v in sorted(seen.items())]
    schema = {c: (pl.Int64 if c == "launch_id" else pl.String) for c in cols}
    return pl.DataFrame(data, schema=schema, orient="row")


def _width_ok(r: list[str], width: int) -> bool:
    """A data row has the header's cells (trailing empty cells, from a trailing comma,
    allowed); shorter rows were cut short, longer ones are not from this header."""
    return len(r) >= width


def _is_launch(r: list[str]) -> bool:
    """A launch row starts with an ID: a non-negative integer that fits in int64."""
    return bool(r) and r[0].strip().isdigit() and len(r[0].strip()) <= 18


def _numeric(frame: pl.DataFrame) -> pl.DataFrame:
    """Add ``value`` and ``tol`` (base units) from ``text`` and ``factor``."""
    t = pl.col("text").str.strip_chars()
    clean = t.str.replace_all(",", "", literal=True)
    low = clean.str.to_lowercase()
    num = (pl.when(low.is_in(["nan", "-nan", "+nan"])).then(pl.lit(float("nan")))
           .otherwise(clean.cast(pl.Float64, strict=False)))
    dec = (pl.when(clean.str.contains(".", literal=True))
           .then(clean.str.len_chars() - clean.str.find(".", literal=True) - 1)
           .otherwise(0)).cast(pl.Float64)
    return frame.with_columns(
        (num * pl.col("factor")).alias("value"),
        (0.5 * pl.lit(10.0).pow(-dec) * pl.col("factor")).alias("tol"),
    ).drop("factor")


def _unit_frame(units: list[str]) -> pl.DataFrame:
    uniq = sorted(set(units))
    norm = [normalise_unit(u) for u in uniq]
    return pl.DataFrame({"unit": uniq, "factor": [n[0] for n in norm],
                         "base_unit": [n[1] for n in norm]},
                        schema={"unit": pl.String, "factor": pl.Float64, "base_unit": pl.String})


METRIC_SCHEMA = {"launch_id": pl.Int64, "section": pl.String, "item": pl.String,
                 "label": pl.String, "metric": pl.String, "unit": pl.String,
                 "base_unit": pl.String, "text": pl.String, "value": pl.Float64,
                 "tol": pl.Float64}


def _raw(header: list[str], rows: list[list[str]], skipped: dict[str, int]) -> NcuPage:
    idx = {h: i for i, h in enumerate(header)}
    units: list[str] | None = None
    launches: list[list[str]] = []
    for r in rows:
        if not r or not any(c.strip() for c in r):
            continue
        if r[0].strip() == "" and units is None:
            units = r
            continue
        if _is_launch(r):
            if _width_ok(r, len(header)) and not any(c.strip() for c in r[len(header):]):
                launches.append(r)
            else:
                key = "wrong number of columns (cut short or extra cells)"
                skipped[key] = skipped.get(key, 0) + 1
        else:
            key = "profiler log line" if r[0].startswith(LOG_PREFIXES) else "not a launch row"
            skipped[key] = skipped.get(key, 0) + 1
    if not launches:
        return NcuPage("raw", pl.DataFrame(schema={"launch_id": pl.Int64}),
                       pl.DataFrame(schema=METRIC_SCHEMA), rows=0, skipped=skipped)
    first_metric = max(idx.get(c, -1) for c in IDENTITY) + 1
    names = header[first_metric:]
    units = (units or [])[first_metric:first_metric + len(names)]
    units += [""] * (len(names) - len(units))
    n = len(names)
    cells = [(r + [""] * (first_metric + n - len(r)))[first_metric:first_metric + n]
             for r in launches]
    ids = [int(r[0]) for r in launches]
    wide = pl.DataFrame([ids, *zip(*cells, strict=True)] if cells else [[]] * (n + 1),
                        schema={"launch_id": pl.Int64, **{f"c{i}": pl.String for i in range(n)}},
                        orient="col")
    long = wide.unpivot(index="launch_id", variable_name="col", value_name="text")
    meta = pl.DataFrame({"col": [f"c{i}" for i in range(n)], "metric": names, "unit": units},
                        schema={"col": pl.String, "metric": pl.String, "unit": pl.String})
    long = (long.join(meta, on="col", how="left").drop("col")
            .filter(pl.col("text").str.strip_chars() != "")
            .join(_unit_frame(units), on="unit", how="left"))
    long = _numeric(long).with_columns(pl.lit(None, pl.String).alias("section"),
                                       pl.lit(None, pl.String).alias("item"),
                                       pl.col("metric").alias("label"))
    all_base = all(normalise_unit(u)[0] == 1.0 for u in units)
    kind = "raw_base" if all_base else "raw"
    return NcuPage(kind, _launch_frame(header, launches), long.select(list(METRIC_SCHEMA)),
                   rows=len(launches), skipped=skipped)


def _details(header: list[str], rows: list[list[str]], skipped: dict[str, int]) -> NcuPage:
    idx = {h: i for i, h in enumerate(header)}
    width = len(header)
    keep: list[list[str]] = []
    rules = 0
    mi = idx["Metric Name"]
    ri = idx.get("Rule Name")
    need = min(width, idx.get("Metric Value", mi) + 1)
    ok_rows: list[list[str]] = []
    for r in rows:
        if not r or not any(c.strip() for c in r):
            continue
        if not _is_launch(r):
            key = "profiler log line" if r[0].startswith(LOG_PREFIXES) else "not a launch row"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        # metric rows may stop after "Metric Value" (the rule columns are then omitted)
        if not _width_ok(r, need) or (len(r) > width and any(c.strip() for c in r[width:])):
            key = "wrong number of columns (cut short or extra cells)"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        if len(r) < width:
            r = r + [""] * (width - len(r))
        ok_rows.append(r)
        if r[mi].strip():
            keep.append(r)
        elif ri is not None and r[ri].strip():
            rules += 1
        else:
            skipped["row without metric or rule"] = skipped.get("row without metric or rule",
                                                                0) + 1

    def col(name: str) -> list[str | None]:
        i = idx.get(name)
        return [r[i] for r in keep] if i is not None else [None] * len(keep)

    frame = pl.DataFrame({
        "launch_id": [int(r[0]) for r in keep], "section": col("Section Name"),
        "item": col("Body Item Label"), "label": col("Metric Name"),
        "unit": col("Metric Unit"), "text": col("Metric Value"),
    }, schema={"launch_id": pl.Int64, "section": pl.String, "item": pl.String,
               "label": pl.String, "unit": pl.String, "text": pl.String})
    frame = frame.with_columns(pl.col("unit").fill_null(""), pl.col("text").fill_null(""),
                               pl.col("item").fill_null(""))
    frame = frame.join(_unit_frame(frame["unit"].to_list()), on="unit", how="left")
    frame = _numeric(frame)
    frame = label_metric_frame(frame)
    kind = "roofline" if "Body Item Label" in idx else "details"
    return NcuPage(kind, _launch_frame(header, ok_rows), frame.select(list(METRIC_SCHEMA)),
                   rows=len(keep) + rules + sum(skipped.values()), skipped=skipped,
                   rules=rules)


def read_page(path: str | os.PathLike[str]) -> NcuPage:
    """Parse one ncu CSV file (any page kind).

    Raises:
        TraceError: the file is empty, unreadable, holds no ncu CSV header, lacks the
            ``ID``/``Kernel Name`` columns, or has no launch rows.
    """
    text = _read_text(path)
    header, rows, before = _rows(path, text)
    for need in ("ID", "Kernel Name"):
        if need not in header:
            raise TraceError(path, f"ncu CSV header has no {need!r} column")
    skipped: dict[str, int] = {}
    page = _details(header, rows, skipped) if "Metric Name" in header else \
        _raw(header, rows, skipped)
    page.log_lines = before
    if page.launches.height == 0:
        raise TraceError(path, "ncu CSV has a header but no kernel launch rows")
    return page
