"""Repeated transformer layers grouped into one "per layer" row with their spread.

A *layer group* is a set of sibling nodes of :func:`traceparse.analyses.optree.op_tree` (same
parent path) whose names differ only by the number that follows a layer-like word
(``layer``/``layers``/``...Layer``, ``block``/``blocks``/``...Block``, ``h``):
``nn.Module: Qwen3DecoderLayer_0`` .. ``_35`` (``with_modules`` frames), ``model.layers.0``,
``FSDP::pre_forward (blocks.21._checkpoint_wrapped_module)``, NVTX ``layer 0`` ... At least
:data:`MIN_LAYERS` (3) distinct indices make a group. Other numbered siblings (iterations
``step 0``, ``emit_nvtx`` counters ``seq = 12, op_id = 34``) are not layers. Per layer the
GPU time is the node's ``inclusive_ns`` (every call of that layer in the tree, e.g. every
decode step under the same annotation).

Per group: ``layers`` (count), ``calls`` (calls of each layer, the minimum over layers),
``mean_ns``, ``median_ns``, ``min_ns``, ``max_ns``, ``spread_pct = (max - min) / median *
100``, ``slowest`` (index of the slowest layer) and ``slowest_vs_median_pct = (max - median) /
median * 100``, ``kernels_per_layer`` (min and max) and ``same_structure``: every layer's
subtree has the same sequence of (name, calls, kernels) below it, i.e. the same ops with the
same launch counts (numbers inside names, such as ``with_modules`` instance counters, are
ignored in that comparison). A layer slow because it runs different
work shows ``same_structure = False``; one slow for the same work shows True with a large
``slowest_vs_median_pct``.

Example (hand-computed): layers 0..3 with 10, 10, 10 and 40 us of kernels ->
mean 17.5, median 10, spread 300 %, slowest 3, slowest_vs_median 300 %.
"""

from __future__ import annotations

import re

import polars as pl

from traceparse.analyses.optree import op_tree
from traceparse.timeline import Timeline

#: A layer index: the first number right after a layer-like word (``...Layer_7``,
#: ``Block_3``, ``layers.12``, ``blocks.21``, ``h.5``, ``layer 4``).
_LAYER_INDEX = re.compile(r"(?i)(?:[a-z0-9]*layers?|[a-z0-9]*blocks?|(?<![a-z0-9])h)[._ ]?"
                          r"(?P<idx>\d+)(?!\d)")
#: Numbers in names (``with_modules`` instance counters such as ``Qwen3Attention_7``,
#: ``emit_nvtx``'s ``seq = 123, op_id = 456``) are ignored when comparing two layers.
_NUMBER = re.compile(r"\d+")
#: Fewest distinct indices that make a group (two RMSNorm_N siblings, q_norm and k_norm, are
#: not layers).
MIN_LAYERS = 3
#: Separator of the names in a group's ``parent`` path.
PATH_SEP = " > "
#: Stems of repeated ranges that are iterations, not layers (``step 0``, ``iter_3``,
#: ``ProfilerStep#2``): never grouped.
_NOT_LAYERS = re.compile(r"(?i)(step|iter|iteration|epoch|batch)[ _#:.-]*$")


def _subtree_signature(tree: dict[int, list[int]], rows: dict[int, dict[str, object]],
                       node: int) -> tuple[object, ...]:
    sig: list[object] = []
    todo = list(reversed(tree.get(node, [])))
    while todo:
        n = todo.pop()
        r = rows[n]
        sig.append((_NUMBER.sub("#", str(r["name"])), r["calls"], r["kernels"]))
        todo.extend(reversed(tree.get(n, [])))
    return tuple(sig)


def _paths(rows: dict[int, dict[str, object]]) -> dict[int, str]:
    """Each node's path: its ancestors' names and its own, joined by :data:`PATH_SEP`,
    the root ``[all kernels]`` left out of every path but its own."""
    out: dict[int, str] = {}
    below_root: set[int] = set()
    for node in sorted(rows):  # parents have smaller ids than their children
        par = rows[node]["parent_id"]
        name = str(rows[node]["name"])
        if par is None:
            out[node] = name
            below_root.add(node)
        else:
            p = int(par)  # type: ignore[call-overload]
            out[node] = name if p in below_root else f"{out[p]}{PATH_SEP}{name}"
    return out


def layer_table(tl: Timeline | None, *, view: str = "modules", min_layers: int = MIN_LAYERS,
                keep_empty: bool = False, by_rank: bool = False,
                tree: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per layer of every group: ``group_id, parent`` (the path of the layers'
    parent node from the root down, names joined by ``" > "``: the same module under a
    decode and a train annotation is two groups and reads as two), ``layer, index, inclusive_ns,
    calls, kernels, same_structure, vs_median_pct`` (this layer vs the group's median);
    ``keep_empty`` also groups layers that own no GPU time (a CPU-only capture);
    ``by_rank`` finds the groups in the per-rank tree (:func:`op_tree` ``by_rank``): each
    rank's layers are a group of their own, with a leading ``rank`` column. ``tree``: that
    :func:`op_tree` already built (the chunked summary's, from sums of pieces), in place
    of ``tl``."""
    if tree is None:
        assert tl is not None
        tree = op_tree(tl, view=view, keep_empty=keep_empty, by_rank=by_rank)
    rows = {r["node_id"]: r for r in tree.iter_rows(named=True)}
    paths = _paths(rows)
    children: dict[int, list[int]] = {}
    for r in tree.iter_rows(named=True):
        if r["parent_id"] is not None:
            children.setdefault(r["parent_id"], []).append(r["node_id"])
    out: list[dict[str, object]] = []
    gid = 0
    for parent, kids in children.items():
        # the root's children hold every rank's top ranges: a rank's layers group alone
        groups: dict[tuple[int, str], list[tuple[int, int]]] = {}
        for k in kids:
            name = str(rows[k]["name"])
            m = _LAYER_INDEX.search(name)
            if m:
                stem = f"{name[:m.start('idx')]}{{N}}{name[m.end('idx'):]}"
                rank = rows[k].get("rank")
                groups.setdefault((-1 if rank is None else int(rank), stem), []).append(
                    (int(m["idx"]), k))
        for (_, stem), members in sorted(groups.items()):
            if len({i for i, _ in members}) < min_layers or _NOT_LAYERS.search(
                    stem.split("{N}")[0]):
                continue
            sigs = {_subtree_signature(children, rows, k) for _, k in members}
            for idx, k in sorted(members):
                out.append({"group_id": gid, "rank": rows[k].get("rank"),
                            "parent": paths[parent],
                            "layer": stem, "index": idx,
                            "inclusive_ns": rows[k]["inclusive_ns"], "calls": rows[k]["calls"],
                            "kernels": rows[k]["kernels"], "same_structure": len(sigs) == 1})
            gid += 1
    schema = {"group_id": pl.Int64, "rank": pl.Int32, "parent": pl.String, "layer": pl.String,
              "index": pl.Int64, "inclusive_ns": pl.Int64, "calls": pl.Int64,
              "kernels": pl.Int64, "same_structure": pl.Boolean}
    frame = pl.DataFrame(out, schema=schema)
    if not by_rank:
        frame = frame.drop("rank")
    med = pl.col("inclusive_ns").median().over("group_id")
    return frame.with_columns(((pl.col("inclusive_ns") - med) * 100.0 / med)
                              .alias("vs_median_pct"))


def layer_groups(tl: Timeline | None, *, view: str = "modules", min_layers: int = MIN_LAYERS,
                 keep_empty: bool = False, by_rank: bool = False,
                 tree: pl.DataFrame | None = None) -> pl.DataFrame:
    """One "per layer" row per group (see the module docstring), heaviest group first;
    ``by_rank``: one row per group and rank (leading ``rank`` column), ranks in order,
    heaviest group first within a rank; ``tree`` as :func:`layer_table`'s."""
    t = layer_table(tl, view=view, min_layers=min_layers, keep_empty=keep_empty,
                    by_rank=by_rank, tree=tree)
    lead = ["rank"] if by_rank else []
    if t.height == 0:
        return pl.DataFrame(schema={**({"rank": pl.Int32} if by_rank else {}),
                                    "parent": pl.String, "layer": pl.String,
                                    "layers": pl.UInt32})
    g = t.group_by("group_id", maintain_order=True).agg(
        *(pl.col(c).first() for c in lead), pl.col("parent").first(),
        pl.col("layer").first(), pl.len().alias("layers"),
        pl.col("calls").min(), pl.col("same_structure").first(),
        pl.col("kernels").min().alias("kernels_per_layer_min"),
        pl.col("kernels").max().alias("kernels_per_layer_max"),
        pl.col("inclusive_ns").sum().alias("total_ns"),
        pl.col("inclusive_ns").mean().alias("mean_ns"),
        pl.col("inclusive_ns").median().alias("median_ns"),
        pl.col("inclusive_ns").min().alias("min_ns"),
        pl.col("inclusive_ns").max().alias("max_ns"),
        pl.col("index").sort_by("inclusive_ns", "index", descending=[True, False]).first()
        .alias("slowest"))
    pos = pl.col("median_ns") > 0
    return (g.with_columns(
        pl.when(pos).then((pl.col("max_ns") - pl.col("min_ns")) * 100.0 / pl.col("median_ns"))
        .alias("spread_pct"),
        pl.when(pos).then((pl.col("max_ns") - pl.col("median_ns")) * 100.0
                          / pl.col("median_ns")).alias("slowest_vs_median_pct"))
        .sort([*lead, "total_ns"], descending=[False] * len(lead) + [True])
        .drop("group_id"))
