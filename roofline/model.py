"""Roofline points: achieved FLOP/s, bytes per level, intensity, bound and % of roof.

Measured points come from the ``ncu`` table, whose rates are computed exactly as Nsight
Compute's roofline does (see :mod:`traceparse.ncu.roofline`): per precision
``FLOP/s = (add + mul + 2*fma per cycle) * SM clock``. This module only divides and compares:

* arithmetic intensity per level ``AI_level = FLOP/s / bytes_per_s(level)`` (FLOP/byte; the
  time cancels, so it equals FLOPs / bytes);
* ridge point ``ridge = peak FLOP/s / DRAM bandwidth``;
* attainable ``min(peak, AI_dram * bandwidth)`` and ``pct_of_roof = FLOP/s / attainable``;
* bound: ``latency`` when both FLOP/s < ``latency_fraction`` * peak and DRAM B/s <
  ``latency_fraction`` * bandwidth; else ``compute`` when AI_dram >= ridge, else ``memory``.

A kernel whose FP counters count work in two or more precisions (a fp64 dropout that draws
its random numbers in fp32) is one point at the SUM of its FLOPs, labelled ``fp64+fp32``
(largest FLOP rate first), against the time-weighted ceiling ``sum F_p / sum (F_p / peak_p)``
(:func:`mixed_peak`); the note gives each precision's share. See docs/roofline.md.

Provenance is ``measured (ncu)`` for these points; estimated points come from
:mod:`traceparse.roofline.estimate` and are never mixed in silently (the column says which is
which).
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from traceparse import units
from traceparse.categorize import COMM_KERNEL_RE

#: Non-tensor precisions counted by the SASS FP counters.
FP_PRECISIONS = ("fp64", "fp32", "fp16")
MEASURED = "measured (ncu)"
#: A tensor pipe busier than this (% of peak) means tensor work the FP counters do not see.
TENSOR_ACTIVE_PCT = 1.0
#: Pipe -> ceiling name when only pipe activity says which tensor path ran.
PIPE_CEILING = {"imma": "int8_tensor", "igmma": "int8_tensor", "dmma": "fp64_tensor",
                "qgmma": "fp8_tensor"}
HINT = "add --section SpeedOfLight_HierarchicalTensorRooflineChart"
COMM_NOTE = ("communication kernel (NCCL/RCCL): bound by the interconnect, not placed on a "
             "FLOP/DRAM roofline")
FP_HINT = ("capture --section SpeedOfLight_RooflineChart (or --metrics "
           "smsp__sass_thread_inst_executed_op_{d,f,h}{add,mul,fma}_pred_on.sum)")
#: Launch columns that say what the tensor cores did; all null = the page cannot see them.
TENSOR_COLS = ("tensor_flop_per_s", "tensor_pipe_pct", "tensor_inst")
BLIND_NOTE = ("this page has no tensor-core counter, so FLOPs are the FP pipes' only (a lower "
              "bound): compute-bound holds, memory- or latency-bound is unknown; " + HINT)
BLIND_ZERO = ("0 FP FLOPs counted and this page has no tensor-core counter: tensor work, if "
              "any, is not seen; " + HINT)


def tensor_blind(r: dict[str, Any]) -> bool:
    """True when a launch's page carries no tensor-core counter at all (ops, pipe activity
    or MMA instructions): a ``SpeedOfLight_RooflineChart`` page, for one. Its FP FLOPs are
    then a lower bound on the kernel's FLOPs, whatever the kernel is called.

    Example:
        >>> tensor_blind({"tensor_pipe_pct": None}), tensor_blind({"tensor_pipe_pct": 0.0})
        (True, False)
    """
    return all(_get(r, k) is None for k in TENSOR_COLS)


def _roof(ceil: pl.DataFrame, name: str) -> float | None:
    hit = ceil.filter(pl.col("name") == name)
    if hit.height:
        return float(hit["value"][0])
    if name == "fp16_tensor":  # tensor roof: bf16 when fp16 is not listed
        return _roof(ceil, "bf16_tensor") if "bf16_tensor" in ceil["name"].to_list() else None
    return None


def _roof_clock(ceil: pl.DataFrame, name: str) -> float | None:
    """The clock a datasheet compute roof is quoted at (None for measured/user roofs)."""
    if "clock_hz" not in ceil.columns or "source" not in ceil.columns:
        return None
    hit = ceil.filter(pl.col("name") == name)
    if not hit.height and name == "fp16_tensor":
        hit = ceil.filter(pl.col("name") == "bf16_tensor")
    if not hit.height or not str(hit["source"][0]).startswith("datasheet"):
        return None
    clk = hit["clock_hz"][0]
    return float(clk) if clk else None


def _get(r: dict[str, Any], k: str) -> float | None:
    v = r.get(k)
    return float(v) if v is not None and v == v else None


def launch_precision(r: dict[str, Any]) -> tuple[str | None, float | None, str | None]:
    """(precision, FLOP/s, note) of one ncu launch, from its counters only.

    * tensor ops counters with work: ``<dtype>_tensor`` at the ops rate;
    * else a tensor pipe >= ``TENSOR_ACTIVE_PCT`` busy: the pipe's precision, no FLOP/s
      (the pipe counters do not count FLOPs) and a note saying what was measured;
    * else the FP precision with the highest FLOP/s (> 0);
    * else no precision: a note says the FLOP counters are zero or missing.

    Example:
        >>> launch_precision({"fp32_flop_per_s": 0.0, "tensor_pipe": "imma",
        ...                   "tensor_pipe_pct": 28.2})[0]
        'int8_tensor'
    """
    tf = _get(r, "tensor_flop_per_s")
    dtype = r.get("tensor_dtype")
    if tf and tf > 0 and dtype:
        return f"{dtype}_tensor", tf, None
    pipe = r.get("tensor_pipe")
    pct = _get(r, "tensor_pipe_pct")
    if pipe and pct is not None and pct >= TENSOR_ACTIVE_PCT:
        prec = PIPE_CEILING.get(str(pipe), "tensor")
        what = str(pipe).upper() if "|" not in str(pipe) else "tensor"
        return prec, None, (f"{what} tensor pipe {pct:.0f}% active, FLOPs not counted by "
                            f"these sections: {HINT}")
    fp = {p: _get(r, f"{p}_flop_per_s") for p in FP_PRECISIONS}
    known = {p: v for p, v in fp.items() if v is not None}
    if known and max(known.values()) > 0:
        best = max(known, key=lambda p: known[p])
        return best, known[best], None
    inst = _get(r, "tensor_inst")
    if inst and inst > 0:
        return "tensor", None, (f"{inst:,.0f} tensor-pipe warp instructions and 0 FP FLOPs; "
                                f"FLOPs per instruction unknown: {HINT}")
    counted: dict[str, float] = {}
    for p in FP_PRECISIONS:
        v = _get(r, f"flop_{p}")
        if v:
            counted[p] = v
    if counted:  # FLOPs counted, but no time to divide them by
        best = max(counted, key=lambda p: counted[p])
        return best, None, (f"{counted[best]:,.0f} {best} FLOPs counted, no kernel time in "
                            "this page (add --metrics gpu__time_duration.sum): FLOP/s unknown")
    if not known and all(_get(r, k) is None for k in ("dur_ns", "sm_clock_hz",
                                                      "dram_bytes_per_s")):
        return None, None, "ncu recorded no values for this launch (empty result)"
    if known or tf == 0:
        return None, 0.0, "0 FLOPs counted (no FP or tensor work): not on a FLOP roofline"
    return None, None, f"no FLOP counters in this page: {FP_HINT}"


def fp_mix(r: dict[str, Any]) -> dict[str, float]:
    """The FP precisions with FLOP/s > 0 in one launch, largest rate first.

    Example:
        >>> fp_mix({"fp64_flop_per_s": 2e11, "fp32_flop_per_s": 1.5e11, "fp16_flop_per_s": 0.0})
        {'fp64': 200000000000.0, 'fp32': 150000000000.0}
    """
    known = {p: v for p in FP_PRECISIONS if (v := _get(r, f"{p}_flop_per_s")) is not None
             and v > 0}
    return dict(sorted(known.items(), key=lambda kv: -kv[1]))


def mixed_peak(rates: dict[str, float], peaks: dict[str, float | None]) -> float | None:
    """Time-weighted ceiling of FLOPs done in several precisions: the fastest the kernel's
    FLOPs can run, one precision after the other, each at its own peak, is
    ``sum F_p / peak_p``; the ceiling is the total over that time. Rates stand in for
    FLOPs (they share the kernel's time). None when a precision's peak is unknown.

    Example (2 FLOP/s at fp64, peak 10; 1.5 at fp32, peak 20: 3.5 / (0.2 + 0.075)):
        >>> round(mixed_peak({"fp64": 2.0, "fp32": 1.5}, {"fp64": 10.0, "fp32": 20.0}), 4)
        12.7273
    """
    used = {p: v for p, v in rates.items() if v and v > 0}
    if not used or any(not peaks.get(p) for p in used):
        return None
    return sum(used.values()) / sum(v / float(peaks[p] or 0.0) for p, v in used.items())


def measured_points(ncu: pl.DataFrame, ceil: pl.DataFrame, *, by: str = "kernel",
                    latency_fraction: float = 0.05) -> pl.DataFrame:
    """Roofline points from ncu launches: one row per kernel (or launch), placed or not.

    Every launch gets a precision from its counters (:func:`launch_precision`); launches
    without a FLOP rate stay in the frame with ``placed = False`` and a ``note`` naming what
    is missing. Communication kernels (NCCL/RCCL names, as the timeline categorises them)
    are never placed, whatever their counters: their roof is the interconnect. Launches
    without a duration (roofline-chart pages print none) weigh 1 each and have a null
    ``time_ns``. FP launches count the FLOPs of every precision (:func:`fp_mix`); a kernel
    whose launches did FP work in several precisions is one ``fp64+fp32`` point against
    the time-weighted ceiling (:func:`mixed_peak`).

    Args:
        ncu: the timeline's ``ncu`` table.
        ceil: ceilings from :func:`traceparse.roofline.gpus.ceilings`.
        by: ``"launch"`` (one point per launch) or ``"kernel"`` (launches of one kernel name
            and precision merged, all FP launches of a name as one: rates weighted by
            duration, i.e. total work / total time).
        latency_fraction: below this fraction of both roofs a kernel is ``latency`` bound.

    Example (one FP32 launch on a page that sees the tensor pipe, idle; peaks 10 TFLOP/s,
    1 TB/s; ridge 10 FLOP/B):
        >>> n = pl.DataFrame({"kernel_name": ["k"], "launch_id": [0], "dur_ns": [1e6],
        ...     "fp64_flop_per_s": [0.0], "fp32_flop_per_s": [2e12], "fp16_flop_per_s": [None],
        ...     "tensor_flop_per_s": [None], "tensor_pipe_pct": [0.0], "dram_bytes_per_s": [5e11],
        ...     "l2_bytes_per_s": [None], "l1_bytes_per_s": [None]})
        >>> c = pl.DataFrame({"name": ["fp32", "dram"], "value": [1e13, 1e12]})
        >>> measured_points(n, c).select("ai_dram", "bound", "pct_of_roof").row(0)
        (4.0, 'memory', 50.0)
    """
    bytes_cols = ["dram_bytes_per_s", "l2_bytes_per_s", "l1_bytes_per_s"]
    rows = []
    comm = re.compile(COMM_KERNEL_RE)
    for r in ncu.iter_rows(named=True):
        prec, fl, note = launch_precision(r)
        # FP work: every precision's FLOPs, one point at their sum (labelled after merging)
        mix = fp_mix(r) if prec in FP_PRECISIONS and fl else {}
        if mix:
            fl = sum(mix.values())
        if comm.search(str(r["kernel_name"])):  # its roof is the interconnect
            prec, fl, note, mix = None, None, COMM_NOTE, {}
        blind = prec in FP_PRECISIONS and tensor_blind(r)
        if fl == 0.0 and prec is None and tensor_blind(r):
            note = BLIND_ZERO
        if note is None and _get(r, "dram_bytes_per_s") is None:
            note = "no DRAM bytes counted (dram__bytes): intensity unknown"
        dur = _get(r, "dur_ns")
        rows.append({"kernel_name": r["kernel_name"], "launch_id": r["launch_id"],
                     "time_ns": dur if dur and dur > 0 else None, "precision": prec,
                     "flop_per_s": fl, "note": note, "_blind": blind,
                     "_grp": "fp" if mix else prec,
                     "tensor_peak": _get(r, "peak_tensor_flop_per_s") if prec and str(
                         prec).endswith("_tensor") else _get(r, f"peak_{prec}_flop_per_s")
                     if prec in FP_PRECISIONS else None,
                     "sm_clock_hz": _get(r, "peak_sm_clock_hz") or _get(r, "sm_clock_hz"),
                     **{b: _get(r, b) for b in bytes_cols},
                     **{f"_r_{p}": mix.get(p, 0.0) if mix else None for p in FP_PRECISIONS},
                     **{f"_pk_{p}": _get(r, f"peak_{p}_flop_per_s") if mix else None
                        for p in FP_PRECISIONS}})
    mix_cols = [f"_{k}_{p}" for k in ("r", "pk") for p in FP_PRECISIONS]
    schema = {"kernel_name": pl.String, "launch_id": pl.Int64, "time_ns": pl.Float64,
              "precision": pl.String, "flop_per_s": pl.Float64, "note": pl.String,
              "_blind": pl.Boolean, "_grp": pl.String, "tensor_peak": pl.Float64,
              "sm_clock_hz": pl.Float64, **{b: pl.Float64 for b in bytes_cols},
              **{c: pl.Float64 for c in mix_cols}}
    f = pl.DataFrame(rows, schema=schema)
    rates = ["flop_per_s", *bytes_cols, "tensor_peak", "sm_clock_hz", *mix_cols]
    if by == "kernel":
        w = pl.col("time_ns").fill_null(1.0)
        f = (f.group_by("kernel_name", "_grp", maintain_order=True)
             .agg(pl.len().alias("launches"), pl.col("launch_id").min(),
                  pl.col("precision").first(),
                  pl.when(pl.col("time_ns").is_not_null().any())
                  .then(pl.col("time_ns").sum()).alias("time_ns"),
                  pl.col("note").drop_nulls().first(), pl.col("_blind").any(),
                  *[((pl.col(c) * w).sum() / w.filter(pl.col(c).is_not_null()).sum())
                    .alias(c) for c in rates],
                  *[pl.col(c).is_not_null().any().alias(f"_has_{c}") for c in rates])
             .with_columns([pl.when(pl.col(f"_has_{c}")).then(pl.col(c)).otherwise(None)
                            .alias(c) for c in rates])
             .drop([f"_has_{c}" for c in rates]))
    else:
        f = f.with_columns(pl.lit(1, pl.UInt32).alias("launches"))
    f = _label_mixed(f.drop("_grp"))
    names = set(ceil["name"].to_list()) if ceil.height else set()
    roofs = {p: _roof(ceil, p) for p in {*FP_PRECISIONS, *[f"{d}_tensor" for d in (
        "fp16", "bf16", "tf32", "fp8", "int8", "fp64")]} if p in names or p == "fp16_tensor"}
    bw = _roof(ceil, "dram")
    # a datasheet roof is rescaled to the clock each kernel ran at (ncu measures it per
    # launch; the drawn roof is at the median clock), so no kernel is judged against a
    # roof for another clock
    clocks = {p: _roof_clock(ceil, p) for p in roofs}
    user = [str(n) for n, src in zip(ceil["name"], ceil["source"], strict=True)
            if str(src).startswith("user")] if "source" in ceil.columns else []
    table = pl.col("precision").replace_strict(roofs, default=None, return_dtype=pl.Float64)
    table_clk = pl.col("precision").replace_strict(clocks, default=None,
                                                   return_dtype=pl.Float64)
    at_clock = pl.when(table_clk.is_not_null() & pl.col("sm_clock_hz").is_not_null()) \
        .then(table * pl.col("sm_clock_hz") / table_clk).otherwise(table)
    f = f.with_columns(
        pl.when(pl.col("precision").is_in(user)).then(table)
        .otherwise(pl.coalesce(pl.col("tensor_peak"), at_clock))
        .alias("peak_flop_per_s"),
        pl.lit(bw, pl.Float64).alias("peak_dram_bytes_per_s"),
        (pl.col("flop_per_s").is_not_null() & (pl.col("flop_per_s") > 0)
         & pl.col("dram_bytes_per_s").is_not_null() & (pl.col("dram_bytes_per_s") > 0))
        .alias("placed"),
        pl.lit(MEASURED).alias("provenance")).drop("tensor_peak")
    f = _place_mixed(f, roofs, clocks, user).drop(mix_cols)
    f = f.with_columns(pl.when(~pl.col("placed") & pl.col("note").is_null()
                               & (pl.col("dram_bytes_per_s") == 0))
                       .then(pl.lit("0 DRAM bytes counted: intensity unbounded (all traffic "
                                    "served by caches)"))
                       .otherwise(pl.col("note")).alias("note"))
    f = _floor_bound(classify(f, latency_fraction=latency_fraction), latency_fraction)
    # FP FLOPs from a page blind to tensor cores are a lower bound: the intensity can only
    # be higher, so "compute" (intensity >= ridge) stays true; "memory" and "latency" are
    # not known (the H200 cuDNN flash attention, bf16 tensor at 70 % of its roof on the raw
    # page, read "fp32, memory-bound, 12 %" from the roofline-chart page of the same run)
    on_blind = pl.col("_blind") & pl.col("placed")
    return f.with_columns(
        pl.when(on_blind & (pl.col("bound") != "compute")).then(None).otherwise(pl.col("bound"))
        .alias("bound"),
        pl.when(on_blind & pl.col("note").is_null()).then(pl.lit(BLIND_NOTE))
        .otherwise(pl.col("note")).alias("note")).with_columns(
        pl.when(pl.col("_mix_note").is_null()).then(pl.col("note"))
        .when(pl.col("note").is_null()).then(pl.col("_mix_note"))
        .otherwise(pl.concat_str("note", pl.lit("; "), "_mix_note")).alias("note"),
    ).drop("_blind", "_mix_note")


def _fp_rates(r: dict[str, Any]) -> dict[str, float]:
    """A point's FP FLOP/s per precision (> 0 only), largest first."""
    rates = {p: float(r[f"_r_{p}"]) for p in FP_PRECISIONS if r[f"_r_{p}"]}
    return dict(sorted(rates.items(), key=lambda kv: -kv[1]))


def _label_mixed(f: pl.DataFrame) -> pl.DataFrame:
    """``precision`` of each FP point from its merged rates: the one precision, or the
    precisions joined by ``+`` (largest FLOP rate first) when more than one did work."""
    if f["_r_fp32"].drop_nulls().len() == 0:
        return f
    labels = []
    for r in f.select("precision", *[f"_r_{p}" for p in FP_PRECISIONS]).iter_rows(named=True):
        rates = _fp_rates(r) if r["_r_fp32"] is not None else {}
        labels.append("+".join(rates) if rates else r["precision"])
    return f.with_columns(pl.Series("precision", labels, dtype=pl.String))


def _place_mixed(f: pl.DataFrame, roofs: dict[str, float | None],
                 clocks: dict[str, float | None], user: list[str]) -> pl.DataFrame:
    """Mixed-precision rows (``_r_<p>`` set): ``peak_flop_per_s`` = :func:`mixed_peak` over
    each precision's roof (the user's, else ncu's counter peak, else the datasheet's at the
    kernel's clock, as for one precision), and a note with each precision's FLOP share."""
    if f["_r_fp32"].drop_nulls().len() == 0:
        return f.with_columns(pl.lit(None, pl.String).alias("_mix_note"),
                              pl.lit(None, pl.Float64).alias("_peak_lo"))
    peaks: list[float | None] = []
    lows: list[float | None] = []
    notes: list[str | None] = []
    for r in f.iter_rows(named=True):
        rates = _fp_rates(r) if r["_r_fp32"] is not None else {}
        pk: dict[str, float | None] = {}
        for p in {*rates, "fp32"}:
            table, clk = roofs.get(p), clocks.get(p)
            if table is not None and clk and r["sm_clock_hz"]:
                table = table * float(r["sm_clock_hz"]) / clk
            pk[p] = roofs.get(p) if p in user else (r[f"_pk_{p}"] or table)
        if len(rates) < 2:
            peaks.append(r["peak_flop_per_s"])
            lows.append(_fp16_floor(rates, pk) if r["peak_flop_per_s"] is None else None)
            notes.append(None)
            continue
        eff = mixed_peak(rates, pk)
        peaks.append(eff)
        lows.append(_fp16_floor(rates, pk) if eff is None else None)
        tot = sum(rates.values())
        mix = " + ".join(f"{p} {_share(100.0 * v / tot)}" for p, v in rates.items())
        unknown = [p for p in rates if not pk[p]]
        how = (f"{units.tflops(eff)} = total / sum(FLOPs_p / peak_p)" if eff is not None
               else f"unknown (no {'/'.join(unknown)} roof for this GPU)")
        text = f"FLOPs {mix}: one point at their sum; time-weighted roof {how}"
        notes.append(text)
    return f.with_columns(pl.Series("peak_flop_per_s", peaks, dtype=pl.Float64),
                          pl.Series("_mix_note", notes, dtype=pl.String),
                          pl.Series("_peak_lo", lows, dtype=pl.Float64))


#: Why an unknown non-tensor fp16 roof may stand at the fp32 roof as a floor.
FP16_FLOOR_NOTE = ("no non-tensor fp16 roof for this GPU: the fp32 roof is its floor (packed "
                   "half2 math runs at least at the fp32 rate on every GPU in the table, "
                   "Volta and later, CDNA2/3), which decides the bound here")


def _fp16_floor(rates: dict[str, float], pk: dict[str, float | None]) -> float | None:
    """A lower bound of a point's ceiling when fp16 (non-tensor) is the only precision
    without a roof: the time-weighted ceiling with fp16 at the fp32 roof (an fp16 roof at
    least that high can only raise it). None when another roof is missing too.

    Example (fp32 1.5 FLOP/s + fp16 0.5 at an fp32 roof of 10: 2 / (0.15 + 0.05)):
        >>> _fp16_floor({"fp32": 1.5, "fp16": 0.5}, {"fp32": 10.0, "fp16": None})
        10.0
    """
    if "fp16" not in rates or pk.get("fp16") or not pk.get("fp32"):
        return None
    return mixed_peak(rates, {**pk, "fp16": pk["fp32"]})


def _floor_bound(f: pl.DataFrame, latency_fraction: float) -> pl.DataFrame:
    """Bound and % of roof of points whose ceiling is unknown but bounded below
    (``_peak_lo``, :func:`_fp16_floor`), where that floor decides them: below the floor's
    latency fraction in FLOP/s and DRAM B/s is ``latency`` at any higher ceiling; an
    intensity whose DRAM roof lies under the floor is held by memory at any higher ceiling
    (``memory`` when DRAM B/s is not below the latency fraction), and its attainable rate
    is that DRAM roof, so % of roof is exact. Anything else stays unknown."""
    lo, bw = pl.col("_peak_lo"), pl.col("peak_dram_bytes_per_s")
    fl, dr = pl.col("flop_per_s"), pl.col("dram_bytes_per_s")
    on = (pl.col("bound").is_null() & lo.is_not_null() & bw.is_not_null() & fl.is_not_null()
          & dr.is_not_null() & pl.col("placed").fill_null(False))
    mem_roof = pl.col("ai_dram") * bw
    under = mem_roof < lo
    bound = (pl.when(on & (fl < latency_fraction * lo) & (dr < latency_fraction * bw))
             .then(pl.lit("latency"))
             .when(on & under & (dr >= latency_fraction * bw)).then(pl.lit("memory"))
             .otherwise(pl.col("bound")))
    exact = on & under
    return f.with_columns(
        bound.alias("bound"),
        pl.when(exact).then(mem_roof).otherwise(pl.col("attainable_flop_per_s"))
        .alias("attainable_flop_per_s"),
        pl.when(exact).then(fl * 100.0 / mem_roof).otherwise(pl.col("pct_of_roof"))
        .alias("pct_of_roof"),
        pl.when(on & (exact | (bound == "latency")))
        .then(pl.when(pl.col("_mix_note").is_null()).then(pl.lit(FP16_FLOOR_NOTE))
              .otherwise(pl.concat_str("_mix_note", pl.lit("; "), pl.lit(FP16_FLOOR_NOTE))))
        .otherwise(pl.col("_mix_note")).alias("_mix_note")).drop("_peak_lo")


def _share(pct: float) -> str:
    """A percentage that never reads 0 % for work that was counted.

    Example:
        >>> _share(54.9), _share(0.23), _share(0.0004), _share(99.8)
        ('55%', '0.23%', '0.0004%', '99.8%')
    """
    return f"{pct:.0f}%" if 1.0 <= pct <= 99.0 else f"{pct:.{2 if pct < 1 else 3}g}%"


def classify(points: pl.DataFrame, *, latency_fraction: float = 0.05) -> pl.DataFrame:
    """Add intensities, ridge, attainable, % of roof and bound to a point frame with
    ``flop_per_s``, ``dram_bytes_per_s`` (+ optional ``l2_/l1_bytes_per_s``),
    ``peak_flop_per_s`` and ``peak_dram_bytes_per_s``."""
    def safe_div(a: pl.Expr, b: pl.Expr) -> pl.Expr:
        return pl.when(b > 0).then(a / b).otherwise(None)

    for lvl in ("l2", "l1"):
        if f"{lvl}_bytes_per_s" not in points.columns:
            points = points.with_columns(pl.lit(None, pl.Float64).alias(f"{lvl}_bytes_per_s"))
    fl, dr = pl.col("flop_per_s"), pl.col("dram_bytes_per_s")
    pk, bw = pl.col("peak_flop_per_s"), pl.col("peak_dram_bytes_per_s")
    out = points.with_columns(
        safe_div(fl, dr).alias("ai_dram"),
        safe_div(fl, pl.col("l2_bytes_per_s")).alias("ai_l2"),
        safe_div(fl, pl.col("l1_bytes_per_s")).alias("ai_l1"),
        safe_div(pk, bw).alias("ridge"),
    )
    # an unknown ceiling leaves the attainable rate unknown (min() would skip the null and
    # quote % of the DRAM roof alone: a floor of the true %, printed as if exact)
    attain = pl.when(pk.is_not_null()).then(pl.min_horizontal(pk, pl.col("ai_dram") * bw))
    latency = (fl < latency_fraction * pk) & (dr < latency_fraction * bw)
    return out.with_columns(
        attain.alias("attainable_flop_per_s"),
        safe_div(fl * 100.0, attain).alias("pct_of_roof"),
        pl.when(pk.is_null() | bw.is_null() | fl.is_null() | dr.is_null()).then(None)
        .when(latency).then(pl.lit("latency"))
        .when(pl.col("ai_dram") >= pl.col("ridge")).then(pl.lit("compute"))
        .otherwise(pl.lit("memory")).alias("bound"),
    )
