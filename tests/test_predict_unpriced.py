"""predict --scale keeps three kinds of GPU time at its measured duration and says which:
``measured`` (the op's tensors do not carry the batch), ``measured_no_shapes`` (the op
recorded no shapes) and ``measured_unpriced`` (the op's shapes carry the batch but no fit
prices it). Before, the last was counted in ``measured_no_shapes``: 167 us of its 7.43 ms on
``train_gpt2s_b2`` at F = 2 were the memsets of ops that did record shapes.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import SHARED
from tests.test_predict_scale import IDS, _cal, _gemm, _tl
from traceparse.analyses import scale
from traceparse.analyses.calibrate import calibrate
from traceparse.cli.main import main

#: host range of each op (0.5 us) and its launch call inside it
_HOST = [(1000, 1500), (2000, 2500), (3000, 3500), (4000, 4500)]


def _ops() -> list[dict[str, Any]]:
    """Four kernels back to back on one stream from 5 us, one per op:

    * ``aten::mm`` [1000, 800] x [800, 1250] bf16 (leading dim 1000 = B*T carries the
      batch), 10 us, priced by the gemm curve (r = 2 us, r_half = 2 us): at F = 2,
      10 * (4 + 2) / (2 + 2) = 15 us (``shapes``);
    * ``aten::bernoulli_`` with no shapes recorded, 3 us (``measured_no_shapes``);
    * ``aten::add`` on [1000, 800] fp32: carries the batch, has a roofline time, but the
      calibration has no curve for its class nor a pooled one, 2 us (``measured_unpriced``);
    * ``aten::add`` on a [768, 2304] weight: no batch, 1 us (``measured``).
    """
    kernels = [(_gemm(), 10_000),
               ({"name": "aten::bernoulli_", "dims": [], "types": []}, 3_000),
               ({"name": "aten::add", "dims": [[1000, 800], [1000, 800]],
                 "types": ["float", "float"]}, 2_000),
               ({"name": "aten::add", "dims": [[768, 2304], [768, 2304]],
                 "types": ["float", "float"]}, 1_000)]
    ops: list[dict[str, Any]] = [{**IDS, "start": 0, "end": 500}]
    t = 5_000
    for (op, dur), (s, e) in zip(kernels, _HOST, strict=True):
        ops.append({**op, "start": s, "end": e, "call": (s + 100, e - 100), "k_start": t,
                    "k_end": t + dur, "kernel": "nvjet_gemm" if op["name"] == "aten::mm"
                    else "elementwise_kernel"})
        t += dur
    return ops


def test_sources_split_kept_time_three_ways() -> None:
    tl = _tl(_ops(), (0, 4800))
    cal = _cal([{"class": "gemm", "precision": "bf16_tensor", "roof_half_ns": 2000.0}])
    one, two = scale.predict_scaled(tl, cal, 1.0), scale.predict_scaled(tl, cal, 2.0)
    # GPU-bound: kernels end at 5 + 10 + 3 + 2 + 1 = 21 us; at F = 2 the GEMM takes 15 us
    assert one["predicted_step_ns"] == 21_000 and two["predicted_step_ns"] == 26_000
    s = two["sources"]
    assert (s["shapes_ns"], s["curve_ns"], s["measured_ns"], s["measured_no_shapes_ns"],
            s["measured_unpriced_ns"], s["gpu_time_ns"]) == (15_000, 0, 1_000, 3_000, 2_000,
                                                              21_000)
    assert s["measured_unpriced_frac"] == pytest.approx(2_000 / 21_000)
    # at F = 1 every part keeps its measured time, in the same buckets
    assert one["sources"]["measured_unpriced_ns"] == 2_000
    assert one["sources"]["shapes_ns"] == 10_000
    rows = dict(zip(*scale.summary_rows(two).select("quantity", "value"), strict=True))
    assert rows["measured_no_shapes_ns"] == "3,000"
    assert rows["measured_unpriced_ns"] == "2,000"


SWEEP = SHARED / "traces" / "gpu" / "sweep"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _raw_kept(path: Path, batch: tuple[int, int]) -> tuple[int, int, int]:
    """From the Kineto JSON alone: (GPU time of activities whose launching op, the innermost
    ``cpu_op`` open at the launch call on its thread, recorded no tensor shape; GPU time of
    the memsets whose launching op has a tensor whose leading dim is B or B*T; their count).
    Durations in ns as the reader rounds them (us * 1000, to the nearest ns)."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    calls = {e["args"]["correlation"]: e for e in ev
             if e.get("cat") in ("cuda_runtime", "cuda_driver")
             and "correlation" in e.get("args", {})}
    ops: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in ev:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            ops[(e["pid"], e["tid"])].append(e)
    starts = {}
    for k, v in ops.items():
        v.sort(key=lambda e: e["ts"])
        starts[k] = [e["ts"] for e in v]

    def innermost(c: dict[str, Any]) -> dict[str, Any] | None:
        key = (c["pid"], c["tid"])
        lst = ops.get(key, [])
        for j in range(bisect.bisect_right(starts.get(key, []), c["ts"]) - 1, -1, -1):
            if lst[j]["ts"] + lst[j]["dur"] >= c["ts"]:
                return lst[j]
        return None

    def shapes(op: dict[str, Any] | None) -> list[list[int]]:
        if op is None:
            return []
        out = []
        for d in op.get("args", {}).get("Input Dims", []):
            if isinstance(d, list) and d and all(isinstance(v, int) for v in d):
                out.append(d)
            elif isinstance(d, list):  # a TensorList: its members
                out += [m for m in d if isinstance(m, list) and m
                        and all(isinstance(v, int) for v in m)]
        return out

    no_shapes = unpriced = n = 0
    for e in ev:
        if e.get("cat") not in GPU_CATS or e.get("ph") != "X":
            continue
        dur = round(e["dur"] * 1000)
        c = calls.get(e["args"].get("correlation"))
        op = innermost(c) if c else None
        sh = shapes(op)
        if not sh:
            no_shapes += dur
        elif e["cat"] == "gpu_memset" and any(d[0] in (batch[0], batch[0] * batch[1])
                                              for d in sh):
            unpriced += dur
            n += 1
    return no_shapes, unpriced, n


@pytest.mark.shared
def test_gpt2s_b2_memsets_are_unpriced_not_shapeless() -> None:
    path = SWEEP / "train_gpt2s_b2.json.gz"
    if not path.is_file():
        pytest.skip(f"no {path}")
    from traceparse.kineto.reader import read

    tl = read(str(path))
    cal = calibrate(tl)
    # the calibration has no memset bandwidth (a constant fit): a memset is not priced
    dev = cal["devices"][0]
    assert dev["memset"]["fit"]["model"] == "constant"
    r = scale.predict_scaled(tl, cal, 2.0)
    s = r["sources"]
    t = json.loads((SWEEP / "train_gpt2s_b2.truth.json").read_text())
    no_shapes, unpriced, n = _raw_kept(path, (int(t["batch"]), int(t["seq"])))
    # independent: 7,263,742 ns launched by ops without shapes; 222 memsets (aten::sum,
    # the cuDNN attention ops, aten::mm) of ops whose shapes carry the batch: 166,916 ns
    assert n == 222
    assert s["measured_no_shapes_ns"] == pytest.approx(no_shapes, abs=n)
    assert s["measured_unpriced_ns"] == pytest.approx(unpriced, abs=n)
    assert s["measured_no_shapes_ns"] + s["measured_unpriced_ns"] == 7_430_658  # the old sum


@pytest.mark.shared
def test_cli_table_csv_json_carry_the_split(tmp_path: Path) -> None:
    path = SWEEP / "train_gpt2s_b2.json.gz"
    if not path.is_file():
        pytest.skip(f"no {path}")
    run = CliRunner()
    cal = tmp_path / "cal.json"
    assert run.invoke(main, ["calibrate", str(path), "-o", str(cal)]).exit_code == 0
    base = ["predict", str(path), "--calibration", str(cal), "--scale", "batch=4"]
    out = {}
    for fmt in ("json", "csv", "table"):
        f = tmp_path / f"p.{fmt}"
        res = run.invoke(main, [*base, "--format", fmt, "-o", str(f)])
        assert res.exit_code == 0, res.output
        out[fmt] = f.read_text()
    s = json.loads(out["json"])["sources"]
    assert s["measured_unpriced_ns"] > 0
    for fmt in ("csv", "table"):
        assert "measured_unpriced_ns" in out[fmt]
        assert f"{s['measured_unpriced_ns']:,}" in out[fmt]
        assert f"{s['measured_no_shapes_ns']:,}" in out[fmt]
