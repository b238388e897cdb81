"""Regression tests for the crashes the fuzzers found (each crashed before its fix)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from fuzzing import generator

from traceparse.errors import TraceError
from traceparse.kineto import reader as kineto
from traceparse.ncu import reader as ncu
from traceparse.nsys import reader as nsys

GEN = generator()


def test_nsys_non_utf8_table_name_in_schema(tmp_path: Path) -> None:
    # a flipped byte inside sqlite_master's table name: sqlite3 raised UnicodeDecodeError
    p = GEN.nsys_db(tmp_path / "a.sqlite", kernels=3)
    data = p.read_bytes()
    i = data.index(b"tableCUPTI_ACTIVITY_KIND_MEMCPY") + len(b"table")
    p.write_bytes(data[:i] + b"\x80" + data[i + 1:])
    try:
        tl = nsys.read(p)
    except TraceError:
        return
    tl.validate()
    assert tl.kernels.height == 3  # the kernel table is intact


def test_nsys_device_id_out_of_int32(tmp_path: Path) -> None:
    p = GEN.nsys_db(tmp_path / "b.sqlite", kernels=3)
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 2147483648 WHERE rowid = 1")
    con.commit()
    con.close()
    with pytest.raises(TraceError, match="wrong type or out of range"):
        nsys.read(p)


def test_nsys_text_in_id_column(tmp_path: Path) -> None:
    p = GEN.nsys_db(tmp_path / "c.sqlite", kernels=3)
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET contextId = '' WHERE rowid = 1")
    con.commit()
    con.close()
    with pytest.raises(TraceError):
        nsys.read(p)


def test_kineto_event_without_name(tmp_path: Path) -> None:
    doc = GEN.kineto_doc(2)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cuda_runtime"):
            del e["name"]
            break
    p = tmp_path / "n.json"
    p.write_text(json.dumps(doc))
    tl = kineto.read(p)
    assert "<unnamed>" in tl.gpu["name"].cast(str).to_list() + tl.api["name"].cast(str).to_list()


def test_ncu_details_row_cut_before_kernel_name(tmp_path: Path) -> None:
    from test_fuzz_ncu import DETAILS

    lines = DETAILS.decode().splitlines(keepends=True)
    p = tmp_path / "d.csv"
    p.write_text(lines[0] + lines[1] + '"1","1","a"\n' + lines[2])
    tl = ncu.read(p)
    assert tl.ncu["kernel_name"].to_list() == ["k(float*)"]
    skipped = dict(tl.ingest.filter(tl.ingest["outcome"] == "skipped")
                   .select("reason", "count").iter_rows())
    assert skipped == {"wrong number of columns (cut short or extra cells)": 1}


def test_ncu_id_beyond_int64(tmp_path: Path) -> None:
    p = tmp_path / "r.csv"
    p.write_text(GEN.ncu_text(2, [GEN.ncu_row(99999999999999999999999)]))
    tl = ncu.read(p)
    assert tl.ncu.height == 2


def test_nsys_memcpy_without_copykind(tmp_path: Path) -> None:
    p = GEN.nsys_db(tmp_path / "m.sqlite", kernels=2)
    con = sqlite3.connect(p)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN copyKind")
    con.commit()
    con.close()
    tl = nsys.read(p)
    memcpy = tl.gpu.filter(tl.gpu["kind"] == "memcpy")
    assert memcpy["name"].to_list() == ["[CUDA memcpy Unknown]"] * 2


@pytest.mark.parametrize("size", [0, 3, 1000])
def test_nsys_header_with_invalid_page_size(tmp_path: Path, size: int) -> None:
    p = GEN.nsys_db(tmp_path / "h.sqlite", kernels=2)
    data = bytearray(p.read_bytes())
    data[16:18] = size.to_bytes(2, "big")
    p.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="page size"):
        nsys.read(p)


@pytest.mark.parametrize("use_adbc", [True, False])
def test_nsys_non_utf8_string_is_replaced_on_both_read_paths(tmp_path: Path,
                                                             use_adbc: bool) -> None:
    # StringIds TEXT with invalid UTF-8: the ADBC path passed the bytes into a polars String
    # and every command that turned the name into a Python string (kernels, summary,
    # report, fixes) aborted with a Rust panic (exit 1); sqlite3 already decoded with U+FFFD
    p = GEN.nsys_db(tmp_path / "u.sqlite", names={1: b"void k\xff\xfe\x80(int)"})
    tl = nsys.read(p, use_adbc=use_adbc)
    names = set(tl.kernels["name"].cast(str).to_list())
    assert "void k\ufffd\ufffd\ufffd(int)" in names


def test_nsys_non_utf8_name_through_every_table_command(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from traceparse.cli import main

    p = GEN.nsys_db(tmp_path / "u.sqlite", names={1: b"void k\xff\xfe\x80(int)"})
    for cmd in ("kernels", "summary", "fixes", "report"):
        out = tmp_path / f"{cmd}.out"
        r = CliRunner().invoke(main, ["--no-cache", cmd, str(p), "-o", str(out)])
        assert r.exit_code == 0, (cmd, r.output, r.exception)
    assert "void k\ufffd\ufffd\ufffd(int)" in (tmp_path / "kernels.out").read_text()


@pytest.mark.parametrize("where", ["annotation pid", "kernel device", "grid"])
def test_kineto_integer_out_of_its_column_type(tmp_path: Path, where: str) -> None:
    # found by a semantic mutation of the shared pageable_copy capture: a GPU user annotation
    # whose pid (its device) was 2**40 failed the schema's strict Int32 cast (exit 1,
    # "internal error: InvalidOperationError"); now one line naming the file, exit 2
    from click.testing import CliRunner

    from traceparse.cli.main import main

    doc = GEN.kineto_doc(2)
    ev = doc["traceEvents"]
    if where == "annotation pid":
        k = next(e for e in ev if e.get("cat") == "kernel")
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": "gemm", "pid": 2**40,
                   "tid": 7, "ts": k["ts"], "dur": 1})
    else:
        k = next(e for e in ev if e.get("cat") == "kernel")
        if where == "kernel device":
            k["args"]["device"] = 2**40
        else:
            k["args"]["grid"] = [2**33, 1, 1]
    p = tmp_path / "big.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="wrong type or out of range"):
        kineto.read(p)
    res = CliRunner().invoke(main, ["--no-cache", "summary", str(p)])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and str(p) in res.stderr
