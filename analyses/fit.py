"""Small, dependency-free curve fits for performance models (numpy only).

Two models cover almost everything a simulator needs from a trace:

* **alpha-beta** (latency + size / bandwidth): ``t(x) = alpha + x / bandwidth``. Used for
  memory copies (x = bytes) and collectives (x = message bytes).
* **saturating efficiency**: ``eff(w) = e_max * w / (w + w_half)`` where ``w`` is the work of
  one kernel (FLOPs or bytes) and ``eff`` the achieved rate as a fraction of the ceiling
  ``peak``. Small problems cannot fill the GPU; large ones approach ``e_max``; at
  ``w = w_half`` the kernel reaches half of ``e_max``.

The two are the same line: with ``t = w / (eff(w) * peak)``,
``t = w_half / (e_max * peak) + w / (e_max * peak)``, i.e. alpha-beta with
``alpha = w_half / (e_max * peak)`` and ``bandwidth = e_max * peak``. So both are fitted by
one weighted linear least squares on ``(x, t)`` with weights ``1 / t``, which minimises the
**relative** error of the predicted time (a copy of 4 KiB and one of 4 GiB count the same;
an ordinary fit would ignore every small copy). Constraints: ``alpha >= 0`` (refitted
through the origin when the unconstrained intercept is negative) and ``bandwidth > 0``
(when the slope is not positive the data show no size dependence; the fit is then a
constant ``alpha`` = median time and ``bandwidth`` is None).

Fit error is reported as the mean absolute percentage error (MAPE, in %) of the predicted
times and, for the efficiency fit, the root-mean-square error of the efficiency itself.

Example:
    >>> import numpy as np
    >>> x = np.array([1e3, 1e6, 1e9])
    >>> f = alpha_beta(x, 2000 + x / 10.0)   # 2 us latency, 10 bytes/ns = 10 GB/s
    >>> round(f["alpha_ns"]), round(f["bandwidth_bytes_per_s"] / 1e9, 3)
    (2000, 10.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _wls(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Weighted least squares of ``t = a + b x`` minimising sum(((a + b x - t) / t)^2)."""
    w = 1.0 / t
    a_mat = np.stack([w, x * w], axis=1)
    sol, *_ = np.linalg.lstsq(a_mat, np.ones_like(t), rcond=None)
    return float(sol[0]), float(sol[1])


def _through_origin(x: np.ndarray, t: np.ndarray) -> float:
    """Slope ``b`` of ``t = b x`` minimising sum(((b x - t) / t)^2)."""
    r = x / t
    den = float(np.dot(r, r))
    return float(r.sum() / den) if den > 0 else 0.0


def mape(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute percentage error of ``pred`` against ``actual`` (in %; actual > 0)."""
    return float(np.mean(np.abs(pred - actual) / actual) * 100.0) if actual.size else 0.0


def alpha_beta(x: Any, t_ns: Any) -> dict[str, Any]:
    """Fit ``t = alpha + x / bandwidth`` (x in bytes, t in ns).

    Args:
        x: sizes (bytes), array-like; rows with ``x < 0`` or ``t <= 0`` or non-finite values
            are ignored.
        t_ns: measured durations in ns.

    Returns:
        ``{"alpha_ns", "bandwidth_bytes_per_s" (None when no size dependence), "n",
        "distinct_sizes", "mape_pct", "model": "alpha_beta" | "constant"}``. With fewer than
        two distinct sizes the size dependence cannot be separated from latency: model
        ``constant`` (alpha = median time).

    Example:
        Copies of 1 MB in 60 us and 2 MB in 110 us: slope 50 us/MB -> 20 GB/s, alpha 10 us.
    """
    xa = np.asarray(x, dtype=np.float64)
    ta = np.asarray(t_ns, dtype=np.float64)
    ok = np.isfinite(xa) & np.isfinite(ta) & (xa >= 0) & (ta > 0)
    xa, ta = xa[ok], ta[ok]
    n = int(xa.size)
    distinct = int(np.unique(xa).size)
    out: dict[str, Any] = {"alpha_ns": None, "bandwidth_bytes_per_s": None, "n": n,
                           "distinct_sizes": distinct, "mape_pct": None, "model": "constant"}
    if n == 0:
        return out
    if distinct >= 2:
        a, b = _wls(xa, ta)
        if a < 0:
            a, b = 0.0, _through_origin(xa, ta)
        if b > 0:
            pred = a + b * xa
            out.update(alpha_ns=a, bandwidth_bytes_per_s=1e9 / b, model="alpha_beta",
                       mape_pct=mape(pred, ta))
            return out
    med = float(np.median(ta))
    out.update(alpha_ns=med, mape_pct=mape(np.full_like(ta, med), ta))
    return out


def predict_alpha_beta(fit: dict[str, Any], x: Any) -> np.ndarray:
    """Predicted time (ns) of sizes ``x`` under an :func:`alpha_beta` result."""
    xa = np.asarray(x, dtype=np.float64)
    alpha = float(fit.get("alpha_ns") or 0.0)
    bw = fit.get("bandwidth_bytes_per_s")
    return alpha + (xa * 1e9 / float(bw) if bw else 0.0 * xa)


def saturating(work: Any, t_ns: Any, peak_per_s: float) -> dict[str, Any]:
    """Fit ``eff(w) = e_max * w / (w + w_half)`` to kernels of work ``w`` taking ``t_ns``.

    Efficiency of one kernel is ``w / (t * 1e-9) / peak_per_s``. The fit is done on time
    (see the module docstring: it is the alpha-beta line), which weights each kernel by its
    relative error.

    Args:
        work: FLOPs (or bytes) per kernel.
        t_ns: kernel durations in ns.
        peak_per_s: the ceiling (FLOP/s or bytes/s) the efficiency is relative to.

    Returns:
        ``{"e_max", "w_half", "n", "mape_pct"`` (predicted time), ``"rmse_eff"``
        (efficiency), ``"model": "saturating" | "constant"}``; ``constant`` (one size, or no
        size dependence) reports the median efficiency as ``e_max`` and ``w_half = 0``.

    Example:
        Kernels at 1/3 and 2/3 of e_max = 0.75 at w = w_half/2 and 2 w_half recover
        (0.75, w_half).
    """
    wa = np.asarray(work, dtype=np.float64)
    ta = np.asarray(t_ns, dtype=np.float64)
    ok = np.isfinite(wa) & np.isfinite(ta) & (wa > 0) & (ta > 0)
    wa, ta = wa[ok], ta[ok]
    out: dict[str, Any] = {"e_max": None, "w_half": None, "n": int(wa.size),
                           "mape_pct": None, "rmse_eff": None, "model": "constant"}
    if wa.size == 0 or peak_per_s <= 0:
        return out
    eff = wa / (ta * 1e-9) / peak_per_s
    ab = alpha_beta(wa, ta)
    if ab["model"] == "alpha_beta":
        b = 1e9 / ab["bandwidth_bytes_per_s"]  # ns per unit of work
        e_max = 1e9 / (b * peak_per_s)
        w_half = ab["alpha_ns"] / b
        model = "saturating"
    else:
        e_max, w_half, model = float(np.median(eff)), 0.0, "constant"
    pred_eff = e_max * wa / (wa + w_half)
    pred_t = wa / (pred_eff * peak_per_s) * 1e9
    out.update(e_max=float(e_max), w_half=float(w_half), model=model,
               mape_pct=mape(pred_t, ta),
               rmse_eff=float(np.sqrt(np.mean((pred_eff - eff) ** 2))))
    return out


def predict_saturating(fit: dict[str, Any], work: Any, peak_per_s: float) -> np.ndarray:
    """Predicted time (ns) of kernels of ``work`` under a :func:`saturating` result:
    ``t = (w + w_half) / (e_max * peak)``."""
    wa = np.asarray(work, dtype=np.float64)
    return (wa + float(fit["w_half"] or 0.0)) / (float(fit["e_max"]) * peak_per_s) * 1e9
