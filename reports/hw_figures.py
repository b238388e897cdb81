"""Figures for the hardware sections: GPU-metric and device-memory counter lanes (drawn on
the timeline's time axis, as the Chrome export's counter tracks) and the device-memory
timeline. Data come from :mod:`traceparse.reports.hw_sections`."""

from __future__ import annotations

from typing import Any

from traceparse.reports.figures import _style, lane_figure, plt, to_svg


def counter_lanes(counters: dict[str, Any]) -> str:
    """One small lane per (device, counter): time-weighted mean per bin, ms since the first
    GPU activity (the timeline figure's axis)."""
    series = counters["series"]
    bin_ms = counters["bin_ns"] / 1e6
    window_ms = counters["window_ns"] / 1e6
    multi = len({(s["rank"], s["device_id"]) for s in series}) > 1
    with _style():
        fig, axes = lane_figure(len(series), 0.6, top_in=0.1, bottom_in=0.45)
        for ax, s in zip(axes[:, 0], series, strict=True):
            x = [(b + 0.5) * bin_ms for b in s["bin"]]
            scale = 1e9 if s["unit"] == "Hz" else 1.0
            y = [v / scale for v in s["value"]]
            ax.fill_between(x, y, step="mid", alpha=0.35, color="#4C72B0", linewidth=0)
            ax.plot(x, y, drawstyle="steps-mid", color="#4C72B0", linewidth=0.8)
            unit = "GHz" if s["unit"] == "Hz" else s["unit"]
            who = f"r{s['rank']} GPU{s['device_id']} " if multi else ""
            ax.set_ylabel(f"{who}{s['label']}\n({unit})", rotation=0, ha="right",
                          va="center", fontsize=8)
            if s["unit"] == "%":
                ax.set_ylim(0, 100)
            ax.set_xlim(0, max(window_ms, 1e-6))
        axes[-1, 0].set_xlabel("time since first GPU activity (ms)")
        return to_svg(fig, tight=False)


def memory_timeline(series: list[dict[str, Any]], t0_ns: int | None = None) -> str:
    """Allocated (and reserved) bytes per device over time (s since ``t0_ns``, the trace
    start; the first memory event without it)."""
    with _style():
        fig, ax = plt.subplots(figsize=(11, 3.2))
        t0 = t0_ns if t0_ns is not None else min(s["ts_ns"][0] for s in series if s["ts_ns"])
        for s in series:
            x = [(t - t0) / 1e9 for t in s["ts_ns"]]
            label = f"r{s['rank']} GPU{s['device_id']}" if s["device_id"] >= 0 \
                else f"r{s['rank']} host"
            ax.step(x, [b / 2**30 for b in s["allocated_bytes"]], where="post",
                    label=f"{label} allocated", linewidth=1)
            if any(v is not None for v in s["reserved_bytes"]):
                ax.step(x, [(b or 0) / 2**30 for b in s["reserved_bytes"]], where="post",
                        label=f"{label} reserved", linewidth=1, linestyle="--")
        ax.set_xlabel("time since the trace start (s)" if t0_ns is not None
                      else "time since the first memory event (s)")
        ax.set_ylabel("GiB")
        ax.legend(loc="upper left", fontsize=8, frameon=False)
        return to_svg(fig)


def lane_levels(s: dict[str, Any], window_start_ns: int, window_ns: int
                ) -> tuple[list[float], list[float]]:
    """A series' allocated GiB as steps over ``[0, window ms]``: the level in force at the
    window's start, each event inside, and the last level held to the end. With no event
    before the window the level in force is the one before the first event (what the
    capture started with: ``initial_bytes``, :func:`traceparse.analyses.memory.
    initial_level`), never 0."""
    window_ms = window_ns / 1e6
    x = [(t - window_start_ns) / 1e6 for t in s["ts_ns"]]
    y = [b / 2**30 for b in s["allocated_bytes"]]
    before = [v for t, v in zip(x, y, strict=True) if t <= 0]
    xs = [0.0] + [t for t in x if 0 < t < window_ms] + [window_ms]
    ys = [before[-1] if before else s.get("initial_bytes", 0) / 2**30]
    ys += [v for t, v in zip(x, y, strict=True) if 0 < t < window_ms]
    ys.append(ys[-1])
    return xs, ys


def memory_lanes(series: list[dict[str, Any]], window_start_ns: int, window_ns: int) -> str:
    """One small lane per GPU: allocated GiB over the timeline figure's axis (ms since the
    first GPU activity, clipped to the GPU window), the level held until the next event.
    Host memory (device -1) is left to the Device memory section."""
    gpus = [s for s in series if s["device_id"] >= 0 and s["ts_ns"]]
    window_ms = window_ns / 1e6
    multi = len({s["rank"] for s in gpus}) > 1
    with _style():
        fig, axes = lane_figure(len(gpus), 0.5, top_in=0.1, bottom_in=0.45)
        for ax, s in zip(axes[:, 0], gpus, strict=True):
            xs, ys = lane_levels(s, window_start_ns, window_ns)
            ax.fill_between(xs, ys, step="post", alpha=0.35, color="#937860", linewidth=0)
            ax.step(xs, ys, where="post", color="#937860", linewidth=0.8)
            who = f"r{s['rank']} " if multi else ""
            ax.set_ylabel(f"{who}GPU{s['device_id']}\nallocated\n(GiB)", rotation=0,
                          ha="right", va="center", fontsize=8)
            ax.set_ylim(0, max(max(ys) * 1.1, 1e-3))
            ax.set_xlim(0, max(window_ms, 1e-6))
        axes[-1, 0].set_xlabel("time since first GPU activity (ms)")
        return to_svg(fig, tight=False)


def figures(payload: dict[str, Any]) -> dict[str, str]:
    """The hardware figures the payload supports (SVG text by figure name)."""
    out: dict[str, str] = {}
    gm = payload.get("gpu_metrics")
    if gm and gm.get("counters") and gm["counters"].get("series"):
        out["counters"] = counter_lanes(gm["counters"])
    mem = payload.get("memory")
    if mem and mem.get("series") and any(s["ts_ns"] for s in mem["series"]):
        out["memory"] = memory_timeline(mem["series"], mem.get("t0_ns"))
        tl = payload.get("timeline") or {}
        if tl.get("window_ns") and any(s["device_id"] >= 0 and s["ts_ns"]
                                       for s in mem["series"]):
            out["memory_lane"] = memory_lanes(mem["series"], tl["window_start_ns"],
                                              tl["window_ns"])
    return out
