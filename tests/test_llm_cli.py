"""CLI: tree, layers and steps --by phase on a generated SGLang-style trace (the numbers
are the hand-worked ones of test_llm_generated.py)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceparse import load as traceparse_load
from traceparse.cli import main
from traceparse.samplegen.llm import LLMStep, serving_trace


@pytest.fixture
def trace(tmp_path: Path) -> str:
    p = tmp_path / "sglang.pt.trace.json"
    p.write_text(json.dumps(serving_trace("sglang", [
        LLMStep("prefill", 2, 64, (50, 60)), LLMStep("decode", 4, 4, (10, 10)),
        LLMStep("decode", 4, 4, (10, 200))], unlinked_us=7)))
    return str(p)


def _run(*args: str) -> str:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_tree_json_and_depth(trace: str) -> None:
    rows = json.loads(_run("tree", trace, "--view", "modules", "--format", "json"))
    assert rows[0]["name"] == "[all kernels]" and rows[0]["inclusive_ns"] == 359_000
    assert max(r["depth"] for r in rows) == 2
    shallow = json.loads(_run("tree", trace, "--depth", "1", "--format", "json"))
    assert {r["depth"] for r in shallow} == {0, 1}
    assert sum(r["inclusive_ns"] for r in shallow if r["depth"] == 1) == 359_000


def test_tree_table_indents(trace: str) -> None:
    out = _run("tree", trace, "--view", "modules")
    assert "\n    1    step[DECODE bs=4]" in out
    assert "      nn.Module: DecoderLayer_1" in out


def test_steps_by_phase_csv_and_summary(trace: str) -> None:
    rows = list(csv.DictReader(io.StringIO(_run("steps", trace, "--by", "phase",
                                                "--format", "csv"))))
    assert [r["phase"] for r in rows] == ["prefill", "decode", "decode"]
    assert [int(r["wall_ns"]) for r in rows] == [300_000, 300_000, 340_000]
    summ = json.loads(_run("steps", trace, "--by", "phase", "--summary", "--format", "json"))
    assert [r["phase"] for r in summ] == ["prefill", "decode"]
    assert summ[1]["step_p50_ns"] == 320_000.0
    assert summ[1]["tokens_per_s"] == pytest.approx(12_500.0)


def test_layers_and_force(trace: str, tmp_path: Path) -> None:
    out = tmp_path / "layers.json"
    _run("layers", trace, "--per-layer", "--format", "json", "-o", str(out))
    rows = json.loads(out.read_text())
    assert rows == []          # two layers are fewer than a group needs (3)
    res = CliRunner().invoke(main, ["layers", trace, "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    _run("layers", trace, "-o", str(out), "--force")


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(main, ["tree", str(bad)])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1
    assert "bad.json" in res.output


def test_summary_has_phases_and_tree(trace: str) -> None:
    out = json.loads(_run("summary", trace, "--format", "json"))
    ph = out["sections"]["phases"]
    assert [r["phase"] for r in ph] == ["prefill", "decode"]
    assert ph[1]["step_p50_ns"] == 320_000.0
    tree = out["sections"]["op_tree"]
    assert tree[0]["name"] == "[all kernels]" and tree[0]["inclusive_ns"] == 359_000
    assert {r["view"] for r in tree} == {"modules"}
    text = _run("summary", trace)
    assert "Phases (steps" in text and "decode   x2" in text
    assert "Kernel time by modules tree" in text


def test_report_sections_match_summary(trace: str, tmp_path: Path) -> None:
    from traceparse.reports.html import render_html
    from traceparse.reports.payload import build_payload

    tl = traceparse_load(trace)
    p = build_payload(tl)
    summ = json.loads(_run("summary", trace, "--format", "json"))["sections"]
    assert p["phases"]["table"]["rows"] == pytest.approx(summ["phases"])
    assert [r["inclusive_ns"] for r in p["op_tree"]["table"]["rows"]] == [
        r["inclusive_ns"] for r in summ["op_tree"]]
    assert p["op_tree"]["nodes"][0]["inclusive_ns"] == 359_000
    page = render_html(p)
    assert '<section id="phases">' in page and '<svg class="icicle"' in page
    assert "http://" not in page.split('<section id="op-tree">')[1].split("</section>")[0]


def test_icicle_escapes_and_widths() -> None:
    from traceparse.reports.llm_sections import icicle_svg

    nodes = [{"node_id": 0, "parent_id": None, "depth": 0, "name": "[all kernels]",
              "kind": "", "inclusive_ns": 100, "inclusive_pct": 100.0},
             {"node_id": 3, "parent_id": 0, "depth": 1, "name": "<script>x</script>",
              "kind": "user_annotation", "inclusive_ns": 75, "inclusive_pct": 75.0},
             {"node_id": 4, "parent_id": 0, "depth": 1, "name": "b&c", "kind": "cpu_op",
              "inclusive_ns": 25, "inclusive_pct": 25.0}]
    svg = icicle_svg(nodes)
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "b&amp;c" in svg
    # widths are proportional to inclusive time; the second child starts where the first ends
    assert 'x="0.00" y="20" width="720.00"' in svg
    assert 'x="720.00" y="20" width="240.00"' in svg


def test_steps_without_by_is_unchanged(tmp_path: Path) -> None:
    from traceparse.samplegen.llm import gpt_trace

    p = tmp_path / "gpt.pt.trace.json"
    p.write_text(json.dumps(gpt_trace([("fwd", 2, 16), ("fwd", 2, 1)])))
    rows = json.loads(_run("steps", str(p), "--format", "json"))
    assert [r["step"] for r in rows] == ["ProfilerStep#0", "ProfilerStep#1"]
    assert "phase" not in rows[0]
    by = json.loads(_run("steps", str(p), "--by", "phase", "--format", "json"))
    assert [r["phase"] for r in by] == ["prefill", "decode"]


def test_summary_and_report_layers_and_mix(tmp_path: Path) -> None:
    from traceparse.reports.html import render_html
    from traceparse.reports.payload import build_payload

    p = tmp_path / "three.pt.trace.json"
    p.write_text(json.dumps(serving_trace("sglang", [LLMStep("decode", 8, 8, (10, 10, 40))])))
    secs = json.loads(_run("summary", str(p), "--format", "json"))["sections"]
    lay = secs["layers"][0]
    assert (lay["layers"], lay["slowest"], lay["median_ns"]) == (3, 2, 10_000.0)
    assert lay["spread_pct"] == pytest.approx(300.0)
    # decode kernels: three GEMMs (60 us) and the 4 us sampler (class other)
    mix = {r["kernel_class"]: r for r in secs["phase_mix"]}
    assert mix["gemm"]["kernel_ns"] == 60_000
    assert mix["gemm"]["pct"] == pytest.approx(60 / 64 * 100)
    assert "Repeated layers" in _run("summary", str(p))
    pay = build_payload(traceparse_load(str(p)))
    assert pay["layers"]["table"]["rows"][0]["max_ns"] == 40_000
    assert pay["phases"]["mix_table"]["rows"] == pytest.approx(secs["phase_mix"])
    page = render_html(pay)
    assert '<section id="layers">' in page and "Kernel mix per phase" in page


@pytest.mark.shared
def test_tree_over_two_ranks() -> None:
    from tests.conftest import shared_files

    files = shared_files("torch", "param__dlrm_8rank__worker[01]_*.json")
    assert len(files) == 2
    total = sum(sum(e["dur"] for e in json.loads(f.read_text())["traceEvents"]
                    if str(e.get("cat", "")).lower() == "kernel") for f in files)
    rows = json.loads(_run("tree", *map(str, files), "--depth", "1", "--format", "json"))
    assert abs(rows[0]["inclusive_ns"] - total * 1000) < 1000
    assert sum(r["inclusive_ns"] for r in rows if r["depth"] == 1) == rows[0]["inclusive_ns"]
