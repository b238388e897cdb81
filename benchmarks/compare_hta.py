"""Compare traceparse's Kineto timelines with HTA's outputs in ../shared/oracle/hta.

Usage (repo root): ``python3 benchmarks/compare_hta.py``. Dev-only; HTA is not needed (its
outputs are the oracle CSVs). Our side of HTA's temporal breakdown is computed here with
HTA's definitions, per rank, over kernels + memcpy + memset:

* kernel_time = last end - first start;
* compute_time = length of the union of COMPUTATION kernels (neither communication nor
  memory);
* non_compute_time = union of all GPU work minus compute_time;
* idle_time = kernel_time - union of all GPU work.

Like HTA's parser (its default excludes the last profiler step), GPU work that starts at or
after the start of a rank's last ``ProfilerStep#N`` is dropped when the rank has two or more
steps; "starts" means its launching API call starts (GPU start when it has no call).

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
    from traceparse.analyses.intervals import union

    u = union(frame)
    return int((u["end_ns"] - u["start_ns"]).sum()) if u.height else 0


def with_launch_time(tl: object) -> pl.DataFrame:
    """gpu rows with ``launch_ns``: the start of the launching API call (joined on rank,
    process and correlation id), or the GPU start when the row has no call."""
    from traceparse.links import launch_join

    j = launch_join(tl)  # type: ignore[arg-type]
    return j.with_columns(launch_ns=pl.coalesce("api_start_ns", "start_ns"))


def temporal(gpu: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for rank in sorted(gpu["rank"].unique().to_list()):
        g = gpu.filter((pl.col("rank") == rank)
                       & pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
        steps = ranges.filter((pl.col("rank") == rank) & (pl.col("kind") == "profiler_step"))
        if steps.height >= 2:  # HTA drops the last profiler step (by launch time)
            g = g.filter(pl.col("launch_ns") < steps["start_ns"].max())
        span = int(g["end_ns"].max() - g["start_ns"].min())
        busy = union_ns(g)
        compute = union_ns(g.filter(pl.col("category") == "compute"))
        rows.append({"rank": rank, "idle_us": (span - busy) / 1e3, "compute_us": compute / 1e3,
                     "non_compute_us": (busy - compute) / 1e3, "kernel_time_us": span / 1e3})
    return pl.DataFrame(rows)


def main() -> None:
    import traceparse
    from traceparse.kineto.ranks import read_dir

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
            ours = temporal(with_launch_time(tl), tl.ranges)
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
