"""Compare traceparse's Kineto timelines with HTA's outputs in ../shared/oracle/hta.

Usage (repo root): ``python3 benchmarks/compare_hta.py``. Dev-only; HTA is not needed (its
outputs are the oracle CSVs). Our side of HTA's temporal breakdown is computed here with
HTA's definitions, per rank, over kernels + memcpy + memset:

* kernel_time = last end - first start;
* compute_time = length of the union of COMPUTATION kernels (neither communication nor
  memory);
* non_compute_time = union of all GPU work minus compute_time;
* idle_time = kernel_time - union of all GPU work.

HTA rounds times to microseconds, we keep ns: expect differences of a few us per rank.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
SHARED = REPO.parent / "shared"


def union_ns(frame: pl.DataFrame) -> int:
    """Total length of the union of [start_ns, end_ns) intervals."""
    if not frame.height:
        return 0
    f = frame.sort("start_ns").with_columns(
        prev_end=pl.col("end_ns").cum_max().shift(1))
    f = f.with_columns(new=(pl.col("start_ns") > pl.col("prev_end")).fill_null(True)
                       .cum_sum())
    spans = f.group_by("new").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
    return int((spans["end_ns"] - spans["start_ns"]).sum())


def temporal(gpu: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for rank in sorted(gpu["rank"].unique().to_list()):
        g = gpu.filter((pl.col("rank") == rank)
                       & pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
        span = int(g["end_ns"].max() - g["start_ns"].min())
        busy = union_ns(g)
        compute = union_ns(g.filter(pl.col("category") == "compute"))
        rows.append({"rank": rank, "idle_us": (span - busy) / 1e3, "compute_us": compute / 1e3,
                     "non_compute_us": (busy - compute) / 1e3, "kernel_time_us": span / 1e3})
    return pl.DataFrame(rows)


def main() -> None:
    import traceparse
    from traceparse.kineto import read_dir

    torch = SHARED / "traces" / "torch"
    cases: list[tuple[str, object]] = [
        (p.name.split(".")[0], p) for p in sorted(torch.glob("*"))
        if not p.name.startswith("param__dlrm")]
    print("| trace | rank | ours idle/compute/non-compute/span (us) | HTA | max abs diff (us) |")
    print("|---|---|---|---|---|")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for f in sorted(torch.glob("param__dlrm*")):
            Path(tmp, f.name).symlink_to(f)
        cases.append(("dlrm8", Path(tmp)))
        for name, path in cases:
            oracle = SHARED / "oracle" / "hta" / f"{name}.temporal_breakdown.csv"
            if not oracle.exists():
                print(f"| {name} | - | - | no HTA output (HTA crashed) | - |")
                continue
            tl = read_dir(path) if Path(str(path)).is_dir() else traceparse.load(path)
            ours = temporal(tl.gpu)
            hta = pl.read_csv(oracle)
            for row in hta.iter_rows(named=True):
                # HTA numbers its ranks from distributedInfo like we do
                o = ours.filter(pl.col("rank") == row["rank"])
                if not o.height:
                    o = ours.head(1)
                o_row = o.row(0, named=True)
                mine = [o_row["idle_us"], o_row["compute_us"], o_row["non_compute_us"],
                        o_row["kernel_time_us"]]
                theirs = [row["idle_time(us)"], row["compute_time(us)"],
                          row["non_compute_time(us)"], row["kernel_time(us)"]]
                diff = max(abs(a - b) for a, b in zip(mine, theirs, strict=False))
                print(f"| {name} | {row['rank']} | {' / '.join(f'{v:.3f}' for v in mine)} | "
                      f"{' / '.join(f'{v:.0f}' for v in theirs)} | {diff:.3f} |")


if __name__ == "__main__":
    main()
