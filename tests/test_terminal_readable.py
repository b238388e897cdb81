"""Terminal views read by people, on the real DLRM set and a trace without NCCL (issue 26):
a rank is never printed in a duration column, ``info`` lists the devices that ran work, and
a saving whose part the trace does not have is not printed."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import TRACES
from traceparse.cli import main
from traceparse.cli.common import metric_rows
from traceparse.reports.summary_text import _savings

DLRM = sorted((TRACES / "torch").glob("param__dlrm_8rank__worker*"))


def test_rank_in_a_statistics_row_is_an_id_not_a_duration() -> None:
    f = pl.DataFrame({"metric": ["graph_recoverable_ns"], "count": [1635], "sum": [926_000.0],
                      "rank": [5]})
    out, _ = metric_rows(f)
    row = out.row(0, named=True)
    assert row == {"metric": "graph_recoverable", "count": "1635", "sum": "926 µs", "rank": "5"}


def test_savings_of_an_absent_part_are_not_printed() -> None:
    f = pl.DataFrame({"rank": [0, 0], "change": ["no_launch_overhead", "overlap_comm"],
                      "saving_ns": [5_970_000, 0], "bound_ns": [12_500_000, 0],
                      "measured_ns": [4_380_000_000, 4_380_000_000],
                      "predicted_ns": [4_374_000_000, 4_380_000_000]})
    text = "\n".join(_savings(f))
    assert "no_launch_overhead" in text and "overlap_comm" not in text
    assert _savings(f.filter(pl.col("change") == "overlap_comm")) == []


@pytest.mark.shared
def test_dlrm_launches_and_info(tmp_path: Path) -> None:
    if len(DLRM) != 8:
        pytest.skip("DLRM set not in the corpus")
    args = [str(p) for p in DLRM]
    res = CliRunner().invoke(main, ["--no-cache", "launches", *args])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("graph_recoverable"))
    assert not line.rstrip().endswith("ns")  # the rank column
    assert line.split()[-1].isdigit()
    res = CliRunner().invoke(main, ["--no-cache", "info", *args])
    assert res.exit_code == 0, res.output
    dev = [ln for ln in res.output.splitlines() if ln.startswith("device ")]
    # each rank's trace lists 8 V100s; rank r ran work on device r only (deviceProperties
    # and the kernels' "device" field, read from the JSON)
    ran = set()
    for i, p in enumerate(DLRM):
        evs = json.loads(p.read_text())["traceEvents"]
        ran |= {(i, e["args"]["device"]) for e in evs
                if e.get("cat") == "kernel" and "device" in e.get("args", {})}
    assert len(dev) == len(ran) == 8
    assert "56 more listed by the ranks' traces (not shown)" in res.output


@pytest.mark.shared
def test_summary_without_nccl_says_nothing_about_overlap() -> None:
    p = TRACES / "nsys" / "resest__report2.sqlite"
    if not p.is_file():
        pytest.skip("resest not in the corpus")
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(p)])
    assert res.exit_code == 0, res.output
    assert "overlap_comm" not in res.output and "0 ns of 0 ns" not in res.output


@pytest.mark.shared
def test_summary_lists_no_fix_that_saves_nothing() -> None:
    # train_gpt2s_b2 has no host-sync time (0.0%): its host-sync replay saves exactly 0 ns,
    # which the summary listed as "host-sync 0 ns of 143 ms"; the fixes that save remain
    p = TRACES / "gpu" / "sweep" / "train_gpt2s_b2.json.gz"
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(p)])
    assert res.exit_code == 0, res.output
    could = res.output.split("Could save")[1].split("Verdict")[0]
    assert "host-sync" not in could and " 0 ns of" not in could
    assert "cuda-graphs" in could and "fusion" in could


@pytest.mark.shared
def test_multi_rank_could_save_marks_the_rank_headlines_quote() -> None:
    """The 8 DLRM ranks wait for one another in all-to-alls: per fix, exactly one row is
    starred, the rank whose window after the fix is the longest (read back from the
    printed rows), and a footnote says why; one rank alone prints no star."""
    import re

    def parse_duration_ns(text: str) -> int:
        value, unit = text.split()
        return round(float(value) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit])

    res = CliRunner().invoke(main, ["--no-cache", "summary", *map(str, DLRM)])
    assert res.exit_code == 0, res.output
    could = res.output.split("Could save")[1].split("\n\n")[0].splitlines()[1:]
    row = re.compile(r"^ ([* ])rank (\d+)\s+(\S+)\s.*-> ([0-9.]+ [µm]?s)")
    by_fix: dict[str, list[tuple[bool, int, int]]] = {}
    for line in could:
        m = row.match(line)
        if m:
            by_fix.setdefault(m[3], []).append(
                (m[1] == "*", int(m[2]), parse_duration_ns(m[4])))
    assert set(by_fix) >= {"fusion", "host-sync", "cuda-graphs", "pinned-memory"}
    for fix, rows in by_fix.items():
        starred = [r for r in rows if r[0]]
        assert len(starred) == 1, fix
        assert starred[0][2] == max(r[2] for r in rows), fix
    assert could[-1].startswith("  * the rank each fix's headline quotes")
    one = CliRunner().invoke(main, ["--no-cache", "summary", str(DLRM[0])]).output
    assert " *rank" not in one and "headline quotes" not in one
