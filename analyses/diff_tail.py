"""Tail latency of two traces: per-step P50/P95/P99 (all steps and per serving phase) and
tokens/s, compared with a seeded bootstrap of the difference (docs/diff.md).

Steps are the windows of :func:`traceparse.analyses.phases.phase_steps` (a serving step
annotation, a model-runner frame or ``ProfilerStep#N``, or ``--steps REGEX``), with its
``period_ns`` (:func:`traceparse.analyses.steps.step_periods`: from the step's start, or
the finish of the rank's earlier steps when later, to its finish, the end of its host window
or of the GPU work it launched, whichever is last). Graph capture steps (phase ``capture``)
record work instead of running it and are left out.

**Test.** For quantile ``q`` the statistic is ``Q_q(new) - Q_q(base)`` (linear
interpolation). Both samples are resampled with replacement ``B = 2000`` times from a
fixed seed (the same input always gives the same interval) and the statistic recomputed;
the ``1 - alpha`` percentile interval of those differences is reported (``ci_low``,
``ci_high``) with the bootstrap two-sided p-value ``2 (min(#(d <= 0), #(d >= 0)) + 1) /
(B + 1)``.
A rank test such as Mann-Whitney compares whole distributions and is dominated by the
bulk: it does not answer "did P99 move", and a shift of the top 2 % of steps barely moves
the rank sum. The bootstrap of the quantile difference asks exactly that question, needs
no distributional assumption, and its interval states the size of the change.

The bootstrap of an extreme quantile is only meaningful where the sample has values above
it: ``Q_q`` is compared only when both sides have at least ``1 / (1 - q)`` steps (P95: 20,
P99: 100) and at least ``min_n``; otherwise the row is ``insufficient`` (values shown,
nothing flagged or gated: the P99 of 20 steps is their maximum, one sample).

A row is a ``regression`` when the interval lies above zero (below zero for tokens/s, a
throughput) and the change is at least ``min_effect_pct``; ``improvement`` for the mirror
case. ``tokens_per_s`` of a phase = summed tokens / summed ``period_ns`` (the steps'
non-overlapping times) of its steps that record tokens
(:func:`traceparse.analyses.phases.phase_summary`'s definition), resampled by step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from traceparse.analyses._dist import MIN_EFFECT_PCT
from traceparse.analyses.phases import phase_steps
from traceparse.timeline import Timeline

QUANTILES = (0.5, 0.95, 0.99)
SERVING = ("prefill", "decode", "mixed")
BOOTSTRAP = 2000
SEED = 0

SCHEMA = {"level": pl.String, "name": pl.String, "metric": pl.String, "n_base": pl.Int64,
          "n_new": pl.Int64, "base": pl.Float64, "new": pl.Float64, "change": pl.Float64,
          "change_pct": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
          "p_value": pl.Float64, "flag": pl.String}


def step_walls(tl: Timeline, *, step_regex: str | None = None) -> pl.DataFrame:
    """``rank, step, phase, start_ns, end_ns, wall_ns, period_ns, attributed_ns, tokens``
    of every step (capture steps dropped), in time order: one computation for the tail and
    the time diff, which compare ``period_ns`` (:func:`traceparse.analyses.steps.
    step_periods`: a step's wall counts the queue behind earlier steps where the host runs
    ahead of the GPU)."""
    s = phase_steps(tl, steps=step_regex, attribution=False)
    return (s.filter(pl.col("phase") != "capture")
            .select("rank", "step", "phase", "start_ns", "end_ns", "wall_ns", "period_ns",
                    "attributed_ns", "tokens")
            .sort("rank", "start_ns"))


def _min_n(q: float, min_n: int) -> int:
    return max(min_n, math.ceil(round(1.0 / (1.0 - q), 9))) if q < 1 else min_n


def _boot_quantile(x: np.ndarray, q: float, rng: np.random.Generator, n_boot: int
                   ) -> np.ndarray:
    """``Q_q`` of ``n_boot`` resamples of ``x``, in chunks of at most ~4M drawn values."""
    rows = max(1, 4_000_000 // max(x.size, 1))
    out = [np.quantile(x[rng.integers(0, x.size, size=(min(rows, n_boot - i), x.size))], q,
                       axis=1) for i in range(0, n_boot, rows)]
    return np.concatenate(out)


def _boot_p(d: np.ndarray) -> float:
    """Two-sided bootstrap p-value ``2 min(#(d <= 0) + 1, #(d >= 0) + 1) / (B + 1)``
    (never 0: B resamples cannot show a probability below 1 / (B + 1))."""
    k = min(int((d <= 0).sum()), int((d >= 0).sum()))
    return min(1.0, 2.0 * (k + 1) / (d.size + 1))


def bootstrap_quantile_diff(a: Any, b: Any, q: float, *, alpha: float = 0.01,
                            n_boot: int = BOOTSTRAP, seed: int = SEED
                            ) -> tuple[float, float, float]:
    """``(ci_low, ci_high, p)`` of ``Q_q(b) - Q_q(a)``: percentile bootstrap, ``n_boot``
    resamples of each side from ``seed``; ``p`` from :func:`_boot_p`.

    Example:
        a = b = [1, 2, 3]: every resample pair is drawn from the same values, the interval
        contains 0 and p = 1 (capped).
    """
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    d = _boot_quantile(xb, q, rng, n_boot) - _boot_quantile(xa, q, rng, n_boot)
    lo, hi = np.quantile(d, [alpha / 2.0, 1.0 - alpha / 2.0])
    p = _boot_p(d)
    return float(lo), float(hi), p


def bootstrap_ratio_diff(ta: Any, wa: Any, tb: Any, wb: Any, *, alpha: float = 0.01,
                         n_boot: int = BOOTSTRAP, seed: int = SEED
                         ) -> tuple[float, float, float]:
    """``(ci_low, ci_high, p)`` of ``sum(tb)/sum(wb) - sum(ta)/sum(wa)`` (tokens per ns),
    resampling steps (pairs of tokens and attributed time) of each side."""
    rng = np.random.default_rng(seed)

    def boot(t: Any, w: Any) -> np.ndarray:
        t, w = np.asarray(t, dtype=np.float64), np.asarray(w, dtype=np.float64)
        idx = rng.integers(0, t.size, size=(n_boot, t.size))
        return t[idx].sum(axis=1) / w[idx].sum(axis=1)

    d = boot(tb, wb) - boot(ta, wa)
    lo, hi = np.quantile(d, [alpha / 2.0, 1.0 - alpha / 2.0])
    p = _boot_p(d)
    return float(lo), float(hi), p


def _flag(lo: float | None, hi: float | None, pct: float | None, min_effect: float,
          higher_is_worse: bool) -> str:
    if lo is None or hi is None or pct is None:
        return ""
    if lo > 0 and pct >= min_effect:
        return "regression" if higher_is_worse else "improvement"
    if hi < 0 and pct <= -min_effect:
        return "improvement" if higher_is_worse else "regression"
    return ""


def _row(name: str, metric: str, na: int, nb: int, base: float | None, new: float | None,
         ci: tuple[float, float, float] | None, flag: str, scale: float = 1.0
         ) -> dict[str, Any]:
    change = None if base is None or new is None else new - base
    pct = change * 100.0 / base if change is not None and base else None
    return {"level": "tail", "name": name, "metric": metric, "n_base": na, "n_new": nb,
            "base": base, "new": new, "change": change, "change_pct": pct,
            "ci_low": ci[0] * scale if ci else None, "ci_high": ci[1] * scale if ci else None,
            "p_value": ci[2] if ci else None, "flag": flag}


def _groups(sa: pl.DataFrame, sb: pl.DataFrame) -> list[tuple[str, pl.Expr]]:
    if not sa.height and not sb.height:
        return []
    out: list[tuple[str, pl.Expr]] = [("all steps", pl.lit(True))]
    phases = set(sa["phase"].to_list()) | set(sb["phase"].to_list())
    out += [(p, pl.col("phase") == p) for p in SERVING if p in phases]
    return out


def tail_diff(base: Timeline, new: Timeline, *, alpha: float = 0.01,
              min_effect_pct: float = MIN_EFFECT_PCT, min_n: int = 3, step_regex: str | None = None,
              walls: tuple[pl.DataFrame, pl.DataFrame] | None = None) -> pl.DataFrame:
    """Per step group (``all steps``, then each serving phase present): step time ``p50``,
    ``p95``, ``p99`` (ns) and ``tokens_per_s`` of both traces with the bootstrap interval
    of the difference (see the module docstring).

    Returns ``level`` ("tail"), ``name`` (group), ``metric``, ``n_base, n_new, base, new,
    change, change_pct, ci_low, ci_high, p_value, flag``; ``flag`` is ``regression``,
    ``improvement``, ``insufficient``, ``only base`` / ``only new`` or empty.
    """
    sa, sb = walls or (step_walls(base, step_regex=step_regex),
                       step_walls(new, step_regex=step_regex))
    rows: list[dict[str, Any]] = []
    for name, cond in _groups(sa, sb):
        ga, gb = sa.filter(cond), sb.filter(cond)
        a = ga["period_ns"].to_numpy().astype(np.float64)
        b = gb["period_ns"].to_numpy().astype(np.float64)
        for q in QUANTILES:
            metric = f"p{round(q * 100)}_ns"
            va = float(np.quantile(a, q)) if a.size else None
            vb = float(np.quantile(b, q)) if b.size else None
            need = _min_n(q, min_n)
            if not a.size or not b.size:
                rows.append(_row(name, metric, a.size, b.size, va, vb, None,
                                 "only new" if not a.size else "only base"))
                continue
            if a.size < need or b.size < need:
                rows.append(_row(name, metric, a.size, b.size, va, vb, None, "insufficient"))
                continue
            ci = bootstrap_quantile_diff(a, b, q, alpha=alpha)
            r = _row(name, metric, a.size, b.size, va, vb, ci, "")
            r["flag"] = _flag(r["ci_low"], r["ci_high"], r["change_pct"], min_effect_pct, True)
            rows.append(r)
        ta, tb = ga.filter(pl.col("tokens").is_not_null()), gb.filter(
            pl.col("tokens").is_not_null())
        if not ta.height and not tb.height:
            continue

        def rate(t: pl.DataFrame) -> float | None:
            w = float(t["period_ns"].sum())
            return float(t["tokens"].sum()) / (w / 1e9) if t.height and w else None

        va, vb = rate(ta), rate(tb)
        if not ta.height or not tb.height:
            rows.append(_row(name, "tokens_per_s", ta.height, tb.height, va, vb, None,
                             "only new" if not ta.height else "only base"))
            continue
        if ta.height < min_n or tb.height < min_n:
            rows.append(_row(name, "tokens_per_s", ta.height, tb.height, va, vb, None,
                             "insufficient"))
            continue
        ci = bootstrap_ratio_diff(ta["tokens"].to_numpy(), ta["period_ns"].to_numpy(),
                                  tb["tokens"].to_numpy(), tb["period_ns"].to_numpy(),
                                  alpha=alpha)
        r = _row(name, "tokens_per_s", ta.height, tb.height, va, vb, ci, "", scale=1e9)
        r["flag"] = _flag(r["ci_low"], r["ci_high"], r["change_pct"], min_effect_pct, False)
        rows.append(r)
    return pl.DataFrame(rows, schema=SCHEMA)


def tail_failed(t: pl.DataFrame, fail_above_pct: float | None) -> pl.Series:
    """Per row: a flagged regression whose change is worse than ``fail_above_pct`` % (a
    latency quantile rose, or tokens/s fell, by more than that)."""
    if fail_above_pct is None or t.height == 0:
        return pl.Series("failed", [False] * t.height, dtype=pl.Boolean)
    worse = (pl.when(pl.col("metric") == "tokens_per_s").then(-pl.col("change_pct"))
             .otherwise(pl.col("change_pct")))
    return t.select(((pl.col("flag") == "regression") & (worse > fail_above_pct))
                    .fill_null(False).alias("failed"))["failed"]
