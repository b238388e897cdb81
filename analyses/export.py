"""Simulator inputs from a calibration: Vidur-style CSVs, ASTRA-sim system/network, GenZ.

:func:`export_files` returns ``{file name: text}``; the CLI writes them into one directory.
The mappings are documented in docs/calibration.md; in short, per device model (the first
one in the calibration unless ``device_model`` is given):

* ``vidur``: ``compute.csv`` (per kernel class/dtype: count and
  ``time_stats.<class>.median`` / ``p95`` in ms, Vidur's unit), ``kernels.csv`` (the
  per-name table), and ``<collective>.csv`` per collective with an alpha-beta fit:
  ``num_workers, size, time_stats.<collective>.median`` (ms) at sizes 1 KiB .. 1 GiB.
* ``astra-sim``: ``system.json`` (ring/direct collective implementations, ``endpoint-delay``
  = busy-stream inter-kernel gap P50 in ns, ``local-mem-bw`` = DRAM ceiling in GB/s) and
  ``network.yml`` (one ring dimension of the all-reduce group: link bandwidth = fitted
  bus bandwidth ``bw * 2(n-1)/n`` in GB/s, link latency = ``alpha / (2(n-1))`` in ns).
* ``genz``: ``genz_system.json`` with ``flops`` (TFLOP/s, the GEMM ceiling),
  ``offchip_mem_bw`` (GB/s), ``compute_efficiency`` (GEMM ``e_max`` or median achieved),
  ``memory_efficiency`` (device-to-device copy bandwidth / DRAM ceiling),
  ``comm_efficiency``, ``interchip_link_bw`` (GB/s) and ``interchip_link_latency`` (us).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from traceparse.analyses import fit

SIZES = [1 << p for p in range(10, 31, 2)]


def _device(cal: dict[str, Any], device_model: str | None) -> dict[str, Any]:
    from traceparse.errors import TraceError

    devs = cal.get("devices") or []
    for d in devs:
        if device_model is None or d["device_model"] == device_model:
            return d  # type: ignore[no-any-return]
    raise TraceError(None, f"calibration has no device {device_model!r}" if device_model
                     else "calibration has no device entries")


def _csv(header: list[str], rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def _ms(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e6:.6f}"


def peer_wait_warnings(d: dict[str, Any]) -> list[str]:
    """One line per collective fit of device entry ``d`` that saw a single rank (its times
    include waiting for the peers) or a single message size."""
    out = []
    for c in d.get("collectives") or []:
        what = f"{d.get('device_model')}: {c['collective']} (group size {c['group_size']})"
        if c.get("includes_peer_wait"):
            out.append(f"{what}: fitted from {c['max_ranks_seen']} rank, "
                       f"{c.get('sizes_seen', '?')} message size(s); kernel times include "
                       "waiting for the peers, so alpha is inflated")
        elif c.get("sizes_seen") == 1:
            out.append(f"{what}: fitted from 1 message size; alpha and bandwidth are not "
                       "separable")
    return out


def vidur(d: dict[str, Any]) -> dict[str, str]:
    """Vidur-style profiling CSVs (times in ms)."""
    files = {"compute.csv": _csv(
        ["kernel_class", "dtype", "count", "time_stats.median", "time_stats.p95"],
        [[k["class"], k["dtype"], k["count"], _ms(k["duration_ns"]["p50"]),
          _ms(k["duration_ns"]["p95"])] for k in d["kernels"]])}
    files["kernels.csv"] = _csv(
        ["name", "kernel_class", "count", "time_stats.median", "time_stats.p95"],
        [[k["name"], k["kclass"], k["count"], _ms(k["p50_ns"]), _ms(k["p95_ns"])]
         for k in d["kernel_table"]])
    for c in d["collectives"]:
        f = c.get("fit")
        if not f or f["model"] != "alpha_beta":
            continue
        name = c["collective"]
        rows = [[c["group_size"] or "", s, _ms(float(fit.predict_alpha_beta(f, [s])[0]))]
                for s in SIZES]
        files[f"{name}_{c['group_size'] or 'n'}.csv"] = _csv(
            ["num_workers", "size", f"time_stats.{name}.median"], rows)
    return files


def _ceiling(d: dict[str, Any], names: tuple[str, ...]) -> float | None:
    by = {c["name"]: c["value"] for c in d["ceilings"]}
    return next((float(by[n]) for n in names if n in by), None)


def _allreduce(d: dict[str, Any]) -> tuple[int, float, float] | None:
    """(group size n, link bandwidth GB/s, link latency ns) from the all-reduce fit."""
    for c in d["collectives"]:
        f = c.get("fit")
        n = c.get("group_size") or 0
        if c["collective"] == "allreduce" and f and f["model"] == "alpha_beta" and n > 1:
            bus = f["bandwidth_bytes_per_s"] * 2 * (n - 1) / n / 1e9
            return n, bus, float(f["alpha_ns"]) / (2 * (n - 1))
    return None


def astra_sim(d: dict[str, Any]) -> dict[str, str]:
    """ASTRA-sim ``system.json`` and analytical ``network.yml``."""
    launch = (d["launch"].get("eager") or d["launch"].get("graph") or {})
    gap = (launch.get("busy_gap_ns") or {}).get("p50")
    dram = _ceiling(d, ("dram",))
    system = {"scheduling-policy": "LIFO", "endpoint-delay": round(gap or 10),
              "active-chunks-per-dimension": 1, "preferred-dataset-splits": 4,
              "all-reduce-implementation": ["ring"], "all-gather-implementation": ["ring"],
              "reduce-scatter-implementation": ["ring"],
              "all-to-all-implementation": ["direct"],
              "collective-optimization": "localBWAware",
              "local-mem-bw": round(dram / 1e9, 3) if dram else 50, "boost-mode": 0}
    ar = _allreduce(d)
    n, bw, lat = ar if ar else (max(2, d.get("gpus", 2)), 25.0, 500.0)
    note = ("# from the all-reduce alpha-beta fit" if ar
            else "# no all-reduce fit in the calibration: ASTRA-sim example defaults")
    network = (f"{note}\ntopology: [ Ring ]\nnpus_count: [ {n} ]\n"
               f"bandwidth: [ {bw:.3f} ]  # GB/s per link\nlatency: [ {lat:.1f} ]  # ns\n")
    return {"system.json": json.dumps(system, indent=2) + "\n", "network.yml": network}


def genz(d: dict[str, Any]) -> dict[str, str]:
    """GenZ-style system parameters."""
    gemm = [k for k in d["kernels"] if k["class"] == "gemm" and k.get("efficiency")]
    gemm.sort(key=lambda k: -k["time_ns"])
    eff = None
    peak = None
    if gemm:
        e = gemm[0]["efficiency"]
        peak = e.get("ceiling_value")
        f = e.get("fit")
        eff = (f or {}).get("e_max") if f and f.get("model") == "saturating" else (
            (e.get("achieved") or {}).get("p50"))
    peak = peak or _ceiling(d, ("bf16_tensor", "fp16_tensor", "tf32_tensor", "fp32"))
    dram = _ceiling(d, ("dram",))
    d2d = next((c["fit"]["bandwidth_bytes_per_s"] for c in d["memcpy"]
                if c["direction"] == "DtoD" and c["fit"].get("bandwidth_bytes_per_s")), None)
    ar = _allreduce(d)
    out = {"device_model": d["device_model"],
           "flops": round(peak / 1e12, 3) if peak else None,
           "offchip_mem_bw": round(dram / 1e9, 3) if dram else None,
           "compute_efficiency": eff,
           "memory_efficiency": (d2d * 2 / dram) if d2d and dram else None,
           "comm_efficiency": 1.0 if ar else None,
           "interchip_link_bw": round(ar[1], 3) if ar else None,
           "interchip_link_latency": round(ar[2] / 1e3, 4) if ar else None,
           "notes": "memory_efficiency counts a device-to-device copy as read + write"}
    return {"genz_system.json": json.dumps(out, indent=2, sort_keys=True) + "\n"}


def export_files(cal: dict[str, Any], kind: str, *,
                 device_model: str | None = None) -> dict[str, str]:
    """Files for simulator ``kind`` (``vidur``, ``astra-sim``, ``genz``), plus
    ``WARNINGS.txt`` when a collective fit saw a single rank (times include peer wait) or a
    single message size (:func:`peer_wait_warnings`), so the caveat travels with them."""
    d = _device(cal, device_model)
    files = {"vidur": vidur, "astra-sim": astra_sim, "genz": genz}[kind](d)
    warnings = peer_wait_warnings(d)
    if warnings:
        files["WARNINGS.txt"] = "".join(f"{w}\n" for w in warnings)
    return files
