"""Reader paths used by the benchmarks: the sqlite3 fallback equals the ADBC reader on a
generated export whose mangledName column is all NULL (as in real nsys exports)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.conftest import REPO
from traceparse.nsys import reader as nsys

sys.path.insert(0, str(REPO / "benchmarks"))
from gen_nsys import generate


def test_sqlite3_reader_equals_adbc_on_generated_export(tmp_path: Path) -> None:
    path = tmp_path / "g.sqlite"
    counts = generate(path, kernels=2000, seed=1)
    adbc = nsys.read(path)
    plain = nsys.read(path, use_adbc=False)
    # 2,000 kernels + one memcpy per 50 (40) + one memset per 200 (10)
    assert counts["CUPTI_ACTIVITY_KIND_KERNEL"] == 2000
    assert adbc.gpu.height == 2000 + 40 + 10
    assert adbc.kernels["name"].null_count() == 0
    for name in ("gpu", "api", "ranges"):
        assert plain.table(name).equals(adbc.table(name)), name
    assert adbc.ingest.equals(plain.ingest)


def test_launch_summary_with_a_precomputed_table_is_identical() -> None:
    from traceparse.analyses import launches
    from traceparse.samplegen import scenarios as samplegen

    for name in ("launch_bound", "mini_train"):
        tl = samplegen.scenario_timeline(name)
        table = launches.launch_table(tl)
        assert table.height > 0
        assert launches.launch_summary(tl, table=table).equals(launches.launch_summary(tl))
        assert launches.graph_recoverable(tl, table=table).equals(
            launches.graph_recoverable(tl))


def test_sort_within_equals_multi_key_sort() -> None:
    """intervals.sort_within == frame.sort([*by, col]) on the keys, nulls and several groups
    included (rows tied on every key may come in either order, so only keys are compared)."""
    import numpy as np
    import polars as pl

    from traceparse.analyses.intervals import sort_within

    rng = np.random.default_rng(7)
    n = 5000
    g = rng.integers(0, 5, n).astype(object)
    g[rng.random(n) < 0.05] = None
    frame = pl.DataFrame({"rank": pl.Series(list(g), dtype=pl.Int32),
                          "dev": pl.Series(rng.integers(0, 3, n), dtype=pl.Int32),
                          "t": rng.integers(-50, 50, n), "x": np.arange(n)})
    for by in ([], ["rank"], ["rank", "dev"], ["dev", "rank"]):
        got = sort_within(frame, by, "t").select(*by, "t")
        assert got.equals(frame.sort([*by, "t"]).select(*by, "t")), by
    assert sort_within(frame.head(0), ["rank"], "t").height == 0
    # one group: one single-key sort, identical rows
    one = frame.filter(pl.col("rank") == 1, pl.col("dev") == 2)
    assert sort_within(one, ["rank", "dev"], "t")["t"].is_sorted()
