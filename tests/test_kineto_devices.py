"""Which GPU ran a Kineto trace's work (traceparse/kineto/devices.py): a process that sees
one GPU whose activities carry another index (ROCm's tracer reports the physical GPU)."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import shared_files
from traceparse import schema
from traceparse.kineto.devices import device_frame, one_visible_gpu

MI300X = {"id": 0, "name": "AMD Instinct MI300X", "warpSize": 64, "numSms": 304}


def _gpu(devs: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"device_id": pl.Series(devs, dtype=pl.Int64)})


def _memory(devs: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"device_id": pl.Series(devs, dtype=pl.Int32)})


def test_one_listed_gpu_is_the_one_that_ran_the_work() -> None:
    devs = device_frame({"deviceProperties": [MI300X]}, rank=0)
    d, m, note = one_visible_gpu(devs, _gpu([9, 9]), _memory([0, 0, -1]))
    assert d["device_id"].to_list() == [9] and d["name"].to_list() == ["AMD Instinct MI300X"]
    # the allocator's index 0 is that GPU; host memory (-1) stays
    assert m["device_id"].to_list() == [9, 9, -1]
    assert note is not None and "device 9" in note


def test_nothing_moves_where_the_indices_cannot_be_matched() -> None:
    two = device_frame({"deviceProperties": [MI300X, {**MI300X, "id": 1}]}, rank=0)
    one = device_frame({"deviceProperties": [MI300X]}, rank=0)
    for devs, gpu in ((two, _gpu([2])),       # several listed (vLLM: 8 listed, runs on 2)
                      (one, _gpu([0])),       # the listed index ran the work
                      (one, _gpu([3, 4])),    # two indices in the activities
                      (schema.empty("devices"), _gpu([9]))):  # nothing listed
        d, m, note = one_visible_gpu(devs, gpu, _memory([0]))
        assert note is None and d.equals(devs) and m["device_id"].to_list() == [0]


@pytest.mark.shared
def test_sglang_rocm_capture_describes_the_gpu_that_ran_it() -> None:
    from traceparse import load

    files = shared_files("torch", "tracelens__sglang_decode_capture_bs_32_rank0.json.gz")
    assert files
    tl = load(files[0], cache=False)
    assert tl.gpu["device_id"].unique().to_list() == [9]
    assert tl.devices.select("device_id", "name").rows() == [(9, "AMD Instinct MI300X")]
    assert tl.memory["device_id"].unique().to_list() == [9]
    assert tl.memory.height == 1014
