"""Predicted saving of the matching fix vs the saving its twin measured, on the H200 captures.

Usage (repo root): ``python3 benchmarks/fixes_vs_measured.py [--root DIR] [--write]``.
Dev-only. For every pair in ``../shared/traces/gpu/`` (the six known-cause scenarios, each
bottleneck with its twin; decode eager vs CUDA graph at each batch in ``sweep/``):

* **measured** saving of the fix = ``1 - median step of the twin / median step of the
  bottleneck``, the steps read from each trace's own step ranges (``ProfilerStep#N``; the
  decode traces' ``decode_step_N`` user ranges). Warm-up is a one-off, so for ``warmup`` it
  is ``1 - sum of the twin's steps / sum of the bottleneck's`` (the first step is the
  outlier the twin removes). The host-sync twins (``sync/``, decode with and without its
  per-step ``.item()``, held-out captures only) are read per GPU period instead
  (``analyses.steps.gpu_periods``): without the sync the host runs ahead and its step ranges say
  when a step was issued, not how long the GPU took;
* **predicted** = ``saving_ns / window_ns`` of the fix with that id in the report's ranked
  list (``recommend(build_payload(tl))``, what ``traceparse fixes`` prints), 0 when the fix
  is not offered; its rank in that list; the twin's first fix.

Goals (issue 24): the planted fix ranked first on every pair; every prediction within 25%
(relative) of the measured saving; on a twin the fix it already has never ranked first.

A second table checks the **profiler-free** saving (``saving_unprofiled_ns /
window_unprofiled_ns`` of the same fix: the engine's replay with the profiler's own cost
removed before and after the fix) against pairs whose step times were also measured
**without** the profiler: the CUDA-graph training twin (``sample_traces/h200_recheck/
graph``, ``*.truth.json``), the fusion re-check (``sample_traces/h200_recheck/fusion``,
eager vs jiterator/Triton/torch.compile, ``fusion_twins.json``) and decode eager vs graph
(``sweep/decode_b*_{eager,graph}.truth.json``; with ``--gpu`` only these, and the
host-sync twins where ``sync/`` exists, and the training step eager vs ``torch.compile`` +
fused AdamW where ``fusion/*/fusion_train_twin.json`` exist). Measured = ``1 -
twin's unprofiled median step / eager's``. Beside it, the replayed profiler-free window
per step before and after the fix (window / the trace's step count) against the two
measured steps, which says whether an error is the profiler estimate's (before) or the
fix's (after).
``--write`` replaces the section of ``benchmarks/RESULTS.md`` between its markers. Run it on
two checkouts (``--root``) for a before/after table.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GPU = REPO.parent / "shared" / "traces" / "gpu"
BEGIN, END = "<!-- fixes_vs_measured:begin -->", "<!-- fixes_vs_measured:end -->"

#: (pair, bottleneck file, twin file, fix id, step regex or None for ProfilerStep, sum?)
PAIRS = [
    ("pageable_copy", "scenarios/pageable_copy-bottleneck.json.gz",
     "scenarios/pageable_copy-twin.json.gz", "pinned-memory", None, False),
    ("host_sync", "scenarios/host_sync-bottleneck.json.gz", "scenarios/host_sync-twin.json.gz",
     "host-sync", None, False),
    ("launch_bound", "scenarios/launch_bound-bottleneck.json.gz",
     "scenarios/launch_bound-twin.json.gz", "cuda-graphs", None, False),
    ("unfused_elementwise", "scenarios/unfused_elementwise-bottleneck.json.gz",
     "scenarios/unfused_elementwise-twin.json.gz", "fusion", None, False),
    ("input_starved", "scenarios/input_starved-bottleneck.json.gz",
     "scenarios/input_starved-twin.json.gz", "input-pipeline", None, False),
    ("warmup", "scenarios/warmup-bottleneck.json.gz", "scenarios/warmup-twin.json.gz",
     "warm-up", None, True),
    ("decode b1", "sweep/decode_b1_eager.json.gz", "sweep/decode_b1_graph.json.gz",
     "cuda-graphs", r"^decode_step_\d+$", False),
    ("decode b64", "sweep/decode_b64_eager.json.gz", "sweep/decode_b64_graph.json.gz",
     "cuda-graphs", r"^decode_step_\d+$", False),
]


def _steps(tl: Any, regex: str | None) -> list[int]:
    from traceparse.analyses.steps import step_windows

    w = step_windows(tl, step_regex=regex)
    return [int(e - s) for s, e in zip(w["start_ns"].to_list(), w["end_ns"].to_list(),
                                       strict=True)]


def sync_pairs() -> list[tuple[str, Path, Path, Path, Path]]:
    """``(pair, sync trace, no-sync trace, sync truth, no-sync truth)`` of the host-sync
    twins (``sync/``, ``sample_traces/capture/sync_twins.py``), those present."""
    d = GPU / "sync"
    out = []
    for b in (1, 8, 64):
        for k in ("graph", "eager"):
            f = {v: d / f"decode_b{b}_{k}_{v}" for v in ("sync", "nosync")}
            if all(Path(f"{x}.json.gz").is_file() for x in f.values()):
                out.append((f"decode b{b} {k}: sync/no sync",
                            *(Path(f"{f[v]}.json.gz") for v in ("sync", "nosync")),
                            *(Path(f"{f[v]}.truth.json") for v in ("sync", "nosync"))))
    return out


def _fixes(tl: Any) -> list[dict[str, Any]]:
    from traceparse.reports.payload import build_payload
    from traceparse.reports.recommend import recommend

    items: list[dict[str, Any]] = recommend(build_payload(tl))["items"]
    return items


def _window(r: dict[str, Any]) -> int:
    return int(r.get("window_ns") or round(r["saving_ns"] * 100 / r["saving_pct"]))


def _saving(base: list[int], twin: list[int], total: bool) -> float:
    """The measured saving of a pair: 1 - twin / bottleneck, of the steps' totals (warm-up:
    the leading steps' excess counts) or of their medians."""
    if total:
        return 1 - sum(twin) / sum(base)
    return 1 - statistics.median(twin) / statistics.median(base)


def nsys_pairs() -> list[tuple[str, Path, Path, str, bool, bool]]:
    """``(pair, bottleneck, twin, fix, total?, GPU periods?)`` of the Nsight Systems captures
    present (sample_traces/h100_captures): the scenarios under nsys, whose NVTX ``step N``
    ranges are found without a regex, then the decoder (each step ends in a sync) and the
    training step (no per-step sync: its steps are GPU periods, not host ranges)."""
    def sqlite(name: str) -> str:
        return Path(name).name.replace(".json.gz", ".sqlite.gz")

    scn, dec, trn = GPU / "scenarios_nsys", GPU / "decode_nsys", GPU / "train_nsys"
    out = [(f"{name} (nsys)", scn / sqlite(b), scn / sqlite(t), fix, total, False)
           for name, b, t, fix, _regex, total in PAIRS[:6]]
    out += [(f"decode b{b} (nsys)", dec / f"decode_b{b}_eager.sqlite.gz",
             dec / f"decode_b{b}_graph.sqlite.gz", "cuda-graphs", False, False)
            for b in (1, 64)]
    out += [(f"train gpt2s b{b} (nsys)", trn / f"train_gpt2s_b{b}_eager.sqlite.gz",
             trn / f"train_gpt2s_b{b}_graph.sqlite.gz", "cuda-graphs", False, True)
            for b in (2, 8)]
    return [p for p in out if p[1].is_file() and p[2].is_file()]


def measure() -> list[dict[str, Any]]:
    import traceparse
    from traceparse.analyses.steps import gpu_periods

    rows = []
    for name, b, t, fix, regex, total in PAIRS:
        tb, tt = traceparse.load(GPU / b), traceparse.load(GPU / t)
        sb, st = _steps(tb, regex), _steps(tt, regex)
        rows.append(_pair_row(name, fix, tb, tt, _saving(sb, st, total),
                              f"{len(sb)}/{len(st)}"))
    for name, bp, tp, fix, total, periods in nsys_pairs():
        tb, tt = traceparse.load(bp), traceparse.load(tp)
        sb, st = (gpu_periods(x) if periods else _steps(x, None) for x in (tb, tt))
        rows.append(_pair_row(name, fix, tb, tt, _saving(sb, st, total),
                              f"{len(sb) + periods}/{len(st) + periods}"))
    regex = r"^decode_step_\d+$"
    for name, b, t, _, _ in sync_pairs():
        tb, tt = traceparse.load(b), traceparse.load(t)
        pb, pt = gpu_periods(tb, step_regex=regex), gpu_periods(tt, step_regex=regex)
        measured = 1 - statistics.median(pt) / statistics.median(pb)
        rows.append(_pair_row(name, "host-sync", tb, tt, measured,
                              f"{len(pb) + 1}/{len(pt) + 1}"))
    return rows


def _pair_row(name: str, fix: str, tb: Any, tt: Any, measured: float,
              steps: str) -> dict[str, Any]:
    """The profiled table's row of a pair: ``fix``'s predicted share of the bottleneck's
    window beside the ``measured`` saving, its rank, and both traces' first fixes."""
    fb, ft = _fixes(tb), _fixes(tt)
    ids = [r["id"] for r in fb]
    hit = next((r for r in fb if r["id"] == fix), None)
    pred = hit["saving_ns"] / _window(hit) if hit else 0.0
    return {"pair": name, "fix": fix, "steps": steps, "measured": measured,
            "predicted": pred, "rel_err": (pred - measured) / measured if measured else None,
            "rank": ids.index(fix) + 1 if fix in ids else None,
            "top": ids[0] if ids else "-", "twin_top": ft[0]["id"] if ft else "-"}


RECHECK = REPO / "sample_traces" / "h200_recheck"


def unprofiled_pairs() -> list[tuple[str, str, Path, int, float, float]]:
    """``(pair, fix, eager trace, steps regex or None, measured eager ms, twin ms)`` of the
    pairs measured without the profiler (those present)."""
    import json

    out: list[tuple[str, str, Path, Any, float, float]] = []
    if GPU.resolve() == (REPO.parent / "shared" / "traces" / "gpu").resolve():
        g = RECHECK / "graph"
        for b in (2, 8):
            e, t = (json.loads((g / f"train_gpt2s_b{b}_{v}.truth.json").read_text())
                    for v in ("eager", "graph"))
            out.append((f"train gpt2s b{b} eager/graph", "cuda-graphs",
                        g / f"train_gpt2s_b{b}_eager.json.gz", None, e["step_ms_median"],
                        t["step_ms_median"]))
        f = RECHECK / "fusion"
        runs = {r["name"]: r for r in json.loads((f / "fusion_twins.json").read_text())["runs"]}
        for n in (1 << 21, 1 << 25):
            eu = runs[f"fusion_eager_n{n}"]["unprofiled"]["step_ms_median"]
            for v in ("hand", "triton", "compile"):
                out.append((f"fusion 2^{n.bit_length() - 1} eager/{v}", "fusion",
                            f / f"fusion_eager_n{n}.json.gz", None, eu,
                            runs[f"fusion_{v}_n{n}"]["unprofiled"]["step_ms_median"]))
    for b in (1, 8, 64):
        tr = GPU / "sweep" / f"decode_b{b}_eager.truth.json"
        if tr.is_file():
            d = json.loads(tr.read_text())
            out.append((f"decode b{b} eager/graph", "cuda-graphs",
                        GPU / "sweep" / f"decode_b{b}_eager.json.gz", r"^decode_step_\d+$",
                        d["eager_step_ms_median"], d["graph_step_ms_median"]))
    for ft in sorted((GPU / "fusion").glob("*/fusion_train_twin.json")):
        d = json.loads(ft.read_text())
        out.append((f"train {d['model']} b{d['batch']} eager/compiled + fused AdamW", "fusion",
                    ft.parent / d["eager_trace"], None, d["eager_step_ms_median"],
                    d["fused_step_ms_median"]))
    for name, b, _, tb, tt in sync_pairs():
        out.append((name, "host-sync", b, r"^decode_step_\d+$",
                    json.loads(tb.read_text())["step_ms_median"],
                    json.loads(tt.read_text())["step_ms_median"]))
    return out


#: the engine change each fix of the unprofiled pairs replays (traceparse.analyses.savings);
#: fusion is left out: its replay keeps the fused-away kernels as zero-length rows, so a
#: step's last activity no longer marks its end
CHANGE = {"cuda-graphs": "no_launch_overhead"}


def _median_steps(tl: Any, regex: str | None, fix: str) -> tuple[float, float] | None:
    """Median replayed step (ms) without the profiler, before and after ``fix``: the same
    two replays the fix's profiler-free figure comes from, read per step instead of per
    window. A GPU activity belongs to the step its launching call (else itself) started
    in; a step ends at its last activity's replayed end, and lasts from the previous
    step's end (the first step, which has none, is left out)."""
    import numpy as np

    from traceparse.analyses import savings
    from traceparse.analyses.mechanisms import replay_args
    from traceparse.analyses.replay import predicted
    from traceparse.analyses.steps import step_ends, step_windows

    if fix not in CHANGE:
        return None
    w = step_windows(tl, step_regex=regex)
    prof = savings.profiler(tl)
    args, _ = replay_args(tl, CHANGE[fix])
    if prof is None or args is None or w.height < 3:
        return None
    out = []
    for a in ({}, args):
        end = predicted(tl, **a, profiler=prof)["pred_end_ns"].to_numpy()
        out.append(float(np.median(np.diff(step_ends(tl, end, step_regex=regex)))) / 1e6)
    return out[0], out[1]


def measure_unprofiled() -> list[dict[str, Any]]:
    import traceparse

    rows = []
    cache: dict[Path, tuple[list[dict[str, Any]], int]] = {}
    for name, fix, path, regex, eager_ms, twin_ms in unprofiled_pairs():
        if path not in cache:
            tl = traceparse.load(path)
            cache[path] = (_fixes(tl), len(_steps(tl, regex)), _median_steps(tl, regex, fix))
        items, n, med = cache[path]
        ids = [r["id"] for r in items]
        hit = next((r for r in items if r["id"] == fix), None)
        measured = 1 - twin_ms / eager_ms
        prof = hit["saving_ns"] / _window(hit) if hit else 0.0
        su, wu = (hit.get("saving_unprofiled_ns"), hit.get("window_unprofiled_ns")) if hit \
            else (None, None)
        pred = su / wu if su is not None and wu else None
        rows.append({"pair": name, "fix": fix, "measured": measured, "profiled": prof,
                     "predicted": pred,
                     "rel_err": None if pred is None else (pred - measured) / measured,
                     "rank": ids.index(fix) + 1 if fix in ids else None,
                     "top": ids[0] if ids else "-", "eager_ms": eager_ms, "twin_ms": twin_ms,
                     "before_ms": wu / n / 1e6 if wu and n else None,
                     "after_ms": (wu - su) / n / 1e6 if wu and su is not None and n else None,
                     "med": med})
    return rows


def table_unprofiled(rows: list[dict[str, Any]]) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    out = ["| pair | fix | measured (unprof.) | predicted profiler-free | rel. error | "
           "share of the profiled window (rel. error) | eager step: measured / replayed "
           "(ms) | fixed step: measured / replayed (ms) | median replayed step before / "
           "after (ms): share (rel. error) | rank of fix | first fix |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pred = "-" if r["predicted"] is None else f"{r['predicted'] * 100:.1f}%"
        err = "-" if r["rel_err"] is None else f"{r['rel_err'] * 100:+.1f}%"
        perr = (r["profiled"] - r["measured"]) / r["measured"] * 100
        out.append(f"| {r['pair']} | {r['fix']} | {r['measured'] * 100:.1f}% | {pred} | {err} "
                   f"| {r['profiled'] * 100:.1f}% ({perr:+.1f}%) | {ms(r['eager_ms'])} / "
                   f"{ms(r['before_ms'])} "
                   f"| {ms(r['twin_ms'])} / {ms(r['after_ms'])} | {_med(r)} "
                   f"| {r['rank'] or 'not offered'} "
                   f"| {r['top']} |")
    first = sum(r["rank"] == 1 for r in rows)
    within = sum(r["rel_err"] is not None and abs(r["rel_err"]) <= 0.25 for r in rows)
    pw = sum(abs(r["profiled"] - r["measured"]) <= 0.25 * r["measured"] for r in rows)
    out.append("")
    mw = sum(bool(r.get("med")) and abs(1 - r["med"][1] / r["med"][0] - r["measured"])
             <= 0.25 * r["measured"] for r in rows)
    out.append(f"Fix ranked first: {first}/{len(rows)}; profiler-free prediction within 25% "
               f"of the unprofiled measurement: {within}/{len(rows)} (the share of the "
               f"profiled window: {pw}/{len(rows)}; the median replayed steps' share, "
               f"measured like the truth, CUDA-graph pairs: {mw}/"
               f"{sum(bool(r.get('med')) for r in rows)}).")
    return "\n".join(out)


def _med(r: dict[str, Any]) -> str:
    if not r.get("med"):
        return "-"
    b, a = r["med"]
    share = 1 - a / b
    return (f"{b:.2f} / {a:.2f}: {share * 100:.1f}% "
            f"({(share - r['measured']) / r['measured'] * 100:+.1f}%)")


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| pair | fix | steps (b/t) | measured | predicted | rel. error | rank of fix | "
           "first fix | twin's first fix |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = "-" if r["rel_err"] is None else f"{r['rel_err'] * 100:+.1f}%"
        out.append(f"| {r['pair']} | {r['fix']} | {r['steps']} | {r['measured'] * 100:.1f}% | "
                   f"{r['predicted'] * 100:.1f}% | {err} | {r['rank'] or 'not offered'} | "
                   f"{r['top']} | {r['twin_top']} |")
    first = sum(r["rank"] == 1 for r in rows)
    within = sum(r["rel_err"] is not None and abs(r["rel_err"]) <= 0.25 for r in rows)
    twin_ok = sum(r["twin_top"] != r["fix"] for r in rows)
    out.append("")
    out.append(f"Planted fix ranked first: {first}/{len(rows)}; within 25% of measured: "
               f"{within}/{len(rows)}; twin's first fix is not the fix it has: "
               f"{twin_ok}/{len(rows)}.")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=str(REPO), help="checkout whose traceparse to use")
    ap.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    ap.add_argument("--gpu", default=None,
                    help="another capture folder laid out like ../shared/traces/gpu "
                         "(scenarios/, sweep/), e.g. sample_traces/h100_captures: the "
                         "held-out check, written to its own block")
    a = ap.parse_args()
    global GPU, BEGIN, END
    label = ""
    if a.gpu:
        GPU = Path(a.gpu).resolve()
        BEGIN, END = (m.replace("fixes_vs_measured", "fixes_vs_measured_holdout")
                      for m in (BEGIN, END))
        label = f" --gpu {a.gpu}"
    sys.path.insert(0, a.root)
    if not GPU.is_dir():
        print(f"{GPU}: no shared GPU captures", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    text = table(measure())
    text_u = table_unprofiled(measure_unprofiled())
    import polars as pl

    head = (f"Machine: {platform.machine()} {platform.system()}, Python "
            f"{platform.python_version()}, polars {pl.__version__}; "
            f"{time.strftime('%Y-%m-%d', time.gmtime())}; "
            f"{time.perf_counter() - t0:.0f} s for the 16 traces.")
    print(head)
    print(text)
    print()
    print(text_u)
    if a.write:
        res = REPO / "benchmarks" / "RESULTS.md"
        body = res.read_text()
        ub, ue = (m.replace("fixes_vs_measured", "fixes_vs_measured_unprofiled")
                  for m in (BEGIN, END))
        for b, e, title, t in ((BEGIN, END, "Fixes vs measured", text),
                               (ub, ue, "Fixes vs measured without the profiler", text_u)):
            block = (f"{b}\n## {title} (`python3 benchmarks/fixes_vs_measured.py "
                     f"--write{label}`)\n\n{head}\n\n{t}\n{e}")
            if b in body:
                body = body[:body.index(b)] + block + body[body.index(e) + len(e):]
            else:
                body = body.rstrip() + "\n\n" + block + "\n"
        res.write_text(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
