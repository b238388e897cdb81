"""An Nsight Compute page read alone: its FLOPs from ``--metrics`` counters (thousands
separators), and a summary of its own (launches, kernel time, roofline position, bound)
instead of the timeline summary's "0 ns, 0 devices ... no GPU activity" (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import traceparse
from tests.conftest import TRACES
from traceparse.cli.main import main
from traceparse.roofline.build import build
from traceparse.roofline.ncu_summary import summarize_ncu

ID = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
      '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
      '"Metric Value"')
ROW = ('"0","1234","python3","127.0.0.1","sgemm_kernel","1","7","(256, 1, 1)","(64, 64, 1)",'
       '"0","9.0","Command line profiler metrics","{}","{}","{}"')
#: fadd 2,097,152 + fmul 1,048,576 + 2 x ffma 8,589,934,592 = 17,183,014,912 FLOPs
COUNTERS = [("smsp__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst", "2,097,152"),
            ("smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "8,589,934,592"),
            ("smsp__sass_thread_inst_executed_op_fmul_pred_on.sum", "inst", "1,048,576")]
FLOPS = 2_097_152 + 1_048_576 + 2 * 8_589_934_592
TIME = [("gpu__time_duration.sum", "ns", "1,048,576"), ("dram__bytes.sum", "byte", "12,582,912")]


def _page(tmp: Path, rows: list[tuple[str, str, str]]) -> Path:
    p = tmp / "metrics.csv"
    p.write_text("==PROF== Connected to process 1234 (/usr/bin/python3)\n" + ID + "\n"
                 + "\n".join(ROW.format(*r) for r in rows) + "\n")
    return p


def test_metrics_page_ffma_counters_give_flops(tmp_path: Path) -> None:
    tl = traceparse.load(_page(tmp_path, COUNTERS + TIME))
    assert tl.ncu["flop_fp32"][0] == FLOPS
    pts, _c, _n = build(tl, gpu="H100 SXM5 80GB")
    r = pts.row(0, named=True)
    # a --metrics page without any tensor-core counter: FP FLOPs are a lower bound, and
    # 17.18e9 FLOPs / 12.58e6 B = 1,365 FLOP/B lies right of the ridge: compute-bound holds
    assert r["placed"] and r["precision"] == "fp32" and r["bound"] == "compute"
    assert r["note"].startswith("this page has no tensor-core counter")
    assert r["flop_per_s"] == pytest.approx(FLOPS / 1_048_576e-9)  # 16.4 TFLOP/s
    assert r["dram_bytes_per_s"] == pytest.approx(12_582_912 / 1_048_576e-9)


def test_metrics_page_without_time_says_flops_counted(tmp_path: Path) -> None:
    pts, _c, _n = build(traceparse.load(_page(tmp_path, COUNTERS)))
    r = pts.row(0, named=True)
    assert not r["placed"] and r["precision"] == "fp32"
    assert r["note"].startswith(f"{FLOPS:,} fp32 FLOPs counted, no kernel time")


def test_summary_of_an_ncu_page_is_its_own(tmp_path: Path) -> None:
    p = _page(tmp_path, COUNTERS + TIME)
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(p)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "0 devices" not in out and "no GPU activity" not in out
    assert out.startswith("Nsight Compute page: 1 launch, 1 kernel, kernel time 1.05 ms")
    assert "16.4 TFLOP/s" in out and "sgemm_kernel" in out
    assert "Verdict: Nsight Compute page: 1 launch of 1 kernel, 1.05 ms profiled" in out


@pytest.mark.shared
def test_summary_of_the_h200_gemm_sweep(tmp_path: Path) -> None:
    """The 12 launches of the H200 GEMM sweep: kernel time = the sum of ncu's
    gpu__time_duration (read with the csv module), every GEMM compute-bound."""
    import csv
    import gzip

    gz = TRACES / "gpu" / "scenarios" / "gemm_roofline-sweep.ncu.csv.gz"
    if not gz.is_file():
        pytest.skip(f"no GEMM sweep at {gz}")
    p = tmp_path / "sweep.csv"
    p.write_bytes(gzip.decompress(gz.read_bytes()))
    rows = [r for r in csv.DictReader(p.read_text().splitlines()) if r["ID"]]
    want_ns = sum(float(r["gpu__time_duration.sum"].replace(",", "")) for r in rows)
    s = summarize_ncu(traceparse.load(p), top=20)
    w = s["sections"]["ncu_window"].row(0, named=True)
    assert w["launches"] == len(rows) == 12 and w["device"] == "NVIDIA H200"
    assert w["kernel_time_ns"] == pytest.approx(want_ns)
    k = s["sections"]["ncu_kernels"]
    assert set(k["bound"].to_list()) == {"compute"}
    assert (k["pct_of_roof"] <= 100).all()
    assert "100% of it compute-bound" in s["verdict"]


TIMELINE_COMMANDS = ["kernels", "gaps", "launches", "steps", "breakdown", "api", "memops",
                     "comm", "layers", "tree", "memory", "nvtx", "whatif --fix cuda-graphs",
                     "predict", "diff PAGE", "calibrate -o OUT", "convert --to chrome -o OUT"]


@pytest.mark.parametrize("cmd", TIMELINE_COMMANDS)
def test_timeline_commands_refuse_an_ncu_page(cmd: str, tmp_path: Path) -> None:
    """An ncu page has kernels but no timeline: a timeline command exits 2 on one line that
    names the page and the command (it printed "no kernels in ..." and exit 0, false of a
    page that measured 4 launches); the page's own commands still answer."""
    page = str(Path(__file__).resolve().parent.parent / "sample_traces" / "mini_train.ncu.csv")
    out = tmp_path / "cal.json"  # calibrate wrote an empty calibration (no devices)
    args = [page if a == "PAGE" else str(out) if a == "OUT" else a for a in cmd.split()]
    res = CliRunner().invoke(main, ["--no-cache", *args, page])
    assert res.exit_code == 2 and res.stdout == "" and not out.exists(), res.output
    assert res.stderr.count("\n") == 1
    assert page in res.stderr and f"`{cmd.split()[0]}` needs an nsys export" in res.stderr
    n = len(traceparse.load(page).ncu)
    assert f"read its {n} kernel launch" in res.stderr


@pytest.mark.parametrize("cmd", ["summary", "roofline", "fixes", "info"])
def test_page_commands_answer_on_an_ncu_page(cmd: str) -> None:
    page = str(Path(__file__).resolve().parent.parent / "sample_traces" / "mini_train.ncu.csv")
    res = CliRunner().invoke(main, ["--no-cache", cmd, page])
    assert res.exit_code == 0, res.output
