"""Sampled GPU metrics (``metrics`` table) joined onto kernels, steps and ranges.

Definitions (docs/metrics.md):

* A sample of metric *m* holds value ``v`` over its period ``[start_ns, end_ns)`` (the
  hardware counter's average over the period).
* The **time-weighted mean** of *m* over an interval ``[s, e)`` on a device is
  ``sum(v_i * overlap_i) / sum(overlap_i)`` over the samples overlapping it, with
  ``overlap_i = |[s, e) n [start_i, end_i)|``. Over a group of intervals (all launches of
  one kernel name, all steps) numerator and denominator are summed over the intervals, so
  long launches weigh more. ``covered_ns`` is the denominator: time with samples.
* **DRAM bandwidth** (bytes/s) = (DRAM Read + DRAM Write throughput %) / 100 x the
  device's ``memory_bandwidth_bps`` (the throughput metrics are % of that peak).
  Newer names ("DRAM Read Bandwidth") are accepted too.
* **DRAM bytes of a launch** = integral of that bandwidth over the launch. A sample is an
  average over its period, so where a launch covers only part of a sample, the sample's
  traffic may lie inside or outside the launch: ``dram_bytes_lo`` / ``dram_bytes_hi`` bound
  it (all of the sample's bytes outside the launch as far as the peak allows / as many
  inside as the peak allows), plus the counter's integer-% quantisation (+-0.5 % of peak
  over the covered time). ``dram_bytes`` is the proportional estimate.
* **clock_vs_spec** = time-weighted GPC clock / the device's ``clock_hz`` (nsys
  ``TARGET_INFO_GPU.clockRate``): above 1 the GPU boosted past that clock, below 1 it ran
  slower (throttled or idle-clocked) and every ceiling derived from the spec clock is that
  much too high for this run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from traceparse.timeline import Timeline

#: Metrics summarised per kernel, steps and ranges (the first present name of each set).
SUMMARY_METRICS: dict[str, tuple[str, ...]] = {
    "sm_active_pct": ("SM Active", "SMs Active"),
    "sm_issue_pct": ("SM Issue",),
    "tensor_active_pct": ("Tensor Active",),
    "dram_read_pct": ("DRAM Read Throughput", "DRAM Read Bandwidth"),
    "dram_write_pct": ("DRAM Write Throughput", "DRAM Write Bandwidth"),
    "gpc_clock_hz": ("GPC Clock Frequency",),
}


def sample_rate_hz(metrics: pl.DataFrame) -> float | None:
    """Sampling rate: 1e9 / median sample period; None without samples."""
    if metrics.height == 0:
        return None
    med = metrics["dur_ns"].median()
    return 1e9 / float(med) if med else None  # type: ignore[arg-type]


class _Integrator:
    """Integral of one metric's step function on one device: F(t) = int_{-inf}^t v dt."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray, values: np.ndarray) -> None:
        order = np.argsort(starts, kind="stable")
        self.s, self.e, self.v = starts[order], ends[order], values[order]
        self.cum_v = np.concatenate([[0.0], np.cumsum(self.v * (self.e - self.s))])
        self.cum_t = np.concatenate([[0.0], np.cumsum((self.e - self.s).astype(np.float64))])

    def _at(self, t: np.ndarray, weights: np.ndarray, cum: np.ndarray) -> np.ndarray:
        i = np.searchsorted(self.s, t, side="right") - 1
        j = np.clip(i, 0, len(self.s) - 1)
        part = np.clip(np.minimum(t, self.e[j]) - self.s[j], 0, None) * weights[j]
        out: np.ndarray = np.where(i < 0, 0.0, cum[j] + part)
        return out

    def integral(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(int v dt, covered time) over each [s, e)."""
        ones = np.ones_like(self.v)
        val = self._at(e, self.v, self.cum_v) - self._at(s, self.v, self.cum_v)
        cov = self._at(e, ones, self.cum_t) - self._at(s, ones, self.cum_t)
        return val, cov


def interval_means(metrics: pl.DataFrame, windows: pl.DataFrame,
                   names: Sequence[str] | None = None) -> pl.DataFrame:
    """Per window and metric: integral of the value and covered time.

    Args:
        metrics: the ``metrics`` table.
        windows: frame with ``rank, device_id, start_ns, end_ns`` and a row id ``_w``;
            ``device_id`` null means every sampled device of the rank.
        names: metrics to integrate (default: all).

    Returns:
        ``_w, rank, device_id, metric, integral, covered_ns`` (value x ns, ns).
    """
    out: list[pl.DataFrame] = []
    if metrics.height == 0 or windows.height == 0:
        return pl.DataFrame(schema={"_w": pl.Int64, "rank": pl.Int32, "device_id": pl.Int32,
                                    "metric": pl.String, "integral": pl.Float64,
                                    "covered_ns": pl.Float64})
    m = metrics.with_columns(pl.col("metric").cast(pl.String))
    if names is not None:
        m = m.filter(pl.col("metric").is_in(list(names)))
    for (rank, dev, name), part in m.group_by(["rank", "device_id", "metric"]):
        w = windows.filter((pl.col("rank") == rank)
                           & (pl.col("device_id").is_null() | (pl.col("device_id") == dev)))
        if w.height == 0:
            continue
        integ = _Integrator(part["start_ns"].to_numpy(), part["end_ns"].to_numpy(),
                            part["value"].to_numpy().astype(np.float64))
        val, cov = integ.integral(w["start_ns"].to_numpy(), w["end_ns"].to_numpy())
        out.append(pl.DataFrame({"_w": w["_w"].cast(pl.Int64), "rank": [rank] * w.height,
                                 "device_id": [dev] * w.height, "metric": [name] * w.height,
                                 "integral": val, "covered_ns": cov},
                                schema_overrides={"rank": pl.Int32, "device_id": pl.Int32}))
    if not out:
        return interval_means(metrics.clear(), windows)
    return pl.concat(out)


def _wide(per: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Sum integrals over ``keys`` and turn them into one column per summary metric."""
    agg = per.group_by([*keys, "metric"]).agg(pl.col("integral").sum(),
                                              pl.col("covered_ns").sum())
    cols = []
    for col, names in SUMMARY_METRICS.items():
        present = [n for n in names if n in set(agg["metric"].to_list())]
        if not present:
            continue
        sel = agg.filter(pl.col("metric") == present[0]).select(
            [*keys, (pl.col("integral") / pl.col("covered_ns")).alias(col),
             pl.col("covered_ns").alias(f"_cov_{col}")])
        cols.append(sel)
    if not cols:
        return agg.select(keys).unique()
    out = cols[0]
    for c in cols[1:]:
        out = out.join(c, on=keys, how="full", coalesce=True)
    cov_cols = [c for c in out.columns if c.startswith("_cov_")]
    return out.with_columns(pl.max_horizontal(cov_cols).alias("covered_ns")).drop(cov_cols)


def kernel_metrics(tl: Timeline) -> pl.DataFrame:
    """Time-weighted GPU metrics and DRAM bytes per kernel name.

    Returns one row per (rank, device, kernel name), sorted by total time:
    ``name, launches, total_ns, covered_ns, sm_active_pct, sm_issue_pct,
    tensor_active_pct, dram_read_pct, dram_write_pct, gpc_clock_hz, dram_bytes,
    dram_bytes_lo, dram_bytes_hi, dram_bytes_per_s`` (columns of absent metrics are
    omitted; empty frame without samples).
    """
    if tl.metrics.height == 0:  # before tl.kernels, a filtered copy of every gpu column
        return pl.DataFrame()
    k = tl.kernels
    if k.height == 0:
        return pl.DataFrame()
    wins = k.select("rank", "device_id", "start_ns", "end_ns",
                    pl.col("name").cast(pl.String)).with_row_index("_w").with_columns(
        pl.col("_w").cast(pl.Int64))
    names = [n for ns in SUMMARY_METRICS.values() for n in ns]
    per = interval_means(tl.metrics, wins, names).join(wins.select("_w", "name"), on="_w")
    keys = ["rank", "device_id", "name"]
    out = _wide(per, keys)
    launches = wins.group_by(keys).agg(launches=pl.len(),
                                       total_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    out = launches.join(out, on=keys, how="left")
    dram = dram_bytes(tl, wins)
    if dram.height:
        out = out.join(dram.join(wins.select(["_w", *keys]), on="_w").group_by(keys).agg(
            pl.col("dram_bytes", "dram_bytes_lo", "dram_bytes_hi").sum()), on=keys, how="left")
        out = out.with_columns(
            (pl.col("dram_bytes") / pl.col("total_ns") * 1e9).alias("dram_bytes_per_s"))
    spec = tl.devices.select("rank", "device_id", pl.col("clock_hz").cast(pl.Float64))
    if "gpc_clock_hz" in out.columns:
        out = out.join(spec, on=["rank", "device_id"], how="left").with_columns(
            (pl.col("gpc_clock_hz") / pl.col("clock_hz")).alias("clock_vs_spec")
        ).drop("clock_hz")
    return out.sort(["total_ns", "name"], descending=[True, False])


def _peak_bw(tl: Timeline) -> dict[tuple[int, int], float]:
    d = tl.devices.filter(pl.col("memory_bandwidth_bps").is_not_null())
    return {(int(r), int(dv)): float(bw) for r, dv, bw in
            d.select("rank", "device_id", "memory_bandwidth_bps").iter_rows()}


def dram_bytes(tl: Timeline, windows: pl.DataFrame) -> pl.DataFrame:
    """DRAM bytes per window from the DRAM read/write throughput samples, with bounds.

    Args:
        tl: timeline with ``metrics`` and ``devices.memory_bandwidth_bps``.
        windows: ``_w, rank, device_id, start_ns, end_ns``.

    Returns:
        ``_w, dram_bytes, dram_bytes_lo, dram_bytes_hi`` (empty when the device's peak
        bandwidth or the DRAM metrics are missing). See the module docstring.
    """
    peaks = _peak_bw(tl)
    rows: list[pl.DataFrame] = []
    m = tl.metrics.with_columns(pl.col("metric").cast(pl.String))
    for (rank, dev), part in m.group_by(["rank", "device_id"]):
        peak = peaks.get((int(rank), int(dev)))  # type: ignore[call-overload]
        if not peak:
            continue
        sel = []
        for names in (SUMMARY_METRICS["dram_read_pct"], SUMMARY_METRICS["dram_write_pct"]):
            hit = [n for n in names if n in set(part["metric"].unique().to_list())]
            if hit:
                sel.append(part.filter(pl.col("metric") == hit[0]))
        if not sel:
            continue
        # read + write per sample time (both metrics are sampled together)
        both = pl.concat(sel).group_by("start_ns", "end_ns").agg(pl.col("value").sum()) \
            .sort("start_ns")
        s_s, s_e = both["start_ns"].to_numpy(), both["end_ns"].to_numpy()
        bw = both["value"].to_numpy() / 100.0 * peak  # bytes/s per sample
        w = windows.filter((pl.col("rank") == rank) & (pl.col("device_id") == dev))
        if w.height:
            rows.append(_dram_window_bytes(w, s_s, s_e, bw, peak))
    if not rows:
        return pl.DataFrame(schema={"_w": pl.Int64, "dram_bytes": pl.Float64,
                                    "dram_bytes_lo": pl.Float64, "dram_bytes_hi": pl.Float64})
    return pl.concat(rows)


def _dram_window_bytes(w: pl.DataFrame, s_s: np.ndarray, s_e: np.ndarray, bw: np.ndarray,
                       peak: float) -> pl.DataFrame:
    """Vectorised :func:`dram_bytes` for one device: samples sorted and not overlapping,
    so only the first and last sample a window overlaps can be partial."""
    ws, we = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
    span = (s_e - s_s) / 1e9
    tot = bw * span
    cum = np.concatenate([[0.0], np.cumsum(tot)])
    first = np.searchsorted(s_e, ws, side="right")   # first sample ending after ws
    stop = np.searchsorted(s_s, we, side="left")     # first sample starting at/after we
    n = stop - first
    est = np.zeros(len(ws))
    lo = np.zeros(len(ws))
    hi = np.zeros(len(ws))
    cov = np.zeros(len(ws))
    # samples strictly between the first and the last are fully inside the window
    mid = n >= 3
    full_mid = np.where(mid, cum[np.clip(stop - 1, 0, None)] - cum[np.clip(first + 1, 0,
                                                                            len(cum) - 1)], 0.0)
    est += full_mid
    lo += full_mid
    hi += full_mid
    cum_span = np.concatenate([[0.0], np.cumsum(span)])
    cov += np.where(mid, cum_span[np.clip(stop - 1, 0, None)]
                    - cum_span[np.clip(first + 1, 0, len(cum_span) - 1)], 0.0)
    for idx, use in ((first, n >= 1), (stop - 1, n >= 2)):
        i = np.clip(idx, 0, len(s_s) - 1)
        ov = np.clip((np.minimum(we, s_e[i]) - np.maximum(ws, s_s[i])) / 1e9, 0.0, None)
        ov = np.where(use, ov, 0.0)
        full = ov >= span[i]
        est += bw[i] * ov
        cov += ov
        lo += np.where(use, np.where(full, tot[i],
                                     np.maximum(0.0, tot[i] - peak * (span[i] - ov))), 0.0)
        hi += np.where(use, np.where(full, tot[i], np.minimum(tot[i], peak * ov)), 0.0)
    quant = 0.005 * peak * cov
    return pl.DataFrame({"_w": w["_w"].cast(pl.Int64), "dram_bytes": est,
                         "dram_bytes_lo": np.maximum(0.0, lo - quant),
                         "dram_bytes_hi": hi + quant})


def window_metrics(tl: Timeline, windows: pl.DataFrame, *, label: str = "name"
                   ) -> pl.DataFrame:
    """Time-weighted metrics per window (steps, NVTX ranges): one row per window and device.

    Args:
        windows: ``rank, start_ns, end_ns`` and a ``label`` column; host windows apply to
            every sampled device of their rank.
    """
    if tl.metrics.height == 0 or windows.height == 0:
        return pl.DataFrame()
    wins = windows.select("rank", "start_ns", "end_ns", pl.col(label).cast(pl.String)) \
        .with_columns(pl.lit(None, dtype=pl.Int32).alias("device_id")) \
        .with_row_index("_w").with_columns(pl.col("_w").cast(pl.Int64))
    names = [n for ns in SUMMARY_METRICS.values() for n in ns]
    per = interval_means(tl.metrics, wins, names)
    out = _wide(per, ["_w", "rank", "device_id"])
    return wins.drop("device_id").join(out, on=["_w", "rank"], how="inner") \
        .sort("_w").drop("_w")


def range_metrics(tl: Timeline, *, kinds: Sequence[str] = ("nvtx_push_pop", "nvtx_start_end")
                  ) -> pl.DataFrame:
    """Time-weighted metrics per range name (summed over the name's instances)."""
    r = tl.ranges.filter(pl.col("kind").cast(pl.String).is_in(list(kinds))
                         & pl.col("end_ns").is_not_null())
    if tl.metrics.height == 0 or r.height == 0:
        return pl.DataFrame()
    wins = r.select("rank", "start_ns", "end_ns", pl.col("name").cast(pl.String)) \
        .with_columns(pl.lit(None, dtype=pl.Int32).alias("device_id")) \
        .with_row_index("_w").with_columns(pl.col("_w").cast(pl.Int64))
    names = [n for ns in SUMMARY_METRICS.values() for n in ns]
    per = interval_means(tl.metrics, wins, names).join(wins.select("_w", "name"), on="_w")
    keys = ["rank", "device_id", "name"]
    counts = wins.group_by("rank", "name").agg(
        instances=pl.len(), total_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    return counts.join(_wide(per, keys), on=["rank", "name"], how="inner") \
        .sort(["total_ns", "name"], descending=[True, False])


def untraced_activity(tl: Timeline, metric: str = "SM Active") -> pl.DataFrame:
    """The GPU's own counter over the stretches where the trace records no GPU activity.

    Per (rank, device): the window from its first to last traced GPU activity, minus the
    union of its non-sync activities = the "idle" time of the attribution. A time-weighted
    ``metric`` well above 0 there means the GPU was working on something the trace does
    not hold (another process, an untraced API, graph work not recorded).

    Returns ``rank, device_id, idle_ns, covered_ns, mean`` (``mean`` in the metric's unit);
    empty without samples of ``metric``.
    """
    from traceparse.analyses import intervals

    names = [metric, *(n for ns in SUMMARY_METRICS.values() if metric in ns for n in ns)]
    m = tl.metrics.filter(pl.col("metric").cast(pl.String).is_in(names))
    if m.height:  # the first name present (nsys renamed "SMs Active" to "SM Active")
        first = next(n for n in names if n in set(m["metric"].cast(pl.String)))
        m = m.filter(pl.col("metric").cast(pl.String) == first)
    if m.height == 0:
        return pl.DataFrame()
    # the columns read below, selected before the filter copies them
    acts = (tl.gpu.select("rank", "device_id", "kind", "start_ns", "end_ns")
            .filter(pl.col("kind") != "sync"))
    if acts.height == 0:
        return pl.DataFrame()
    by = ["rank", "device_id"]
    wins = acts.group_by(by).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    gaps = intervals.complement(acts.select(*by, "start_ns", "end_ns"), wins, by=by)
    if gaps.height == 0:
        return pl.DataFrame()
    gaps = gaps.with_row_index("_w").with_columns(pl.col("_w").cast(pl.Int64))
    per = interval_means(m, gaps)
    if per.height == 0:
        return pl.DataFrame()
    idle = gaps.group_by(by).agg(idle_ns=(pl.col("end_ns") - pl.col("start_ns")).sum())
    return idle.join(per.group_by(by).agg(pl.col("integral").sum(), pl.col("covered_ns").sum()),
                     on=by).with_columns(
        (pl.col("integral") / pl.col("covered_ns")).alias("mean")).drop("integral") \
        .sort(by)


def idle_caveat(tl: Timeline, *, threshold_pct: float = 10.0) -> str | None:
    """A sentence when the GPU's SM Active counter contradicts the trace's idle time (mean
    above ``threshold_pct`` over the stretches with no traced GPU activity), else None."""
    ua = untraced_activity(tl)
    if ua.height == 0:
        return None
    bad = ua.filter(pl.col("mean") > threshold_pct)
    if bad.height == 0:
        return None
    parts = [f"rank {r['rank']} GPU {r['device_id']}: {r['mean']:.1f}% over "
             f"{r['idle_ns'] / 1e6:.3f} ms" for r in bad.iter_rows(named=True)]
    return ("the GPU's own SM Active counter (nsys GPU metrics) was high while the trace "
            "shows no GPU activity (" + "; ".join(parts) + "): the GPU ran work this trace "
            "does not record (another process, an untraced API or graph work), so its "
            "idle time is not idle hardware")


#: Measured clock / listed clock below which the run counts as throttled.
THROTTLE_RATIO = 0.95


def kernel_clock(tl: Timeline) -> pl.DataFrame:
    """The SM (GPC) clock the kernels ran at, per device, vs the device's listed clock.

    ``gpc_clock_hz`` = time-weighted GPC Clock Frequency over every kernel launch of the
    device (concurrent launches each count); ``spec_clock_hz`` = ``devices.clock_hz``
    (nsys ``TARGET_INFO_GPU.clockRate``, the peak clock the driver lists);
    ``clock_vs_spec`` = their ratio; ``throttled`` = ratio < :data:`THROTTLE_RATIO`.

    Returns ``rank, device_id, gpc_clock_hz, covered_ns, spec_clock_hz, clock_vs_spec,
    throttled``; empty without GPC clock samples under the kernels.

    Example: one kernel [0, 200) ns over clock samples 1.2 GHz on [0, 100) and 1.6 GHz on
    [100, 200) -> 1.4 GHz; with a listed 2.0 GHz, 0.7x: throttled.
    """
    names = list(SUMMARY_METRICS["gpc_clock_hz"])
    m = tl.metrics.filter(pl.col("metric").cast(pl.String).is_in(names)) \
        if tl.metrics.height else tl.metrics
    if m.height == 0:  # before tl.kernels, a filtered copy of every gpu column
        return pl.DataFrame()
    k = tl.kernels
    if k.height == 0:
        return pl.DataFrame()
    wins = k.select("rank", "device_id", "start_ns", "end_ns").with_row_index("_w") \
        .with_columns(pl.col("_w").cast(pl.Int64))
    per = interval_means(m, wins)
    out = per.group_by("rank", "device_id").agg(pl.col("integral").sum(),
                                                pl.col("covered_ns").sum()) \
        .filter(pl.col("covered_ns") > 0)
    if out.height == 0:
        return pl.DataFrame()
    spec = tl.devices.select("rank", "device_id",
                             pl.col("clock_hz").cast(pl.Float64).alias("spec_clock_hz"))
    return out.select("rank", "device_id",
                      (pl.col("integral") / pl.col("covered_ns")).alias("gpc_clock_hz"),
                      "covered_ns") \
        .join(spec, on=["rank", "device_id"], how="left") \
        .with_columns((pl.col("gpc_clock_hz") / pl.col("spec_clock_hz")).alias("clock_vs_spec")) \
        .with_columns((pl.col("clock_vs_spec") < THROTTLE_RATIO).alias("throttled")) \
        .sort("rank", "device_id")


def clock_line(r: dict[str, object]) -> str:
    """One sentence for a :func:`kernel_clock` row (summary and report).

    Example:
        >>> s = clock_line({"rank": 0, "device_id": 0, "gpc_clock_hz": 1.4e9,
        ...     "spec_clock_hz": 2.0e9, "clock_vs_spec": 0.7, "throttled": True})
        >>> s[:48], "0.70x the listed 2,000 MHz: THROTTLED" in s
        ('rank 0 GPU 0: SM clock 1,400 MHz during kernels ', True)
        >>> s[-40:]  # 1 / 0.7 - 1 = 43 %
        'sted clock are 43% too high for this run'
    """
    clk = float(r["gpc_clock_hz"])  # type: ignore[arg-type]
    s = (f"rank {r['rank']} GPU {r['device_id']}: SM clock {clk / 1e6:,.0f} MHz during "
         "kernels (nsys GPU metrics, time-weighted)")
    spec, ratio = r.get("spec_clock_hz"), r.get("clock_vs_spec")
    if not spec or ratio is None:
        return s + "; the device lists no clock to compare with"
    s += f" = {float(ratio):.2f}x the listed {float(spec) / 1e6:,.0f} MHz"  # type: ignore[arg-type]
    if r.get("throttled"):
        return s + (": THROTTLED (or not yet boosted): compute ceilings at the listed clock "
                    f"are {100.0 * (1.0 / float(ratio) - 1.0):.0f}% too high for this run")  # type: ignore[arg-type]
    if float(ratio) > 1.0:  # type: ignore[arg-type]
        return s + ": no throttling (boosted above the listed clock)"
    return s + ": no throttling"


def clock_lines(tl: Timeline) -> list[str]:
    """:func:`clock_line` for every device with GPC clock samples under its kernels."""
    return [clock_line(r) for r in kernel_clock(tl).iter_rows(named=True)]
