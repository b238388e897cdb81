"""The GPU ceiling table shipped with traceparse, name matching, and user overrides.

``roofline/data/gpus.csv`` holds one row per GPU model: DENSE peaks per precision (TFLOP/s,
FMA = 2 FLOPs), memory bandwidth (GB/s = 1e9 B/s), L2 (``l2_mib``: MiB = 2**20 B, the size
the devices report: an A100's 40 is ``l2CacheSize`` 41,943,040 B), SMs, memory (GB as
marketed), the boost clock
the vector peaks assume and the clock the tensor peaks assume, and a source per row
(FORMATS D.1-D.2). Datasheet peaks are at *boost* clocks; ncu profiles at *base* clock by
default, so :func:`ceilings` states the clock each ceiling assumes and prefers the peaks an
ncu file measured itself.

Matching (FORMATS D.4): lower-case, drop ``nvidia``/``tesla``/``geforce``/``amd instinct``
prefixes, collapse spaces/dashes/underscores; exact alias first, then the longest table name
contained in the string, then the model number alone (a token with a digit: ``h100``,
``mi300x``; never a family word such as ``rtx``, so an RTX 3070 is not an RTX 3080); a
form-factor word of the name (``pcie``, ``nvl``, ``sxm``, ``laptop`` ...) must be in the
row's names (an H200 NVL is not the H200 SXM row); an SM count the input gives must be the
row's (a MIG slice or one MI250X GCD is not the whole GPU); ties broken by SM count and memory size
(A100 40 vs 80 GB, H100 SXM vs PCIe by 132 vs 114 SMs; a ``NNgb`` in the name when the input
gives no memory size).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from traceparse.errors import TraceError

#: ceiling name -> table column (TFLOP/s or TB/s after scaling).
PRECISION_COLS = {"fp64": "fp64_tflops", "fp64_tensor": "fp64_tensor_tflops",
                  "fp32": "fp32_tflops", "tf32_tensor": "tf32_tensor_tflops",
                  "bf16_tensor": "bf16_tensor_tflops", "fp16_tensor": "fp16_tensor_tflops",
                  "fp8_tensor": "fp8_tensor_tflops", "int8_tensor": "int8_tensor_tops"}
_PREFIXES = ("nvidia ", "tesla ", "geforce ", "amd instinct ", "amd ", "quadro ")


@lru_cache(maxsize=1)
def table() -> pl.DataFrame:
    """The shipped ceiling table (one row per GPU model)."""
    path = resources.files("traceparse.roofline") / "data" / "gpus.csv"
    with resources.as_file(path) as p:
        return pl.read_csv(p, infer_schema_length=None,
                           schema_overrides={"compute_capability": pl.String,
                                             "aliases": pl.String, "source": pl.String})


def normalise(name: str) -> str:
    """Canonical form of a device name for matching.

    Example:
        >>> normalise("NVIDIA A100-SXM4-40GB")
        'a100 sxm4 40gb'
        >>> normalise("Tesla V100-SXM2-32GB")
        'v100 sxm2 32gb'
    """
    s = name.lower().strip()
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if s.startswith(p):
                s, changed = s[len(p):], True
    s = re.sub(r"[\s_\-/()]+", " ", s)
    return s.strip()


def _keys(row: dict[str, object]) -> list[str]:
    names = [str(row["name"])] + [a for a in str(row.get("aliases") or "").split(";") if a]
    return [normalise(n) for n in names]


def _tokens(s: str) -> list[str]:
    return s.split()


#: Words that name a board variant with its own peaks: a name carrying one matches only a
#: row whose names carry it too (an "H100" without one may still be any H100 row).
_VARIANT_WORDS = ("pcie", "nvl", "sxm", "sxm2", "sxm4", "sxm5", "laptop", "mobile", "maxq",
                  "max")
#: Words that make another chip of the same number (RTX 2080 vs 2080 Ti): name and row must
#: agree on each, both ways.
_MODEL_WORDS = ("ti", "super")


def _variant_ok(want: list[str], row: dict[str, object]) -> bool:
    """Every variant word of the name appears among the row's name tokens, and name and row
    agree on the model words.

    Example:
        >>> row = {"name": "H200 SXM 141GB", "aliases": "NVIDIA H200"}
        >>> _variant_ok(["h200"], row), _variant_ok(["h200", "nvl"], row)
        (True, False)
    """
    have = {t for k in _keys(row) for t in _tokens(k)}
    if any((w in want) != (w in have) for w in _MODEL_WORDS):
        return False
    return all(t in have for t in want if t in _VARIANT_WORDS)


def _model_token(row: dict[str, object]) -> str | None:
    """The row's model number: the first token of its name with a digit (``h100``,
    ``4090``, ``mi300x``), or None."""
    return next((t for t in _tokens(normalise(str(row["name"])))
                 if any(c.isdigit() for c in t)), None)


def stated_memory_gb(name: str) -> int | None:
    """The memory size (GB) a device name states, else None: the one reading of a name's
    size for matching a row and for ``--gpu NAME``.

    Example:
        >>> stated_memory_gb("Tesla V100-SXM2-16GB"), stated_memory_gb("NVIDIA H100 PCIe")
        (16, None)
    """
    size = re.search(r"\b(\d+)\s*gb\b", normalise(name))
    return int(size.group(1)) if size else None


def match(name: str | None, *, sm_count: int | None = None,
          memory_bytes: int | None = None) -> dict[str, object] | None:
    """Return the ceiling-table row for a device, or None when nothing matches.

    Args:
        name: device name from any input (nsys ``TARGET_INFO_GPU.name``, torch
            ``deviceProperties.name``, ncu ``device__attribute_display_name``).
        sm_count: SMs reported by the input; disambiguates variants.
        memory_bytes: device memory; disambiguates 40/80 GB variants.
    """
    if not name:
        return None
    want = normalise(name)
    rows = table().to_dicts()
    exact = [r for r in rows if want in _keys(r)]
    cands = exact
    if not cands:
        # every token of a table key appears in the name (order kept), longest key wins
        scored = []
        wt = _tokens(want)
        rows = [r for r in rows if _variant_ok(wt, r)]
        for r in rows:
            for k in _keys(r):
                kt = _tokens(k)
                if kt and all(t in wt for t in kt):
                    scored.append((len(kt), r))
        if not scored:
            # model number only (e.g. "h100" from "h100 sxm5 80gb"); a family word such as
            # "rtx" or "titan" is no model
            for r in rows:
                if _model_token(r) in wt:
                    scored.append((0, r))
        if not scored:
            return None
        best = max(s for s, _ in scored)
        cands = [r for s, r in scored if s == best]
    if sm_count and not any(r["sm_count"] == sm_count for r in cands):
        # the input's SM count is no candidate's: another part of the model (one MI250X GCD
        # = 110 CUs, not the 220 of the whole MI250X) or a slice of it (an A100 MIG 3g.20gb
        # instance = 42 SMs), never the whole GPU's ceilings
        model = _model_token(cands[0])
        cands = [r for r in table().to_dicts()
                 if _model_token(r) == model and r["sm_count"] == sm_count]
        if not cands:
            return None
    if len(cands) > 1 and sm_count:
        cands = [r for r in cands if r["sm_count"] == sm_count]
    if not memory_bytes:  # "a100 80gb": the size the name states
        size = stated_memory_gb(want)
        memory_bytes = size * 10**9 if size else None
    if len(cands) > 1 and memory_bytes:
        gb = memory_bytes / 1e9
        cands = sorted(cands, key=lambda r: abs(float(r["mem_gb"] or 0) - gb))[:1]  # type: ignore[arg-type]
    return cands[0]


#: AMD devices that Kineto names generically ("AMD Radeon Graphics", or ""): (GFXIP major,
#: minor, CUs per device, memory GiB per device) -> table row. GFXIP versions, CU counts and
#: VRAM from the ROCm GPU specifications table (rocm.docs.amd.com/en/latest/reference/
#: gpu-specs.html); MI250/MI250X show one device per GCD (FORMATS C, deviceProperties).
AMD_SIGNATURES = {
    (9, 0, 104, 64): "MI250 GCD / MI210",
    (9, 0, 110, 64): "MI250X GCD",
    (9, 4, 304, 192): "MI300X",
}
GENERIC_NAMES = ("amd radeon graphics", "radeon graphics", "")


def identify(name: str | None, *, sm_count: int | None = None,
             memory_bytes: int | None = None,
             compute: tuple[int | None, int | None] | None = None,
             vendor: str | None = None) -> tuple[dict[str, object] | None, str | None]:
    """(table row, None) for a device, or (None, why) when it cannot be identified.

    Named devices go through :func:`match`. AMD devices with a generic or empty name are
    resolved from the GFXIP version (Kineto's ``computeMajor/Minor``), the CU count and the
    memory size the trace records (``AMD_SIGNATURES``).

    Example:
        >>> identify("AMD Radeon Graphics", sm_count=104, memory_bytes=68702699520,
        ...          compute=(9, 0), vendor="amd")[0]["name"]
        'MI250 GCD / MI210'
        >>> identify("AMD Radeon Graphics", sm_count=60, memory_bytes=16 << 30,
        ...          compute=(9, 0), vendor="amd")[1][:19]
        'unknown GPU: AMD gf'
    """
    generic = name is None or name.strip().lower() in GENERIC_NAMES
    is_amd = (vendor or "").lower() == "amd" or (name or "").lower().startswith("amd")
    if not generic:
        row = match(name, sm_count=sm_count, memory_bytes=memory_bytes)
        return (row, None) if row else (None, f"unknown GPU {name!r}: use --gpu NAME")
    if not is_amd:
        return None, "unknown GPU: the trace names no device; use --gpu NAME"
    major, minor = compute or (None, None)
    gib = round(memory_bytes / 2**30) if memory_bytes else None
    key = (major, minor, sm_count, gib)
    want = AMD_SIGNATURES.get(key)  # type: ignore[arg-type]
    if want:
        rows = [r for r in table().to_dicts() if r["name"] == want]
        if rows:
            return rows[0], None
    return None, (f"unknown GPU: AMD gfx{major}{minor or 0}x with {sm_count} CUs and "
                  f"{gib} GiB is not in the ceiling table; use --gpu NAME")


@dataclass(frozen=True)
class Ceiling:
    """One roof: ``kind`` is ``compute`` (FLOP/s) or ``memory`` (B/s)."""

    name: str
    kind: str
    value: float
    clock_hz: float | None
    clock_note: str
    source: str


def datasheet_ceilings(row: dict[str, Any]) -> list[Ceiling]:
    """Ceilings of a table row: every published dense peak and the DRAM bandwidth."""
    out = []
    boost = float(row["boost_clock_mhz"]) * 1e6 if row.get("boost_clock_mhz") else None
    tclk = float(row["tensor_clock_mhz"]) * 1e6 if row.get("tensor_clock_mhz") else boost
    src = f"datasheet ({row['name']}): {row['source']}"
    for name, col in PRECISION_COLS.items():
        v = row.get(col)
        if v is None or v == "":
            continue
        clk = tclk if "tensor" in name else boost
        note = "boost clock" if clk else "clock unpublished"
        out.append(Ceiling(name, "compute", float(v) * 1e12, clk,  # type: ignore[arg-type]
                           note, src))
    if row.get("mem_bandwidth_gbs"):
        out.append(Ceiling("dram", "memory", float(row["mem_bandwidth_gbs"]) * 1e9,  # type: ignore[arg-type]
                           None, "memory clock (datasheet)", src))
    return out


def ncu_ceilings(ncu: pl.DataFrame) -> list[Ceiling]:
    """Ceilings measured by ncu itself (median over launches): FP64/FP32/FP16 non-tensor
    peaks at the measured SM clock and DRAM/L2/L1 peaks at the measured memory clocks."""
    out = []
    clk = ncu["peak_sm_clock_hz"].drop_nulls()
    clock = float(clk.median()) if clk.len() else None  # type: ignore[arg-type]
    for col, name, kind in (("peak_fp64_flop_per_s", "fp64", "compute"),
                            ("peak_fp32_flop_per_s", "fp32", "compute"),
                            ("peak_fp16_flop_per_s", "fp16", "compute"),
                            ("peak_dram_bytes_per_s", "dram", "memory"),
                            ("peak_l2_bytes_per_s", "l2", "memory"),
                            ("peak_l1_bytes_per_s", "l1", "memory")):
        s = ncu[col].drop_nulls()
        if s.len() and float(s.median()) > 0:  # type: ignore[arg-type]
            note = "measured SM clock during profiling (ncu locks to base by default)" \
                if kind == "compute" else "measured memory clock during profiling"
            out.append(Ceiling(name, kind, float(s.median()),  # type: ignore[arg-type]
                               clock if kind == "compute" else None, note,
                               "measured (ncu peak_sustained x clock)"))
    return out


def ncu_tensor_ceilings(ncu: pl.DataFrame, clock: float | None) -> list[Ceiling]:
    """Tensor roofs ncu measured, one per dtype seen in ``tensor_dtype``: the dense ops per
    cycle (the launches' ``peak_tensor_flop_per_s / peak_sm_clock_hz``, median) x ``clock``,
    the chart's clock, so the drawn roof is at the clock its label says (each point is
    judged against the roof at its own clock, :func:`traceparse.roofline.model.
    measured_points`)."""
    need = ("peak_tensor_flop_per_s", "tensor_dtype", "peak_sm_clock_hz")
    if not all(c in ncu.columns for c in need):
        return []
    f = ncu.filter(pl.col("peak_tensor_flop_per_s").is_not_null()
                   & pl.col("tensor_dtype").is_not_null()
                   & (pl.col("peak_sm_clock_hz") > 0))
    out = []
    for (dtype,), g in f.group_by(pl.col("tensor_dtype").cast(pl.String), maintain_order=True):
        per_cycle = float((g["peak_tensor_flop_per_s"] / g["peak_sm_clock_hz"]).median())  # type: ignore[arg-type]
        clk = clock or float(g["peak_sm_clock_hz"].median())  # type: ignore[arg-type]
        out.append(Ceiling(f"{dtype}_tensor", "compute", per_cycle * clk, clk,
                           "measured SM clock during profiling",
                           "measured (ncu dense ops-path peak_sustained x clock)"))
    return out


def read_overrides(path: str | os.PathLike[str]) -> list[Ceiling]:
    """User ceilings from CSV (columns ``name,kind,value`` [+ ``clock_hz``, ``source``]) or
    JSON (a list of such objects, or ``{name: value}`` with kind guessed from the name:
    dram/l2/l1/hbm are memory). Values are FLOP/s or bytes/s."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TraceError(p, f"cannot read ceilings: {exc.strerror or exc}") from None
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
            rows = ([{"name": k, "value": v} for k, v in data.items()]
                    if isinstance(data, dict) else list(data))
        else:
            rows = pl.read_csv(p, infer_schema_length=None).to_dicts()
    except Exception as exc:
        raise TraceError(p, f"ceilings file is not valid CSV/JSON: {exc}") from None
    out = []
    for r in rows:
        try:
            name = str(r["name"]).strip().lower()
            value = float(r["value"])
        except (KeyError, TypeError, ValueError):
            raise TraceError(p, f"ceiling row needs name and numeric value: {r}") from None
        if value <= 0:
            raise TraceError(p, f"ceiling {name!r} must be positive, got {value}")
        kind = r.get("kind") or ("memory" if name in ("dram", "hbm", "l2", "l1") else "compute")
        clk = r.get("clock_hz")
        out.append(Ceiling(name, str(kind), value, float(clk) if clk else None,
                           "as measured by the user", str(r.get("source") or f"user ({p.name})")))
    return out


def ceilings(*, ncu: pl.DataFrame | None = None, gpu: str | None = None,
             sm_count: int | None = None, memory_bytes: int | None = None,
             overrides: list[Ceiling] | None = None) -> pl.DataFrame:
    """The ceiling set for a roofline, as a frame (``name, kind, value, clock_hz,
    clock_note, source``). Priority per name: user override > ncu-measured > datasheet."""
    chosen: dict[str, Ceiling] = {}
    row = match(gpu, sm_count=sm_count, memory_bytes=memory_bytes) if gpu else None
    for c in datasheet_ceilings(row) if row else []:
        chosen[c.name] = c
    if ncu is not None and ncu.height:
        measured = ncu_ceilings(ncu)
        clk = next((c.clock_hz for c in measured if c.kind == "compute" and c.clock_hz), None)
        if clk is None and "sm_clock_hz" in ncu.columns:  # no ncu peaks: its measured clock
            sm = ncu["sm_clock_hz"].drop_nulls()
            clk = float(sm.median()) if sm.len() else None  # type: ignore[arg-type]
        if clk:  # one clock per chart: datasheet compute roofs rescaled to the ncu SM clock
            for name, c in list(chosen.items()):
                if c.kind == "compute" and c.clock_hz:
                    chosen[name] = Ceiling(
                        c.name, c.kind, c.value * clk / c.clock_hz, clk,
                        f"datasheet x {clk / 1e6:,.0f}/{c.clock_hz / 1e6:,.0f} MHz "
                        "(rescaled to the measured SM clock)", c.source)
        for c in measured:
            chosen[c.name] = c
        for c in ncu_tensor_ceilings(ncu, clk):
            chosen[c.name] = c
    for c in overrides or []:
        chosen[c.name] = c
    return pl.DataFrame([c.__dict__ for c in chosen.values()],
                        schema={"name": pl.String, "kind": pl.String, "value": pl.Float64,
                                "clock_hz": pl.Float64, "clock_note": pl.String,
                                "source": pl.String})


def at_clock(ceil: pl.DataFrame, clock_hz: float, why: str) -> pl.DataFrame:
    """Datasheet compute roofs of ``ceil`` rescaled to ``clock_hz`` (``value x clock_hz /
    clock of the roof``); memory roofs, roofs without a clock and user/ncu roofs unchanged.

    Example (a 60 TFLOP/s roof at 2.0 GHz, measured at 1.5 GHz -> 45 TFLOP/s):
        >>> c = pl.DataFrame({"name": ["fp32"], "kind": ["compute"], "value": [60e12],
        ...     "clock_hz": [2.0e9], "clock_note": ["boost clock"], "source": ["datasheet"]})
        >>> at_clock(c, 1.5e9, "GPC clock")["value"][0] / 1e12
        45.0
    """
    if not ceil.height:
        return ceil
    scale = (pl.col("kind") == "compute") & pl.col("clock_hz").is_not_null() \
        & pl.col("source").str.starts_with("datasheet")
    note = pl.format("datasheet x {}/{} MHz (rescaled to the {})",
                     pl.lit(f"{clock_hz / 1e6:.0f}"),
                     (pl.col("clock_hz") / 1e6).round(0).cast(pl.Int64), pl.lit(why))
    return ceil.with_columns(
        pl.when(scale).then(pl.col("value") * clock_hz / pl.col("clock_hz"))
        .otherwise(pl.col("value")).alias("value"),
        pl.when(scale).then(note).otherwise(pl.col("clock_note")).alias("clock_note"),
        pl.when(scale).then(pl.lit(clock_hz)).otherwise(pl.col("clock_hz")).alias("clock_hz"))
