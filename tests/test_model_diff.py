"""diff: the rank test against hand values (and scipy when installed), real traces, the
CI gate's exit codes, markdown/HTML output; calibrate --export files."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import REPO, TRACES

from traceparse.analyses.diff import diff, gate, mann_whitney_u
from traceparse.reports.diff import to_html, to_markdown
from traceparse.samplegen import scenarios as samplegen

CONTROL = TRACES / "torch" / "hta__trace_diff_control.json.gz"
DLRM0 = next(iter(sorted((TRACES / "torch").glob("param__dlrm_8rank__worker0_*"))), None)
DLRM1 = next(iter(sorted((TRACES / "torch").glob("param__dlrm_8rank__worker1_*"))), None)
FAMILY = "s1688gemm"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "traceparse", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_mann_whitney_hand_values() -> None:
    # a = 1,2,3 b = 4,5,6: U = 0, sigma = sqrt(9*7/12), z = (4.5 - 0.5)/sigma
    u, p = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 0.0
    assert p == pytest.approx(math.erfc(4.0 / math.sqrt(9 * 7 / 12) / math.sqrt(2)))
    assert mann_whitney_u([5, 5, 5], [5, 5, 5])[1] == 1.0  # all tied: no evidence
    # ties: a = 1,2,2 b = 2,3,3 -> combined ranks 1, 3, 3 | 3, 5.5, 5.5 -> R_a = 7, U = 1
    assert mann_whitney_u([1, 2, 2], [2, 3, 3])[0] == 1.0


def test_mann_whitney_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for _ in range(5):
        a = rng.integers(0, 20, 30)
        b = rng.integers(3, 25, 40)
        ref = stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic")
        u, p = mann_whitney_u(a, b)
        assert u == pytest.approx(ref.statistic)
        assert p == pytest.approx(ref.pvalue, rel=1e-9)


def test_diff_of_identical_trace_flags_nothing() -> None:
    tl = samplegen.scenario_timeline("mini_train")
    d = diff(tl, tl)
    assert not d["flag"].is_in(["regression", "improvement"]).any()
    assert not gate(d, 0.0)


def _slowed_copy(tmp: Path, factor: float) -> Path:
    data = json.loads(gzip.decompress(CONTROL.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    n = 0
    for e in events:
        if e.get("cat") == "kernel" and FAMILY in e.get("name", ""):
            e["dur"] = e["dur"] * factor
            n += 1
    assert n > 100
    out = tmp / "slowed.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.shared
def test_diff_control_vs_slowed_family(tmp_path: Path) -> None:
    from traceparse.loader import load

    slowed = _slowed_copy(tmp_path, 1.3)
    base, new = load(CONTROL), load(slowed)
    d = diff(base, new)
    k = d.filter(pl.col("level") == "kernel")
    fam = k.filter(pl.col("name").str.contains(FAMILY))
    # every kernel of the family: median up ~30 % (durations are whole us in the file)
    assert fam.height >= 10
    assert fam["delta_pct"].min() > 25 and fam["delta_pct"].max() < 35  # type: ignore[operator]
    # well-sampled ones (>= 50 launches each) are all flagged
    big = fam.filter(pl.col("n_base") >= 50)
    assert big.height >= 2 and (big["flag"] == "regression").all()
    # some names cover several problem sizes (e.g. 30 launches at 25, 60 and 220 us):
    # a 30 % shift of such a multi-modal distribution is not significant at alpha 0.01, so
    # it is not flagged; still most of the family is
    assert (fam["flag"] == "regression").mean() >= 0.75  # type: ignore[operator]
    # nothing outside the family is a kernel regression
    others = k.filter(~pl.col("name").str.contains(FAMILY))
    assert not others["flag"].is_in(["regression", "improvement"]).any()
    assert gate(d, 10.0) and not gate(d, 50.0)
    # CLI gate: 1 above threshold, 0 under it; markdown names the family
    r = _cli("diff", str(CONTROL), str(slowed), "--fail-above", "10", "--format", "markdown")
    assert r.returncode == 1, r.stderr
    assert FAMILY in r.stdout and "regression" in r.stdout
    assert _cli("diff", str(CONTROL), str(slowed), "--fail-above", "50",
                "--format", "json").returncode == 0


@pytest.mark.shared
def test_diff_two_dlrm_ranks() -> None:
    from traceparse.loader import load

    assert DLRM0 is not None and DLRM1 is not None
    a, b = load(DLRM0), load(DLRM1)
    d = diff(a, b)
    k = d.filter(pl.col("level") == "kernel")
    # independent counts: kernel instances per name on each rank
    na = a.kernels.group_by(pl.col("name").cast(pl.String)).len()
    want = dict(zip(na["name"].to_list(), na["len"].to_list(), strict=True))
    got = dict(zip(k["name"].to_list(), k["n_base"].to_list(), strict=True))
    assert {n: c for n, c in got.items() if c} == want
    # the same model on two ranks: the kernel mix is the same, so no compute kernel moves
    # by more than noise (communication kernels carry rank skew and may)
    comp = k.filter(~pl.col("name").str.contains("(?i)nccl"))
    assert not (comp["flag"] == "regression").any()
    r = _cli("diff", str(DLRM0), str(DLRM1), "--format", "html")
    assert r.returncode == 0
    assert "<html>" in r.stdout and "&lt;" in r.stdout  # kernel names are escaped


def test_diff_cli_bad_input_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = _cli("diff", str(bad), str(bad))
    assert r.returncode == 2
    assert "error" in r.stderr and "Traceback" not in r.stderr


def test_renderers_escape() -> None:
    from traceparse.analyses import diff_memory, diff_tail
    from traceparse.analyses.diff import Comparison, Thresholds

    d = pl.DataFrame({"level": ["kernel"], "name": ["a<b>&|c"], "per": ["instance"],
                      "n_base": [3], "n_new": [3],
                      "base_median_ns": [1.0], "new_median_ns": [2.0], "delta_pct": [100.0],
                      "base_total_ns": [3], "new_total_ns": [6], "total_delta_ns": [3],
                      "p_value": [0.001], "flag": ["regression"], "failed": [True]})
    no = {"failed": pl.Boolean}
    c = Comparison(time=d, tail=pl.DataFrame(schema={**diff_tail.SCHEMA, **no}),
                   memory=pl.DataFrame(schema={**diff_memory.SCHEMA, **no}),
                   allocations=pl.DataFrame(schema=diff_memory.ALLOC_SCHEMA), notes=(),
                   thresholds=Thresholds(time_pct=50.0), steps=(0, 0))
    html = to_html(c, base="x", new="<y>")
    assert "a&lt;b&gt;&amp;|c" in html and "&lt;y&gt;" in html and "<b>a" not in html
    md = to_markdown(c, base="x", new="y")
    assert md.startswith("**traceparse diff: FAIL (time)**")
    assert "a<b>&\\|c" in md and "FAILED" in md


def test_calibrate_cli_and_exports(tmp_path: Path) -> None:
    sample = tmp_path / "mini.sqlite"
    samplegen.write_sqlite("mini_train", sample)
    out = tmp_path / "cal.json"
    r = _cli("calibrate", str(sample), "-o", str(out))
    assert r.returncode == 0, r.stderr
    cal = json.loads(out.read_text())
    d = cal["devices"][0]
    # mini_train: every kernel launched by a 5-9 us call; H2D 2 MiB copies of 90 us
    assert d["launch"]["eager"]["count"] == 3 * (8 + 12 + 2 + 1)
    h2d = next(c for c in d["memcpy"] if c["direction"] == "HtoD")
    assert h2d["count"] == 3 and h2d["host_memory"] == "pinned"
    assert h2d["fit"]["alpha_ns"] == 90_000  # one size: constant model
    for kind, files in (("vidur", {"compute.csv", "kernels.csv"}),
                        ("astra-sim", {"system.json", "network.yml"}),
                        ("genz", {"genz_system.json"})):
        d_out = tmp_path / kind
        r = _cli("calibrate", str(sample), "--export", kind, "-o", str(d_out))
        assert r.returncode == 0, r.stderr
        names = {p.name for p in d_out.iterdir()}
        assert files | {"calibration.json"} <= names
    system = json.loads((tmp_path / "astra-sim" / "system.json").read_text())
    # endpoint delay = P50 busy-stream gap, an integer number of ns
    assert isinstance(system["endpoint-delay"], int)
    r = _cli("predict", str(sample), "--calibration", str(out))
    assert r.returncode == 0 and "window" in r.stdout
    r = _cli("whatif", str(sample))
    assert r.returncode == 2  # no change requested
    r = _cli("whatif", str(sample), "--speedup", "gemm=2", "--format", "json")
    rows = json.loads(r.stdout)
    win = next(x for x in rows if x["scope"] == "window")
    assert win["predicted_ns"] < win["measured_ns"]
