"""diff's memory and tail gates: generated pairs with hand-computed answers (a 512 MiB
allocation planted in one op of one step, a P99 that doubles under a still median, tokens/s
that falls, identical runs), the renderers, and the CLI's exit codes and formats."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.conftest import TRACES
from traceparse import schema
from traceparse.analyses import diff_tail as dt
from traceparse.analyses.diff import Thresholds, compare
from traceparse.reports import diff as render
from traceparse.samplegen import scenarios as samplegen
from traceparse.timeline import Timeline

MiB = 1 << 20
STEP = 1000  # ns per generated step


def _memory_run(planted: bool) -> Timeline:
    """Four 1000 ns steps, each with top-level ops aten::a [+100, +400) and aten::b
    [+500, +800). A 100 MiB block lives from ts 50. Every step: aten::a allocates 64 MiB
    at +150 and frees it at +350; aten::b allocates 32 MiB at +600, frees at +700.
    Reserved: 256 MiB throughout. ``planted``: in step 2, aten::a also allocates 512 MiB
    at +200 and frees it at +300; the allocator reserves 512 MiB more and keeps it."""
    ev: list[tuple[int, int]] = [(50, 100 * MiB)]
    for k in range(4):
        t = k * STEP
        ev += [(t + 150, 64 * MiB), (t + 350, -64 * MiB), (t + 600, 32 * MiB),
               (t + 700, -32 * MiB)]
        if planted and k == 2:
            ev += [(t + 200, 512 * MiB), (t + 300, -512 * MiB)]
    ev.sort()
    level = np.cumsum([b for _, b in ev]).tolist()
    reserved = [256 * MiB + (512 * MiB if planted and ts >= 2 * STEP + 200 else 0)
                for ts, _ in ev]
    mem = schema.conform("memory", pl.DataFrame({
        "rank": [0] * len(ev), "device_id": [0] * len(ev), "ts_ns": [e[0] for e in ev],
        "kind": ["alloc" if b > 0 else "free" for _, b in ev], "bytes": [b for _, b in ev],
        "allocated_bytes": level, "reserved_bytes": reserved,
        "source": ["kineto [memory]"] * len(ev)}))
    rng = []
    for k in range(4):
        t = k * STEP
        rng += [("profiler_step", f"ProfilerStep#{k + 10}", t, t + STEP),
                ("cpu_op", "aten::a", t + 100, t + 400), ("cpu_op", "aten::b", t + 500, t + 800)]
    ranges = schema.conform("ranges", pl.DataFrame({
        "rank": [0] * len(rng), "kind": [r[0] for r in rng], "name": [r[1] for r in rng],
        "start_ns": [r[2] for r in rng], "end_ns": [r[3] for r in rng],
        "dur_ns": [r[3] - r[2] for r in rng], "thread_id": [1] * len(rng),
        "depth": [0] * len(rng)}, schema_overrides={"depth": pl.Int32}))
    return Timeline(memory=mem, ranges=ranges).validate()


def _row(m: pl.DataFrame, level: str, name: str, metric: str) -> dict[str, object]:
    r = m.filter((pl.col("level") == level) & (pl.col("name") == name)
                 & (pl.col("metric") == metric))
    assert r.height == 1, (level, name, metric, m)
    return r.row(0, named=True)


def test_planted_512mib_in_one_op_of_one_step() -> None:
    c = compare(_memory_run(False), _memory_run(True))
    m = c.memory
    # base peak: 100 + 64 = 164 MiB (inside every aten::a); new step 2: 164 + 512 = 676 MiB
    dev = _row(m, "device", "device 0", "peak allocated")
    assert (dev["base"], dev["new"], dev["change"]) == (164 * MiB, 676 * MiB, 512 * MiB)
    s2 = _row(m, "step", "#2 ProfilerStep#12", "peak allocated")
    assert s2["change"] == 512 * MiB
    assert s2["change_pct"] == pytest.approx(512 / 164 * 100)
    assert s2["flag"] == "regression"
    for k in (0, 1, 3):  # the other steps' peaks did not move
        assert _row(m, "step", f"#{k} ProfilerStep#{k + 10}", "peak allocated")["change"] == 0
    assert _row(m, "op", "aten::a", "peak allocated")["change"] == 512 * MiB
    assert _row(m, "op", "aten::b", "peak allocated")["change"] == 0
    # reserved: 256 MiB -> 768 MiB from step 2 on (kept by the allocator)
    assert _row(m, "device", "device 0", "peak reserved")["change"] == 512 * MiB
    assert _row(m, "step", "#1 ProfilerStep#11", "peak reserved")["change"] == 0
    assert _row(m, "step", "#3 ProfilerStep#13", "peak reserved")["change"] == 512 * MiB
    # the allocation that appeared, by op, with its size
    a = c.allocations
    assert a["op"].to_list() == ["aten::a"]
    r = a.row(0, named=True)
    assert (r["base_max_rise_bytes"], r["new_max_rise_bytes"]) == (64 * MiB, 576 * MiB)
    assert r["rise_change_bytes"] == 512 * MiB and r["status"] == "grew"
    assert r["new_sizes"].startswith(f"1 x {512 * MiB} B")
    assert not c.notes


@pytest.mark.parametrize(("pct", "nbytes", "failed"), [
    # allocated rows that grew 512 MiB: device, step 2, aten::a; reserved rows: device,
    # steps 2 and 3, aten::a, aten::b -> 8 rows above 256 MiB
    (None, 256 * MiB, 8),
    (None, 1 << 30, 0),
    # +312 % (512 / 164) on the three allocated rows; reserved grew +200 % (512 / 256)
    (300.0, None, 3),
    (150.0, None, 8),
    (300.0, 1 << 30, 0),  # both given: both must be exceeded
])
def test_memory_thresholds(pct: float | None, nbytes: int | None, failed: int) -> None:
    c = compare(_memory_run(False), _memory_run(True),
                thresholds=Thresholds(memory_pct=pct, memory_bytes=nbytes))
    assert int(c.memory["failed"].sum()) == failed
    assert c.failed["memory"] is (failed > 0)
    assert c.verdict == ("FAIL (memory)" if failed else "PASS")


def _walls(values: list[float], phase: str = "train",
           tokens: list[int] | None = None) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame({"rank": [0] * n, "step": [f"s{i}" for i in range(n)],
                         "phase": [phase] * n, "start_ns": list(range(n)),
                         "end_ns": list(range(n)), "wall_ns": values,
                         # steps one after another: each attributed its whole wall, and
                         # each one's time (period) is its wall
                         "period_ns": values, "attributed_ns": values,
                         "tokens": tokens if tokens is not None else [None] * n},
                        schema_overrides={"wall_ns": pl.Int64, "period_ns": pl.Int64,
                                          "attributed_ns": pl.Int64,
                                          "tokens": pl.Int64})


def test_p99_doubles_while_median_stays() -> None:
    # base: 1000 steps, 100 each of 10.000 .. 10.009 ms. Sorted, P50 sits between index
    # 499 (10.004 ms) and 500 (10.005 ms) -> 10.0045 ms; P95 (position 949.05) and P99
    # (989.01) fall in the 10.009 ms block.
    base = [10_000_000 + (i % 10) * 1000 for i in range(1000)]
    # new: the last 30 of the 10.009 ms steps take twice as long (20.018 ms): sorted they
    # are indices 970..999, so P99 (989.01) = 20.018 ms, P95 (949.05) = 10.009 ms, P50 same
    slow = [i for i in range(1000) if i % 10 == 9][-30:]
    new = [20_018_000 if i in slow else v for i, v in enumerate(base)]
    t = dt.tail_diff(Timeline(), Timeline(), walls=(_walls(base), _walls(new)))
    rows = {r["metric"]: r for r in t.iter_rows(named=True)}
    assert rows["p50_ns"]["base"] == rows["p50_ns"]["new"] == pytest.approx(10_004_500)
    assert rows["p95_ns"]["new"] == pytest.approx(10_009_000)
    assert rows["p99_ns"]["base"] == pytest.approx(10_009_000)
    assert rows["p99_ns"]["new"] == pytest.approx(20_018_000)
    assert rows["p99_ns"]["change_pct"] == pytest.approx(100.0)
    assert rows["p99_ns"]["flag"] == "regression"
    assert rows["p99_ns"]["ci_low"] > 0 and rows["p99_ns"]["ci_high"] >= 10_009_000 - 1
    assert rows["p50_ns"]["flag"] == "" and rows["p95_ns"]["flag"] == ""
    failed = dt.tail_failed(t, 50.0)
    assert failed.to_list() == [False, False, True]
    assert not dt.tail_failed(t, 150.0).any()
    # the median-based time gate cannot see it: the step median moved 0 %
    # (the same walls feed the time diff's step level)
    from traceparse.analyses.diff import diff

    d = diff(Timeline(), Timeline(), walls=(_walls(base), _walls(new)))
    step = d.filter(pl.col("level") == "step").row(0, named=True)
    assert step["delta_pct"] == 0.0 and step["flag"] == ""


def test_bootstrap_is_seeded_and_small_samples_are_insufficient() -> None:
    a = np.arange(100.0)
    assert dt.bootstrap_quantile_diff(a, a + 5, 0.5) == dt.bootstrap_quantile_diff(
        a, a + 5, 0.5)
    # disjoint samples: every resampled difference is > 0 -> p = 2 (0 + 1) / 2001
    lo, hi, p = dt.bootstrap_quantile_diff(a, a + 1000, 0.5)
    assert 900 < lo < 1000 < hi < 1100 and p == pytest.approx(2 / 2001)
    assert dt.bootstrap_quantile_diff(a, a, 0.5)[2] == 1.0
    # 20 steps: P50 and P95 compared, P99 (needs 100) is insufficient
    t = dt.tail_diff(Timeline(), Timeline(), walls=(_walls(list(range(100, 120))),
                                                    _walls(list(range(100, 120)))))
    assert t["flag"].to_list() == ["", "", "insufficient"]


def test_decode_tokens_per_s_falls() -> None:
    # 50 decode steps of 32 tokens: 10 ms each -> 3200 tok/s; new 12.5 ms -> 2560 tok/s
    # (-20 %); every wall quantile rises 25 %
    base = _walls([10_000_000] * 50, "decode", [32] * 50)
    new = _walls([12_500_000] * 50, "decode", [32] * 50)
    t = dt.tail_diff(Timeline(), Timeline(), walls=(base, new))
    tok = t.filter((pl.col("name") == "decode") & (pl.col("metric") == "tokens_per_s"))
    r = tok.row(0, named=True)
    assert (r["base"], r["new"]) == (pytest.approx(3200.0), pytest.approx(2560.0))
    assert r["change_pct"] == pytest.approx(-20.0) and r["flag"] == "regression"
    # constant walls: every resample gives the same rate, the interval is the point
    assert r["ci_low"] == pytest.approx(-640.0) and r["ci_high"] == pytest.approx(-640.0)
    assert set(t["name"].to_list()) == {"all steps", "decode"}
    failed = t.with_columns(dt.tail_failed(t, 15.0))
    bad = failed.filter(pl.col("failed"))
    # in both groups (all steps, decode): p50 and p95 (+25 %) and tokens/s (-20 %); the
    # P99 of 50 steps is insufficient
    assert sorted(bad["metric"].to_list()) == ["p50_ns", "p50_ns", "p95_ns", "p95_ns",
                                               "tokens_per_s", "tokens_per_s"]
    assert not dt.tail_failed(t, 25.0).any()


@pytest.mark.parametrize("make", [lambda: _memory_run(True),
                                  lambda: samplegen.scenario_timeline("mini_train")])
def test_identical_runs_never_fail(make) -> None:  # type: ignore[no-untyped-def]
    tl = make()
    c = compare(tl, tl, thresholds=Thresholds(0.0, 0.0, 0.0, 0))
    assert c.verdict == "PASS", (c.time, c.tail, c.memory)
    assert not any(c.failed.values())
    assert not c.memory["flag"].is_in(["regression", "improvement"]).any()
    assert c.allocations.height == 0


def test_trace_without_memory_events_says_so() -> None:
    tl = samplegen.scenario_timeline("mini_train")
    assert tl.memory.height == 0
    c = compare(tl, _memory_run(False), names=("a.sqlite", "b.json"),
                thresholds=Thresholds(memory_pct=0.0))
    assert c.memory.height == 0 and not c.failed["memory"]
    mem = [n for n in c.notes if n.startswith("memory:")]
    assert len(mem) == 1 and "a.sqlite recorded no memory events" in mem[0]
    md = render.to_markdown(c, base="a.sqlite", new="b.json")
    assert "not compared" in md and "no change" not in md
    txt = render.to_text(c, base="a", new="b")
    assert sum("no memory events" in line for line in txt.splitlines()) == 1


def test_renderers_verdict_first_and_json_rows() -> None:
    c = compare(_memory_run(False), _memory_run(True),
                thresholds=Thresholds(memory_bytes=256 * MiB), names=("b<1>", "n&2"))
    md = render.to_markdown(c, base="b<1>", new="n&2")
    assert md.splitlines()[0].startswith("**traceparse diff: FAIL (memory)**")
    assert "aten::a" in md and "FAILED" in md
    doc = json.loads(render.to_json(c, base="b<1>", new="n&2"))
    assert doc["verdict"] == "FAIL (memory)" and doc["failed"]["memory"] is True
    assert doc["thresholds"]["fail_memory_above_bytes"] == 256 * MiB
    mem = [r for r in doc["rows"] if r["section"] == "memory"]
    assert sum(r["failed"] for r in mem) == 8
    dev = next(r for r in mem if r["level"] == "device"
               and r["metric"] == "peak_allocated_bytes")
    assert (dev["base"], dev["new"], dev["change"]) == (164 * MiB, 676 * MiB, 512 * MiB)
    tail = [r for r in doc["rows"] if r["section"] == "tail"]
    assert {r["metric"] for r in tail} == {"p50_ns", "p95_ns", "p99_ns"}
    assert {"base", "new", "change", "change_pct", "p_value", "ci_low", "ci_high",
            "failed"} <= set(doc["rows"][0])
    assert doc["allocations"][0]["rise_change_bytes"] == 512 * MiB
    html = render.to_html(c, base="b<1>", new="n&2")
    assert "b&lt;1&gt;" in html and "n&amp;2" in html and "<1>" not in html


# -- real pair: a shared trace against a copy of itself with a planted allocation ---------

HOST_SYNC = TRACES / "gpu" / "scenarios" / "host_sync-bottleneck.json.gz"
PLANT = 512 * MiB


def _plant(src: Path, dst: Path, step: str = "ProfilerStep#3", op: str = "aten::matmul"
           ) -> dict[str, float]:
    """Copy ``src`` to ``dst`` (never modifying ``src``) with one 512 MiB block planted in
    the first top-level ``op`` of ``step``: a ``[memory]`` event of +512 MiB 1 us after the
    op starts and one of -512 MiB 1 us before it ends, on the op's device; the ``Total
    Allocated`` of every ``[memory]`` event of that device between them is raised by 512 MiB,
    and ``Total Reserved`` from the first one to the end of the trace (the caching allocator
    keeps the segment). Returns the window times (us) for the test's own replay."""
    data = json.loads(gzip.decompress(src.read_bytes()))
    ev = data["traceEvents"]
    st = next(e for e in ev if e.get("name") == step and e.get("ph") == "X")
    s0, s1 = st["ts"], st["ts"] + st["dur"]
    ops = [e for e in ev if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    o = next(e for e in sorted(ops, key=lambda e: e["ts"])
             if e["name"] == op and s0 <= e["ts"] < s1)
    # top-level: no other cpu_op of its thread encloses it
    assert not any(p is not o and p["tid"] == o["tid"] and p["ts"] <= o["ts"]
                   and p["ts"] + p["dur"] >= o["ts"] + o["dur"] for p in ops)
    mem = sorted((e for e in ev if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    dev = mem[0]["args"]["Device Id"]
    t_in, t_out = o["ts"] + 1.0, o["ts"] + o["dur"] - 1.0
    before = [e for e in mem if e["args"]["Device Id"] == dev and e["ts"] < t_in]
    alloc0, res0 = (before[-1]["args"]["Total Allocated"], before[-1]["args"]["Total Reserved"]) \
        if before else (0, 0)
    for e in mem:
        a = e["args"]
        if a["Device Id"] != dev:
            continue
        if t_in < e["ts"] < t_out:
            a["Total Allocated"] += PLANT
        if e["ts"] > t_in:
            a["Total Reserved"] += PLANT
    at_out = [e for e in mem if e["args"]["Device Id"] == dev and e["ts"] < t_out][-1]["args"]
    template = {k: v for k, v in before[-1].items() if k != "args"}
    ev.append({**template, "ts": t_in, "args": {
        **before[-1]["args"], "Bytes": PLANT, "Total Allocated": alloc0 + PLANT,
        "Total Reserved": res0 + PLANT, "Addr": 1}})
    ev.append({**template, "ts": t_out, "args": {
        **before[-1]["args"], "Bytes": -PLANT,
        "Total Allocated": at_out["Total Allocated"] - PLANT,
        "Total Reserved": at_out["Total Reserved"], "Addr": 1}})
    dst.write_text(json.dumps(data))
    return {"step_start": s0, "step_end": s1, "op_start": o["ts"], "op_end": o["ts"] + o["dur"],
            "device": dev}


def _replay_peak(path: Path, dev: int, s: float, e: float, key: str = "Total Allocated"
                 ) -> int:
    """Independent replay of the file's own [memory] events: the level in force at ``s``
    and every level recorded in ``[s, e)`` (us), max."""
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    mem = sorted((e2 for e2 in data["traceEvents"] if e2.get("name") == "[memory]"
                  and e2["args"]["Device Id"] == dev), key=lambda x: x["ts"])
    before = [m["args"][key] for m in mem if m["ts"] < s]
    inside = [m["args"][key] for m in mem if s <= m["ts"] < e]
    return max(([before[-1]] if before else [0]) + inside)


@pytest.mark.shared
def test_real_trace_against_copy_with_planted_allocation(tmp_path: Path) -> None:
    from traceparse.loader import load

    planted = tmp_path / "host_sync-planted.json"
    w = _plant(HOST_SYNC, planted)
    dev = int(w["device"])
    base, new = load(HOST_SYNC), load(planted)
    c = compare(base, new, thresholds=Thresholds(time_pct=10.0, tail_pct=10.0,
                                                 memory_bytes=256 * MiB))
    m = c.memory
    want = {}
    for label, (s, e) in {"step": (w["step_start"], w["step_end"]),
                          "op": (w["op_start"], w["op_end"])}.items():
        want[label] = (_replay_peak(HOST_SYNC, dev, s, e), _replay_peak(planted, dev, s, e))
    # the step's peak moves from its own base peak to the level in the matmul + 512 MiB: on
    # this trace 234,885,632 -> 234,881,536 + 536,870,912 = 771,752,448 B (the base step
    # peaks 4,096 B above the level the block was planted on)
    step = m.filter((pl.col("level") == "step")
                    & pl.col("name").str.ends_with("ProfilerStep#3")
                    & (pl.col("metric") == "peak allocated")).row(0, named=True)
    assert (step["base"], step["new"]) == want["step"]
    assert step["change"] == want["step"][1] - want["step"][0] == 536_866_816
    assert step["failed"]
    others = m.filter((pl.col("level") == "step") & ~pl.col("name").str.ends_with("#3")
                      & (pl.col("metric") == "peak allocated"))
    assert others.height == 5 and (others["change"] == 0).all()
    dev_row = m.filter((pl.col("level") == "device") & (pl.col("metric") == "peak allocated"))
    everywhere = (_replay_peak(HOST_SYNC, dev, -1, 1e30), _replay_peak(planted, dev, -1, 1e30))
    assert tuple(dev_row.row(0)[5:7]) == everywhere
    # the op's highest peak over its 24 instances: the planted one
    mm = m.filter((pl.col("level") == "op") & (pl.col("name") == "aten::matmul")
                  & (pl.col("metric") == "peak allocated")).row(0, named=True)
    assert mm["new"] == want["op"][1] == want["op"][0] + PLANT
    a = c.allocations.row(0, named=True)
    assert a["op"] == "aten::matmul" and a["new_sizes"].startswith(f"1 x {PLANT} B")
    # the copy runs the same events: neither time nor tail moved
    assert c.failed == {"time": False, "tail": False, "memory": True}
    assert c.verdict == "FAIL (memory)"


@pytest.mark.shared
def test_cli_gates_on_planted_copy(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceparse.cli import main

    planted = tmp_path / "planted.json"
    _plant(HOST_SYNC, planted)
    src_bytes = HOST_SYNC.read_bytes()

    def run(*args: str) -> tuple[int, str]:
        res = CliRunner().invoke(main, ["--no-cache", "diff", str(HOST_SYNC), str(planted),
                                        *args])
        return res.exit_code, res.output

    code, out = run("--fail-memory-above-bytes", "256MiB", "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["verdict"] == "FAIL (memory)"
    assert all(r["failed"] is False for r in doc["rows"] if r["section"] != "memory")
    code, out = run("--fail-memory-above-bytes", "1GiB", "--fail-above", "10",
                    "--fail-tail-above", "10", "--format", "markdown")
    assert code == 0 and out.startswith("**traceparse diff: PASS**")
    code, out = run("--fail-memory-above", "100")  # +229 % on the step
    assert code == 1 and "FAIL (memory)" in out.splitlines()[0]
    code, out = run("--fail-memory-above-bytes", "lots")
    assert code == 2 and "--fail-memory-above-bytes" in out
    assert HOST_SYNC.read_bytes() == src_bytes  # the input is never modified


@pytest.mark.shared
def test_real_trace_against_itself_passes_every_gate() -> None:
    from traceparse.loader import load

    tl = load(HOST_SYNC)
    c = compare(tl, tl, thresholds=Thresholds(0.0, 0.0, 0.0, 0))
    assert c.verdict == "PASS" and c.memory.height > 0 and c.tail.height == 3


SCENARIOS = TRACES / "gpu" / "scenarios"
PAIRS = sorted(p.name.removesuffix("-bottleneck.json.gz")
               for p in SCENARIOS.glob("*-bottleneck.json.gz")) if SCENARIOS.is_dir() else []


def _raw_maxima(path: Path) -> dict[int, tuple[int, int]]:
    """Per ``Device Id``: the largest ``Total Allocated`` and ``Total Reserved`` of the
    file's own [memory] events."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    out: dict[int, tuple[int, int]] = {}
    for e in ev:
        if e.get("name") == "[memory]":
            a = e["args"]
            d = a["Device Id"]
            old = out.get(d, (a["Total Allocated"], a["Total Reserved"]))
            out[d] = (max(old[0], a["Total Allocated"]), max(old[1], a["Total Reserved"]))
    return out


@pytest.mark.shared
@pytest.mark.parametrize("name", PAIRS)
def test_scenario_pairs_device_peaks_are_the_files_maxima(name: str) -> None:
    """bottleneck -> twin of each GPU scenario: the device rows are the maxima of the
    files' own totals; a side without [memory] events gives the one-line note instead."""
    from traceparse.loader import load

    b, n = SCENARIOS / f"{name}-bottleneck.json.gz", SCENARIOS / f"{name}-twin.json.gz"
    c = compare(load(b), load(n), names=(b.name, n.name))
    rb, rn = _raw_maxima(b), _raw_maxima(n)
    if not rb or not rn:
        assert c.memory.height == 0 and len([x for x in c.notes if "memory" in x]) == 1
        assert "recorded no memory events" in c.notes[0]
        return
    dev = c.memory.filter(pl.col("level") == "device")
    for r in dev.iter_rows(named=True):
        i = 0 if r["metric"] == "peak allocated" else 1
        assert r["base"] == (rb[r["device_id"]][i] if r["device_id"] in rb else None)
        assert r["new"] == (rn[r["device_id"]][i] if r["device_id"] in rn else None)
    assert {r for r in dev["device_id"].to_list()} == set(rb) | set(rn)
