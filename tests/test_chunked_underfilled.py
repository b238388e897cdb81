"""The under-filled launches of the chunked report payload (traceparse/underfilled_chunks.py)
against :func:`traceparse.analyses.occupancy.underfilled` on the whole timeline.

* a generated export of one 4-SM device with under-filled launches cut one GPU row per
  piece, two, and all in one: the whole payload equals memory's, and the evidence row is
  the hand-computed one;
* every shared nsys export and bundled sample: the frame from pass 1's partials (read
  with the grid columns, windows of 300 rows, or 3 for the samples) equals memory's, and
  no ``ranges.input_dims`` is set (the module's premise: ``rows`` is null for nsys).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import REPO, ids, shared_files

from traceparse import payload_chunks as pc
from traceparse import underfilled_chunks as uc
from traceparse.analyses.occupancy import underfilled
from traceparse.nsys import chunks
from traceparse.nsys.reader import read
from traceparse.nsys.spans import span_plan
from traceparse.reports.options import rows as as_rows
from traceparse.reports.payload import build_payload
from traceparse.samplegen import sqlite as samplegen_sqlite
from traceparse.samplegen.scenarios import US, Activity, Call, Scenario

FILES = shared_files("nsys", "*.sqlite") + sorted((REPO / "sample_traces").glob("*.sqlite"))
#: kernel duration (us) -> gridX; every other dimension 1
GRIDS = {2: 8, 10: 1, 20: 2, 7: 1, 3: 1, 5: 4}


def _export(path: Path) -> Path:
    """Kernels on one device of 4 SMs (no blocking call, 20 us apart): ``fill`` (2 us, 8
    blocks: the floor), ``k_small`` 10, 20 and 7 us on 1, 2 and 1 blocks (under-filled),
    ``k_short`` 3 us on 1 block (under twice the floor: latency) and ``k_full`` 5 us on 4
    blocks (fills the GPU)."""
    k = "cudaLaunchKernel"
    plan = [("fill", 2), ("k_small", 10), ("k_short", 3), ("k_small", 20), ("k_full", 5),
            ("k_small", 7), ("fill", 2)]
    calls = tuple(Call(k, i * 40 * US, i * 40 * US + US,
                       Activity("kernel", 7, i * 40 * US + 2 * US, d * US, name))
                  for i, (name, d) in enumerate(plan))
    samplegen_sqlite.write(Scenario("underfilled", "underfilled pieces", calls), path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET smCount = 4")
        for d, g in GRIDS.items():
            con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = ?, gridY = 1, '
                        'gridZ = 1, blockX = 32, blockY = 1, blockZ = 1 '
                        'WHERE "end" - start = ?', (g, d * US))
    return path


@pytest.mark.parametrize("rows", [1, 2, 100])
def test_generated_export_in_pieces(tmp_path: Path, rows: int) -> None:
    path = _export(tmp_path / "under.sqlite")
    got = pc.payload(str(path), chunk_rows=rows)
    mem = dict(build_payload(read(path)))
    assert got is not None
    mem.pop("timeline")
    assert got == mem
    ev = got["evidence"]["underfilled_launches"]
    # floor 2 us; at stake (10-2) x 3/4 + (20-2) x 2/4 + (7-2) x 3/4 = 18.75 us; the most
    # time on 2 blocks (20 us against 17 on 1)
    assert [(r["name"], r["launches"], r["time_ns"], r["underfilled_launches"],
             r["underfilled_ns"], r["at_stake_ns"], r["grid"], r["block"], r["blocks"],
             r["min_blocks"], r["max_blocks"], r["configs"], r["sm_count"], r["rows"])
            for r in ev] == [("k_small", 3, 37 * US, 3, 37 * US, 18750, "2x1x1", "32x1x1",
                              2, 1, 2, 2, 4, None)]
    # the window: first start to last end, 2 us .. 6 x 40 + 2 + 2 us
    assert ev[0]["window_ns"] == 244 * US - 2 * US


def _pieces(path: Path, rows: int) -> uc.UnderPart:
    plan = span_plan(str(path), block_rows=rows)
    bound = uc.sm_bound(str(path))
    parts = []
    for w in plan.windows(rows):
        got = chunks.read_rows(plan, plan.blocks_for(*w), w, grid=bound is not None)
        parts.append(uc.under_part(got, *w, bound))
    return uc.merge_under_parts(parts)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_every_export(path: Path) -> None:
    tl = read(path)
    assert tl.ranges["input_dims"].null_count() == tl.ranges.height
    want = as_rows(underfilled(tl))
    if not tl.gpu.height:
        return
    got = as_rows(uc.underfilled_rows(tl.devices, _pieces(path, 3 if "sample" in
                                                              str(path) else 300)))
    assert got == want
