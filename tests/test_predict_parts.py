"""``predict --scale``: the parts of the median step add up to the median step.

``predicted_step_ns`` is the median over the steps; with an even count it is the mean of
the two middle steps, so its parts are the mean of theirs (before, the upper middle step's
parts were quoted: they summed to that step, not to the median). ``exposed_comm_ns`` is
the part of ``gpu_busy_ns`` with communication and no compute (docs/calibration.md).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
from conftest import shared_files

import traceparse
from traceparse.analyses.calibrate import calibrate
from traceparse.analyses.scale import median_parts, predict_scaled


def test_median_parts_hand_made() -> None:
    # four steps 40, 10, 30, 20 (GPU busy 10, 4, 8, 6; exposed comm 0, 0, 2, 1): sorted
    # 10, 20, 30, 40 -> median (20 + 30) / 2 = 25; busy (6 + 8) / 2 = 7; host-bound
    # 25 - 7 = 18; exposed comm (1 + 2) / 2 = 1.5 -> 2 (round half to even)
    st = pl.DataFrame({"predicted_ns": [40, 10, 30, 20], "gpu_busy_ns": [10, 4, 8, 6],
                       "exposed_comm_ns": [0, 0, 2, 1]})
    assert median_parts(st, 25) == {"gpu_busy_ns": 7, "host_bound_ns": 18,
                                    "exposed_comm_ns": 2}
    # three steps 10, 20, 30: the middle one's (20: busy 6, host-bound 20 - 6 = 14)
    three = st.filter(pl.col("predicted_ns") != 40)
    assert median_parts(three, 20) == {"gpu_busy_ns": 6, "host_bound_ns": 14,
                                       "exposed_comm_ns": 1}


DECODE = shared_files("gpu", "sweep/decode_b1_eager.json.gz")
_STEP = r"^decode_step_\d+$"


@pytest.mark.shared
@pytest.mark.parametrize("path", DECODE, ids=lambda p: p.name)
def test_even_step_count_parts_sum_to_the_median(path: Path) -> None:
    """decode_b1_eager: 20 ``decode_step_N`` ranges (counted in the raw JSON). At F=1 the
    median step is 2,639,289 ns (mean of 2,631,282 and 2,647,296); its parts were the
    upper middle step's (GPU busy 443,778 + host-bound 2,203,518 = 2,647,296), now GPU busy
    441,434 + host-bound 2,197,855 = 2,639,289."""
    with gzip.open(path, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    raw_steps = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "user_annotation"
                 and re.match(_STEP, e.get("name", ""))]
    assert len(raw_steps) == 20
    tl = traceparse.load(path)
    r = predict_scaled(tl, calibrate(tl), 1.0, step_regex=_STEP)
    assert len(r["steps"]) == len(raw_steps)
    p = r["parts"]
    assert p["gpu_busy_ns"] + p["host_bound_ns"] == r["predicted_step_ns"]
    mids = sorted(r["steps"], key=lambda s: s["predicted_ns"])[9:11]
    assert r["predicted_step_ns"] == sum(s["predicted_ns"] for s in mids) // 2
    assert p["gpu_busy_ns"] == round(sum(s["gpu_busy_ns"] for s in mids) / 2)
    assert p["exposed_comm_ns"] <= p["gpu_busy_ns"]


def test_copy_takes_its_own_directions_fit_hand_made() -> None:
    # calibration fits, in the file's (sorted) order: DtoD/device first, then HtoD/pinned.
    # An HtoD pinned copy takes the HtoD fit; an HtoD pageable copy the HtoD direction's
    # (no exact host-memory fit); a DtoH copy none; a kernel none. Before, every copy took
    # memcpy[0] (DtoD's), pricing a host copy with a device-to-device bandwidth.
    from perf_helpers import gpu, timeline

    from traceparse.analyses.scale import copy_fits_per_row

    dtod = {"model": "alpha_beta", "alpha_ns": 1000.0, "bandwidth_bytes_per_s": 1e12}
    htod = {"model": "alpha_beta", "alpha_ns": 5000.0, "bandwidth_bytes_per_s": 25e9}
    memcpy = [{"direction": "DtoD", "host_memory": "device", "fit": dtod},
              {"direction": "HtoD", "host_memory": "pinned", "fit": htod}]
    rows = [{"name": "k", "start_ns": 0, "end_ns": 10},
            {"name": "c1", "kind": "memcpy", "copy_kind": "HtoD", "src_kind": "Pinned",
             "start_ns": 20, "end_ns": 30},
            {"name": "c2", "kind": "memcpy", "copy_kind": "HtoD", "src_kind": "Pageable",
             "start_ns": 40, "end_ns": 50},
            {"name": "c3", "kind": "memcpy", "copy_kind": "DtoH", "dst_kind": "Pinned",
             "start_ns": 60, "end_ns": 70}]
    got = copy_fits_per_row(timeline(gpu=gpu(rows)), memcpy)
    assert got == [None, htod, htod, None]
