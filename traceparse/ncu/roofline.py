"""Roofline inputs from ncu metrics, computed the way Nsight Compute computes them.

Input: a wide frame, one row per launch, one Float64 column per metric identifier (values in
ncu base units). Output: expressions for the ``ncu`` table's roofline columns. Two methods,
tried in order (the first whose metrics exist wins, per launch):

1. **ncu chart** (``SpeedOfLight_RooflineChart`` and the hierarchical roofline sections,
   FORMATS B.6/B.7)::

       FLOP/s(p)  = (add_p + mul_p + 2 * fma_p)  [smsp__sass_thread_inst_executed_op_*_pred_on
                    .sum.per_cycle_elapsed]  *  smsp__cycles_elapsed.avg.per_second
       peak(p)    = 2 * sm__sass_thread_inst_executed_op_{p}fma_pred_on.sum.peak_sustained
                    * sm__cycles_elapsed.avg.per_second
       DRAM B/s   = dram__bytes.sum.per_second;  peak = dram__bytes.sum.peak_sustained
                    * dram__cycles_elapsed.avg.per_second
       L2 B/s     = lts__lts2xbar_cycles_active.sum.per_second * 32 (or the derived bytes)
       L1 B/s     = l1tex__lsu_writeback_active_mem_lg[ds].sum.per_second * 128

2. **NERSC counts** (``--metrics`` runs, FORMATS B.8): ``FLOPs = add + mul + 2 * fma``
   (``sm__sass_thread_inst_executed_op_*_pred_on.sum``, or the equal ``smsp__`` sums),
   time = ``sm__cycles_elapsed.avg / sm__cycles_elapsed.avg.per_second``, bytes =
   ``dram__bytes.sum``, ``lts__t_bytes.sum``, ``l1tex__t_bytes.sum``.

Both clocks are the *measured* clocks during the kernel: ncu locks to base clock by default,
so these peaks are base-clock peaks (FORMATS B.7).
"""

from __future__ import annotations

import polars as pl

from traceparse.ncu.tensor import tensor_exprs, tensor_peak_expr

S = "sass_thread_inst_executed_op_{}_pred_on"
PRECISIONS = {"fp64": "d", "fp32": "f", "fp16": "h"}


def _m(cols: set[str], name: str) -> pl.Expr:
    return pl.col(name) if name in cols else pl.lit(None, pl.Float64)


def _first(*exprs: pl.Expr) -> pl.Expr:
    return pl.coalesce(list(exprs))


def roofline_exprs(cols: set[str]) -> dict[str, pl.Expr]:
    """Expressions (over the wide metric frame with columns ``cols``) for every roofline
    column of the ``ncu`` table. Missing metrics give nulls, never zeros."""
    m = lambda name: _m(cols, name)  # noqa: E731
    smsp_hz = _first(m("smsp__cycles_elapsed.avg.per_second"),
                     m("sm__cycles_elapsed.avg.per_second"),
                     m("gpc__cycles_elapsed.avg.per_second"))
    sm_hz = _first(m("sm__cycles_elapsed.avg.per_second"),
                   m("smsp__cycles_elapsed.avg.per_second"),
                   m("gpc__cycles_elapsed.avg.per_second"))
    dur_s = m("gpu__time_duration.sum") * 1e-9
    cyc_s = _first(m("sm__cycles_elapsed.avg") / m("sm__cycles_elapsed.avg.per_second"), dur_s)
    out: dict[str, pl.Expr] = {}
    chart_any: list[pl.Expr] = []
    for name, p in PRECISIONS.items():
        # ncu 2023+ counts a half-precision FMA as 4 (HFMA2: 2 lanes x 2) and prints the
        # derived _x4 metric; older versions print _x2.
        fma2 = _first(m(f"derived__smsp__{S.format(p + 'fma')}_x4"),
                      m(f"derived__smsp__{S.format(p + 'fma')}_x2"),
                      2.0 * m(f"smsp__{S.format(p + 'fma')}.sum.per_cycle_elapsed"))
        add = _first(m(f"derived__smsp__{S.format(p + 'add')}_x2"),
                     m(f"smsp__{S.format(p + 'add')}.sum.per_cycle_elapsed")).fill_null(0.0)
        mul = _first(m(f"derived__smsp__{S.format(p + 'mul')}_x2"),
                     m(f"smsp__{S.format(p + 'mul')}.sum.per_cycle_elapsed")).fill_null(0.0)
        chart = (fma2 + add + mul) * smsp_hz
        chart_any.append(chart.is_not_null())
        # the device-wide sum is the same over SMs or SM sub-partitions: ncu accepts both
        # prefixes on --metrics (NERSC scripts use sm__, ncu's chart sections smsp__)
        cnt = {op: _first(m(f"sm__{S.format(p + op)}.sum"), m(f"smsp__{S.format(p + op)}.sum"))
               for op in ("add", "mul", "fma")}
        count = cnt["add"] + cnt["mul"] + 2.0 * cnt["fma"]
        # ``--metrics ...pred_on.sum.per_second``: the rate itself (missing ops count 0)
        ps = {op: _first(m(f"sm__{S.format(p + op)}.sum.per_second"),
                         m(f"smsp__{S.format(p + op)}.sum.per_second")) for op in
              ("add", "mul", "fma")}
        ps_any = pl.any_horizontal([e.is_not_null() for e in ps.values()])
        rate = pl.when(ps_any).then(ps["add"].fill_null(0.0) + ps["mul"].fill_null(0.0)
                                    + 2.0 * ps["fma"].fill_null(0.0))
        out[f"{name}_flop_per_s"] = _first(chart, count / cyc_s, rate)
        out[f"flop_{name}"] = _first(count, chart * dur_s, rate * dur_s)
        peak_ops = _first(m(f"derived__sm__{S.format(p + 'fma')}_x4"),
                          m(f"derived__sm__{S.format(p + 'fma')}_x2"),
                          2.0 * m(f"sm__{S.format(p + 'fma')}.sum.peak_sustained"))
        out[f"peak_{name}_flop_per_s"] = peak_ops * sm_hz
    out.update(tensor_exprs(cols))
    out["tensor_flop_per_s"] = out["flop_tensor"] / cyc_s
    out["peak_tensor_flop_per_s"] = tensor_peak_expr(cols) * sm_hz

    dram_chart = m("dram__bytes.sum.per_second")
    dram_count = _first(m("dram__bytes.sum"),
                        m("dram__bytes_read.sum") + m("dram__bytes_write.sum"))
    out["dram_bytes_per_s"] = _first(dram_chart, dram_count / cyc_s)
    out["dram_bytes"] = _first(dram_count, dram_chart * dur_s)
    out["peak_dram_bytes_per_s"] = (m("dram__bytes.sum.peak_sustained")
                                    * m("dram__cycles_elapsed.avg.per_second"))
    lts_hz = m("lts__cycles_elapsed.avg.per_second")
    l2_chart = _first(m("derived__lts__lts2xbar_bytes.sum.per_second"),
                      32.0 * m("lts__lts2xbar_cycles_active.sum.per_second"))
    out["l2_bytes_per_s"] = _first(l2_chart, m("lts__t_bytes.sum") / cyc_s)
    out["l2_bytes"] = _first(m("lts__t_bytes.sum"), l2_chart * dur_s)
    out["peak_l2_bytes_per_s"] = _first(
        m("derived__lts__lts2xbar_bytes.sum.peak_sustained") * lts_hz,
        32.0 * m("lts__lts2xbar_cycles_active.sum.peak_sustained") * lts_hz)
    l1_hz = m("l1tex__cycles_elapsed.avg.per_second")
    l1_chart = _first(m("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second"),
                      128.0 * m("l1tex__lsu_writeback_active_mem_lgds.sum.per_second"),
                      m("derived__l1tex__lsu_writeback_bytes_mem_lg.sum.per_second"),
                      128.0 * m("l1tex__lsu_writeback_active_mem_lg.sum.per_second"))
    out["l1_bytes_per_s"] = _first(l1_chart, m("l1tex__t_bytes.sum") / cyc_s)
    out["l1_bytes"] = _first(m("l1tex__t_bytes.sum"), l1_chart * dur_s)
    out["peak_l1_bytes_per_s"] = _first(
        m("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained") * l1_hz,
        128.0 * m("l1tex__lsu_writeback_active_mem_lgds.sum.peak_sustained") * l1_hz,
        128.0 * m("l1tex__lsu_writeback_active_mem_lg.sum.peak_sustained") * l1_hz)
    out["roofline_method"] = (
        pl.when(pl.any_horizontal(chart_any) | dram_chart.is_not_null())
        .then(pl.lit("ncu chart"))
        .when(out["fp32_flop_per_s"].is_not_null() | out["dram_bytes_per_s"].is_not_null())
        .then(pl.lit("nersc counts")).otherwise(pl.lit(None, pl.String)))
    out["peak_sm_clock_hz"] = sm_hz
    return out
