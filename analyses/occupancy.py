"""Under-filled launches: kernels whose grid cannot occupy every SM of the GPU.

A GPU runs a kernel's thread blocks on its streaming multiprocessors (compute units on AMD);
one block runs on one SM. A launch with fewer blocks than the GPU has SMs leaves
``SMs - blocks`` SMs with nothing to do for the whole kernel, whatever the kernel's code: the
launch configuration, not the code, caps it at ``blocks / SMs`` of the machine. Blocks smaller
than a warp (32 threads; a 64-wide wavefront on AMD) also leave lanes of every scheduled warp
empty.

:func:`underfilled` reports, per ``(rank, device_id, kernel name)`` whose kernel time is at
least :data:`MIN_SHARE` of the device's window (first to last activity), the launches whose
grid has fewer blocks than the device's SM count:

* ``launches``, ``time_ns`` (all its launches) and ``underfilled_launches``,
  ``underfilled_ns`` (those with ``blocks < sm_count``);
* the most common grid and block of the under-filled launches (``grid``, ``block`` as
  ``"xxyxz"``), ``blocks`` and ``threads_per_block`` of that configuration, ``sm_count``,
  ``sm_fill`` = ``blocks / sm_count`` of that configuration;
* ``at_stake_ns`` = the sum over under-filled launches of
  ``(dur - floor) x (1 - blocks / sm_count)``, ``floor`` being the device's shortest kernel
  in the trace (the fixed cost of a launch, which more blocks cannot remove): the share of
  the kernel's work time that the idle SMs would have taken had the same work been spread
  over every SM. An upper bound: it assumes the work can be split that finely and that the
  kernel is limited by its SMs (a memory-bound kernel may already saturate DRAM with fewer);
* launches shorter than twice that floor are latency, not work, and are not under-filled
  (a CUDA-graph replay of 1,024-element kernels otherwise summed its launches' jitter
  above the shortest one into a "fix");
* ``share_pct``: the kernel's time as a share of the device window;
* ``min_blocks``, ``max_blocks``, ``configs``: the fewest and most blocks of the
  under-filled launches and how many grid/block configurations they used (one kernel is
  often launched with several: ``grid`` is only the one with the most time).

**The parallelism the work offers.** A row-wise normalisation (layer/RMS/group norm,
softmax) gives each row to one block: launched for fewer rows than SMs, no launch
configuration can keep more SMs busy, and the time is the rows' latency, not idle SMs.
Where the launching op's input shape is recorded (Kineto ``record_shapes``), such a kernel
counts ``rows`` = the input's elements / its last dimension, and the fill it could reach is
``min(rows, sm_count)`` blocks: ``at_stake_ns`` uses ``1 - blocks / min(rows, SMs)`` and a
launch with ``blocks >= rows`` has nothing at stake (``rows`` column; null when unknown).
Without the op's shape (nsys exports, CUDA-graph replays), a kernel named as one of those
ops is taken to launch one block per row (how PyTorch's, Apex's and cuDNN's row-wise kernels
launch), so its grid is its rows and nothing is at stake: what would fill the GPU is more
rows (a larger batch), which the launch configuration cannot supply.
Batch-1 decode: ``vectorized_layer_norm_kernel`` over ``[1, 1024]`` with grid 1x1x1 is one
row on one block, not an under-filled launch.

**Library GEMMs are left out.** cuBLAS/cuBLASLt/hipBLASLt/CUTLASS pick a GEMM's kernel and
grid from the problem's shape; with too little work (a batch-1 GEMV) fewer blocks than SMs is
their choice, and the measured alternatives were slower. On an H200
(``sample_traces/h200_recheck/gemv``, ``sample_traces/capture/gemv_fill.py``), ``x[1, K] @
W[K, N]`` in bf16: cuBLAS's ``nvjet`` kernels with 16-64 blocks took 3.4-3.9 µs for 2-8 MB
of weights; the same products through cuBLAS's ``[N, K]`` kernel with 128 blocks took 7.2
µs (1024x1024), and a Triton GEMV with 96-512 blocks 4.5-13.7 µs. What fills the GPU there
is more rows (batching requests), as for the norms below; the decode traces' 64-block GEMVs
were the largest "at stake" items (1.68 ms on ``sweep/decode_b1_graph``) before this rule.

The SM count is the device's (``devices.sm_count``); without it the GPU table
(:mod:`traceparse.roofline.gpus`) is asked by the device's name; without either the device
is skipped (nothing is guessed). Launches without grid dimensions are skipped, and so are
communication kernels (few blocks by design: their speed is the interconnect's).

Example: a 25.8 s kernel launched with grid 1x1x1 and block 1x1x1 on a 108-SM GPU whose
shortest kernel took 2 µs: ``sm_fill`` 1/108, ``at_stake_ns`` = (25.8 s - 2 µs) x 107/108.
"""

from __future__ import annotations

import json
import re

import polars as pl

from traceparse.analyses.kclass import class_expr
from traceparse.timeline import Timeline

#: A kernel name is examined when its time is at least this share of its device's window.
MIN_SHARE = 0.02
WARP = 32
#: Ops that give one row (the input's last dimension) to one block.
ROW_OPS = re.compile(r"(?i)(layer_norm|rms_norm|group_norm|softmax)")

#: The columns of :func:`underfilled` and their dtypes.
UNDERFILLED_SCHEMA = {
    "rank": pl.Int32, "device_id": pl.Int32, "name": pl.String, "launches": pl.Int64,
    "time_ns": pl.Int64, "underfilled_launches": pl.Int64, "underfilled_ns": pl.Int64,
    "grid": pl.String, "block": pl.String, "blocks": pl.Int64,
    "threads_per_block": pl.Int64, "sm_count": pl.Int64, "sm_fill": pl.Float64,
    "at_stake_ns": pl.Int64, "share_pct": pl.Float64, "window_ns": pl.Int64,
    "min_blocks": pl.Int64, "max_blocks": pl.Int64, "configs": pl.Int64,
    "rows": pl.Int64}


def _rows(dims: str | None) -> int | None:
    """Rows of a row-wise op's first input (elements / last dimension), from its recorded
    ``input_dims`` JSON; None when unknown."""
    try:
        first = json.loads(dims or "null")[0]
    except (ValueError, IndexError, TypeError):
        return None
    if not isinstance(first, list) or not first or not all(isinstance(x, int) for x in first):
        return None
    n = 1
    for x in first[:-1]:
        n *= x
    return n if first[-1] > 0 else None


def _row_counts(tl: Timeline, k: pl.DataFrame) -> pl.DataFrame:
    """``_i, _rows`` for the kernels in ``k`` launched by a row-wise op with a shape."""
    from traceparse.analyses.scale_work import kernel_ops

    none = pl.DataFrame(schema={"_i": pl.UInt32, "_rows": pl.Int64})
    # the launching ops are joined only when some candidate needs its rows
    if k.height == 0 or "input_dims" not in tl.ranges.columns or tl.ranges.filter(
            pl.col("input_dims").is_not_null()).height == 0:
        return none
    ops = kernel_ops(tl).with_row_index("_i").select("_i", "op_name", "input_dims")
    ops = ops.filter(pl.col("_i").is_in(k["_i"].implode())
                     & pl.col("op_name").fill_null("").str.contains(ROW_OPS.pattern))
    if ops.height == 0:
        return none
    rows = [_rows(d) for d in ops["input_dims"].to_list()]
    return (ops.select("_i").with_columns(pl.Series("_rows", rows, pl.Int64))
            .drop_nulls("_rows"))


def sm_counts(tl: Timeline) -> pl.DataFrame:
    """``rank, device_id, sm_count`` from the devices table, else the GPU table by name."""
    from traceparse.roofline import gpus

    rows = []
    for d in tl.devices.iter_rows(named=True):
        sm = d.get("sm_count")
        if not sm and d.get("name"):
            row = gpus.match(d["name"])
            sm = row.get("sm_count") if row else None
        if sm:
            rows.append({"rank": d["rank"], "device_id": d["device_id"], "sm_count": int(sm)})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "device_id": pl.Int32,
                                      "sm_count": pl.Int64})


def underfilled(tl: Timeline, *, min_share: float = MIN_SHARE) -> pl.DataFrame:
    """Kernels with a material share of the window launched with fewer blocks than SMs
    (module docstring), by ``at_stake_ns`` descending."""
    # communication kernels use few blocks by design (one per channel): their speed is the
    # link's, not the SMs'
    # GEMMs keep the grid their library's heuristics chose for the shape (see the module
    # docstring: more blocks measured slower)
    # the columns read selected before the filters (a filter of every gpu column copied
    # them all: +1.7 GB at 10.3M kernels, the report's peak); kinds compared as codes, and
    # names kept as codes: the class and the row-op test run on the distinct names
    k = (tl.gpu.with_row_index("_i")
         .select("_i", "kind", "category", "rank", "device_id", "name", "dur_ns",
                 "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")
         .filter((pl.col("kind") == "kernel") & (pl.col("category") == "compute"))
         .drop("kind", "category"))
    names = k.select(pl.col("name").unique()).with_columns(
        pl.lit("compute").alias("category")).with_columns(class_expr())
    gemm = names.filter(pl.col("kclass") == "gemm")["name"]
    row_op = names.filter(pl.col("name").cast(pl.String).str.contains(ROW_OPS.pattern)
                          .fill_null(False))["name"]
    k = k.filter(~pl.col("name").is_in(gemm.implode()).fill_null(False))
    sms = sm_counts(tl)
    if k.height == 0 or sms.height == 0:
        return pl.DataFrame(schema=UNDERFILLED_SCHEMA)
    win = (tl.gpu.select("kind", "rank", "device_id", "start_ns", "end_ns")
           .filter(pl.col("kind") != "sync")
           .group_by("rank", "device_id")
           .agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("window_ns")))
    dims = [pl.col(c).cast(pl.Int64) for c in ("grid_x", "grid_y", "grid_z")]
    tdims = [pl.col(c).cast(pl.Int64) for c in ("block_x", "block_y", "block_z")]
    k = (k.join(sms, on=["rank", "device_id"], how="inner")
         .filter(pl.all_horizontal(*(d.is_not_null() & (d > 0) for d in dims)))
         .with_columns((dims[0] * dims[1] * dims[2]).alias("_blocks"),
                       pl.all_horizontal(*(t.is_not_null() for t in tdims)).alias("_has_t"),
                       (tdims[0].fill_null(1) * tdims[1].fill_null(1) * tdims[2].fill_null(1))
                       .alias("_threads"),
                       pl.col("name").is_in(row_op.implode()).fill_null(False).alias("_rowop"))
         .rename({"name": "_name"}))
    if k.height == 0:
        return pl.DataFrame(schema=UNDERFILLED_SCHEMA)
    # the device's shortest kernel: the fixed cost of any launch, which more blocks cannot
    # remove (a tiny kernel's time is latency, not work spread over too few SMs)
    k = k.with_columns(pl.col("dur_ns").filter(pl.col("dur_ns") > 0).min()
                       .over("rank", "device_id").fill_null(0).alias("_floor"))
    # a row-wise op's blocks can fill at most min(rows, SMs): fewer rows than SMs is the
    # work's parallelism, not the launch's
    cand = k.filter(pl.col("_blocks") < pl.col("sm_count"))
    # without the op's shape (nsys, graph replays), a norm kernel's grid is its rows: the
    # one-block-per-row launch every framework's row-wise kernel uses
    rows_of = (pl.when(pl.col("_rows").is_not_null()).then(pl.col("_rows"))
               .when(pl.col("_rowop")).then(pl.col("_blocks"))
               .otherwise(pl.col("sm_count")))
    k = k.join(_row_counts(tl, cand), on="_i", how="left").with_columns(
        pl.min_horizontal(pl.col("sm_count"), rows_of).alias("_reach"))
    # a launch shorter than twice the floor is mostly the launch's fixed cost (latency):
    # its work, the only part more SMs could share, is smaller than that cost
    under = (pl.col("_blocks") < pl.col("_reach")) & (pl.col("dur_ns") >= 2 * pl.col("_floor"))
    stake = ((pl.col("dur_ns") - pl.col("_floor")).clip(lower_bound=0).cast(pl.Float64)
             * (1.0 - pl.col("_blocks").cast(pl.Float64) / pl.col("_reach")))
    per = (k.group_by("rank", "device_id", "_name")
           .agg(pl.len().alias("launches"), pl.col("dur_ns").sum().alias("time_ns"),
                under.sum().alias("underfilled_launches"),
                pl.col("dur_ns").filter(under).sum().alias("underfilled_ns"),
                stake.filter(under).sum().round(0).cast(pl.Int64).alias("at_stake_ns"),
                pl.col("_blocks").filter(under).min().alias("min_blocks"),
                pl.col("_blocks").filter(under).max().alias("max_blocks"),
                pl.col("sm_count").first(), pl.col("_rows").filter(under).max()
                .alias("rows")))
    # the configurations as text on the under-filled launches only (two strings a row
    # over every kernel were ~0.3 GB at 10M kernels); a name without them is not reported
    u = k.filter(under).with_columns(pl.format("{}x{}x{}", *dims).alias("_grid"),
                                     pl.format("{}x{}x{}", *tdims).alias("_block"))
    per = per.join(u.group_by("rank", "device_id", "_name").agg(
        pl.concat_str("_grid", "_block", separator=" ").n_unique().alias("configs")),
        on=["rank", "device_id", "_name"], how="left")
    top_cfg = (u
               .group_by("rank", "device_id", "_name", "_grid", "_block", "_blocks", "_threads")
               .agg(pl.col("dur_ns").sum().alias("_t"))
               .sort(["_t", "_grid", "_block"], descending=[True, False, False])
               .group_by("rank", "device_id", "_name", maintain_order=True).first())
    out = (per.join(win, on=["rank", "device_id"], how="left")
           .with_columns((100.0 * pl.col("time_ns") / pl.col("window_ns")).alias("share_pct"))
           .filter((pl.col("underfilled_launches") > 0)
                   & (pl.col("time_ns") >= min_share * pl.col("window_ns")))
           .join(top_cfg, on=["rank", "device_id", "_name"], how="left")
           .select(pl.col("rank").cast(pl.Int32), pl.col("device_id").cast(pl.Int32),
                   pl.col("_name").cast(pl.String).alias("name"), "launches", "time_ns",
                   "underfilled_launches", "underfilled_ns", pl.col("_grid").alias("grid"),
                   pl.col("_block").alias("block"), pl.col("_blocks").alias("blocks"),
                   pl.col("_threads").alias("threads_per_block"), "sm_count",
                   (pl.col("_blocks") / pl.col("sm_count")).alias("sm_fill"),
                   "at_stake_ns", "share_pct", "window_ns", "min_blocks", "max_blocks",
                   "configs", "rows"))
    return out.cast(pl.Schema(UNDERFILLED_SCHEMA)).sort(["at_stake_ns", "name"],
                                                        descending=[True, False])
