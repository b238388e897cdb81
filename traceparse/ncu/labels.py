"""Map details-page UI labels to metric identifiers, as data.

Details pages print UI labels ("Duration", "SM Frequency"), which depend on the section-file
version; raw pages print metric identifiers. To pivot both the same way, the labels below are
mapped to the identifier the 2023-2025 section files display under that label (FORMATS B.5,
B.6). Rows under ``Command line profiler metrics`` already carry identifiers. Labels not in
these tables keep ``metric = null`` (they stay in the long frame, unused by the pivot).

Roofline chart items (``Body Item Label``) name the chart part: the ``... Roofline`` items
carry the *peaks* (measured with ``sm__cycles_elapsed``), the ``... Achieved Value`` items
carry the achieved work (measured with ``smsp__cycles_elapsed``).
"""

from __future__ import annotations

import polars as pl

SOL_SECTIONS = ("GPU Speed Of Light Throughput", "GPU Speed Of Light")
_SASS = "sass_thread_inst_executed_op_{}_pred_on"

#: (section, label) -> metric identifier, for the SpeedOfLight and Launch Statistics sections.
SECTION_LABELS: dict[tuple[str, str], str] = {
    **{(s, lab): m for s in SOL_SECTIONS for lab, m in (
        ("Duration", "gpu__time_duration.sum"),
        ("SM Frequency", "gpc__cycles_elapsed.avg.per_second"),
        ("DRAM Frequency", "dram__cycles_elapsed.avg.per_second"),
        ("Elapsed Cycles", "gpc__cycles_elapsed.max"),
        ("Memory Throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("DRAM Throughput", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("L1/TEX Cache Throughput", "l1tex__throughput.avg.pct_of_peak_sustained_active"),
        ("L2 Cache Throughput", "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("SM Active Cycles", "sm__cycles_active.avg"),
    )},
    ("Launch Statistics", "Registers Per Thread"): "launch__registers_per_thread",
    ("Launch Statistics", "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"):
        "launch__shared_mem_per_block_dynamic",
    ("Launch Statistics", "Grid Size"): "launch__grid_size",
    ("Launch Statistics", "Block Size"): "launch__block_size",
}

#: (item kind, label) -> metric identifier for ``SpeedOfLight_RooflineChart`` rows; the item
#: kind is ``peak`` for "... Roofline" items, ``achieved`` for "... Achieved Value" items and
#: ``""`` for rows printed outside a chart item.
ROOFLINE_LABELS: dict[tuple[str, str], str] = {
    ("", "Theoretical Predicated-On DFMA Thread Instructions Executed"):
        f"sm__{_SASS.format('dfma')}.sum.peak_sustained",
    ("", "Theoretical Predicated-On FFMA Thread Instructions Executed"):
        f"sm__{_SASS.format('ffma')}.sum.peak_sustained",
    ("", "Theoretical Predicated-On HFMA Thread Instructions Executed"):
        f"sm__{_SASS.format('hfma')}.sum.peak_sustained",
    **{("", f"Predicated-On {op.upper()} Thread Instructions Executed Per Cycle"):
       f"smsp__{_SASS.format(op)}.sum.per_cycle_elapsed"
       for op in ("dfma", "ffma", "hfma")},
    **{("peak", f"Theoretical Predicated-On {op.upper()} Operations"):
       f"derived__sm__{_SASS.format(op)}_x2" for op in ("dfma", "ffma", "hfma")},
    ("peak", "SM Frequency"): "sm__cycles_elapsed.avg.per_second",
    ("peak", "Theoretical DRAM Bytes Accessible"): "dram__bytes.sum.peak_sustained",
    ("peak", "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    **{("achieved", f"Predicated-On {op.upper()} Operations Per Cycle"):
       f"derived__smsp__{_SASS.format(op)}_x2" for op in ("dfma", "ffma", "hfma")},
    ("achieved", "SM Frequency"): "smsp__cycles_elapsed.avg.per_second",
    **{("achieved", f"Predicated-On {op.upper()} Thread Instructions Executed Per Cycle"):
       f"smsp__{_SASS.format(op)}.sum.per_cycle_elapsed"
       for op in ("dadd", "dmul", "fadd", "fmul", "hadd", "hmul")},
    ("achieved", "DRAM Bandwidth"): "dram__bytes.sum.per_second",
}

CMDLINE_SECTION = "Command line profiler metrics"


def _item_kind(item: pl.Expr) -> pl.Expr:
    return (pl.when(item.str.ends_with("Achieved Value")).then(pl.lit("achieved"))
            .when(item.str.ends_with("Roofline")).then(pl.lit("peak"))
            .otherwise(pl.lit("")))


def label_metric_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """Add a ``metric`` column to a details-page long frame (columns ``section``, ``item``,
    ``label``): the identifier for command-line rows and known labels, else null.

    Example:
        >>> f = pl.DataFrame({"section": ["GPU Speed Of Light Throughput"], "item": [""],
        ...                   "label": ["Duration"]})
        >>> label_metric_frame(f)["metric"].to_list()
        ['gpu__time_duration.sum']
    """
    sec = pl.DataFrame(
        {"section": [k[0] for k in SECTION_LABELS], "label": [k[1] for k in SECTION_LABELS],
         "m_sec": list(SECTION_LABELS.values())})
    roof = pl.DataFrame(
        {"kind": [k[0] for k in ROOFLINE_LABELS], "label": [k[1] for k in ROOFLINE_LABELS],
         "m_roof": list(ROOFLINE_LABELS.values())})
    out = (frame.with_columns(_item_kind(pl.col("item")).alias("kind"))
           .join(sec, on=["section", "label"], how="left")
           .join(roof, on=["kind", "label"], how="left"))
    is_roof = pl.col("section").str.contains("Roofline")
    return out.with_columns(
        pl.when(pl.col("section") == CMDLINE_SECTION).then(pl.col("label"))
        .when(is_roof).then(pl.col("m_roof"))
        .otherwise(pl.col("m_sec")).alias("metric")
    ).drop("kind", "m_sec", "m_roof")
