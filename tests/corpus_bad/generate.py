"""Generate the hostile-input corpus: malformed and odd nsys / Kineto / ncu inputs.

Every case is one row of :data:`CASES` (the manifest): the file(s) it needs, the CLI
arguments to run (``{file}`` is the corpus file, paths without a leading ``/`` are relative
to a fresh working directory), the expected outcome and a fragment the output must contain:

* ``error``: exit code 2, exactly one line on stderr containing the fragment and naming the
  file, no traceback, no output file left behind, inputs unchanged;
* ``ingest``: exit code 0 and the fragment appears in stdout (usually an ``info`` line such
  as ``skipped CUPTI_ACTIVITY_KIND_KERNEL  1 (end before start)``).

Usage::

    python3 tests/corpus_bad/generate.py [OUT_DIR]      # default: this directory

Files are deterministic (fixed seeds, no clocks). Files above :data:`COMMIT_LIMIT` bytes
(the gzip bomb, the 1 MB names) are listed in ``.gitignore`` and only generated on demand;
``tests/test_corpus_bad.py`` always generates the whole corpus into a temporary directory.
``manifest.csv`` is the same table as :data:`CASES`, for reading without Python.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import sqlite3
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: Files larger than this are not committed (generated at test time only).
COMMIT_LIMIT = 64 * 1024
#: The gzip bomb inflates to this many bytes (of spaces inside a JSON list).
BOMB_BYTES = 3 << 30

GPID = (1 << 48) | (7 << 24)        # process 7 on VM 1
GTID = GPID | 9                     # thread 9


@dataclass(frozen=True)
class Case:
    """One manifest row."""

    file: str
    outcome: str                 # "error" | "ingest"
    fragment: str                # must appear in stderr (error) or stdout (ingest)
    args: tuple[str, ...] = ("info", "{file}")
    note: str = ""
    outputs: tuple[str, ...] = field(default=())  # paths that must NOT exist afterwards


# ============================================================ nsys SQLite builders
_DDL = """
CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);
CREATE TABLE TARGET_INFO_GPU(vmId INT, id INT, name TEXT, clockRate INT, memoryBandwidth INT,
  smCount INT, totalMemory INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL({kstart}"end" INT, deviceId INT, contextId INT,
  streamId INT, correlationId INT, globalPid INT, demangledName INT, shortName INT,
  gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY(start INT, "end" INT, deviceId INT, contextId INT,
  streamId INT, correlationId INT, globalPid INT, bytes INT, copyKind INT, srcKind INT,
  dstKind INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INT, "end" INT, eventClass INT, globalTid INT,
  correlationId INT, nameId INT, returnValue INT, callchainId INT);
CREATE TABLE NVTX_EVENTS(start INT, "end" INT, eventType INT, rangeId INT, text TEXT,
  globalTid INT, endGlobalTid INT, textId INT, domainId INT);
"""


def nsys_db(path: Path, *, kernels: int = 40, kernel_rows: list[tuple] | None = None,
            kernel_start: bool = True, strings: bool = True, names: dict[int, object] | None
            = None, memcpy_kinds: tuple[int, ...] = (1, 2), nvtx_types: tuple[int, ...] = (59,),
            seed: int = 0) -> Path:
    """A small schema-faithful nsys export.

    ``kernels`` regular kernels 1,000 ns apart (each 500 ns long, correlation ids 1..n,
    names alternating between StringIds 1 and 2), one runtime launch per kernel, one memcpy
    per entry of ``memcpy_kinds`` and one NVTX event per entry of ``nvtx_types``.
    ``kernel_rows`` are appended as-is (start, end, correlationId, demangledName).
    """
    path.unlink(missing_ok=True)
    rng = random.Random(seed)
    con = sqlite3.connect(path)
    con.executescript(_DDL.format(kstart="start INT, " if kernel_start else ""))
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PRODUCT_VERSION', '2024.2.1')")
    con.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.0')")
    con.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'Test GPU', 1980000000, "
                "3350000000000, 132, 85899345920)")
    base = {1: "void gemm<float>(float*, int)", 2: "void relu(float*)",
            3: "cudaLaunchKernel_v7000"}
    for k, v in (names or {}).items():
        if isinstance(v, bytes):
            base.pop(k, None)
        else:
            base[k] = v
    if strings:
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted(base.items()))
        for k, v in (names or {}).items():
            if isinstance(v, bytes):  # invalid UTF-8 stored as TEXT
                con.execute("INSERT INTO StringIds VALUES (?, CAST(? AS TEXT))", (k, v))
    else:
        con.execute("DROP TABLE StringIds")
    rows = []
    for i in range(kernels):
        s = 1_000_000 + i * 1_000 + rng.randrange(0, 10)
        rows.append((s, s + 500, 0, 1, 7, i + 1, GPID, 1 + i % 2, 1 + i % 2, 4, 1, 1,
                     128, 1, 1))
    for s, e, corr, name in kernel_rows or []:
        rows.append((s, e, 0, 1, 7, corr, GPID, name, name, 4, 1, 1, 128, 1, 1))
    if not kernel_start:
        rows = [r[1:] for r in rows]
    marks = ",".join("?" * len(rows[0])) if rows else ""
    if rows:
        con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({marks})", rows)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                    [(999_000 + i * 1_000, 999_400 + i * 1_000, 0, GTID, i + 1, 3, 0, None)
                     for i in range(kernels)])
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    [(900_000 + 100 * i, 900_050 + 100 * i, 0, 1, 7, 10_000 + i, GPID, 4096,
                      k, 0, 2) for i, k in enumerate(memcpy_kinds)])
    con.executemany("INSERT INTO NVTX_EVENTS(start, \"end\", eventType, text, globalTid, "
                    "domainId) VALUES (?,?,?,?,?,0)",
                    [(950_000 + i, 2_000_000, t, f"range{i}", GTID)
                     for i, t in enumerate(nvtx_types)])
    con.commit()
    con.close()
    return path


def _sql(path: Path, *statements: str, params: tuple = ()) -> Path:
    con = sqlite3.connect(path)
    for s in statements:
        con.execute(s, params) if params else con.execute(s)
    con.commit()
    con.execute("VACUUM")
    con.close()
    return path


def _truncate(src: Path, dst: Path, frac: float | None = None, size: int | None = None) -> Path:
    data = src.read_bytes()
    n = size if size is not None else int(len(data) * (frac or 0))
    dst.write_bytes(data[:n])
    return dst


# ============================================================ Kineto JSON builders
BASE_NS = 1_700_000_000_000_000_000


def kineto_doc(n: int = 20, extra: list[dict] | None = None) -> dict:
    """A small modern Kineto trace: per step one cpu_op, one launch, one kernel (linked by
    correlation id), plus metadata and a flow event."""
    ev: list[dict] = [{"ph": "M", "name": "process_name", "pid": 100,
                       "args": {"name": "python"}}]
    for i in range(n):
        t = 10.0 + 20.0 * i
        ev += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 7, "ts": t,
             "dur": 10.0, "args": {"External id": i + 1}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
             "tid": 7, "ts": t + 1.0, "dur": 3.0, "args": {"correlation": 1000 + i}},
            {"ph": "X", "cat": "kernel", "name": "void gemm<float>(float*, int)", "pid": 0,
             "tid": 7, "ts": t + 5.0, "dur": 4.5,
             "args": {"device": 0, "stream": 7, "correlation": 1000 + i}},
            {"ph": "s", "cat": "ac2g", "id": 1000 + i, "pid": 100, "tid": 7, "ts": t + 1.0},
        ]
    ev += extra or []
    return {"schemaVersion": 1, "baseTimeNanoseconds": BASE_NS,
            "deviceProperties": [{"id": 0, "name": "Test GPU", "numSms": 132}],
            "traceEvents": ev}


def _kernel(**over: object) -> dict:
    e: dict = {"ph": "X", "cat": "kernel", "name": "odd", "pid": 0, "tid": 7, "ts": 900.0,
               "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": 5000}}
    e.update(over)
    return e


def _json(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def gzip_bomb(path: Path, inflated: int = BOMB_BYTES) -> Path:
    """A gzip file of about ``inflated / 1000`` bytes inflating to ``inflated`` bytes (``[``,
    spaces, ``]``). Built from one full-flushed deflate block of 1 MiB of spaces repeated,
    so generating it costs milliseconds; the CRC is computed over the real content."""
    chunk = 1 << 20
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = comp.compress(b" " * chunk) + comp.flush(zlib.Z_FULL_FLUSH)
    reps = max(1, (inflated - 2) // chunk)
    tail_comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    crc = zlib.crc32(b"[")
    spaces = b" " * chunk
    for _ in range(reps):
        crc = zlib.crc32(spaces, crc)
    crc = zlib.crc32(b"]", crc)
    total = 2 + reps * chunk
    head_comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = head_comp.compress(b"[") + head_comp.flush(zlib.Z_FULL_FLUSH)
    tail = tail_comp.compress(b"]") + tail_comp.flush(zlib.Z_FINISH)
    # head block with history reset, then the repeated space blocks, then a final block.
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        fh.write(head)
        for _ in range(reps):
            fh.write(block)
        fh.write(tail)
        fh.write(crc.to_bytes(4, "little") + (total & 0xFFFFFFFF).to_bytes(4, "little"))
    return path


# ============================================================ ncu CSV builders
NCU_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
              '"Block Size","Grid Size","Device","CC","gpu__time_duration.sum",'
              '"dram__bytes.sum.per_second"\n')
NCU_UNITS = '"","","","","","","","","","","","usecond","Gbyte/second"\n'


def ncu_row(i: int, name: str = "gemm", dur: str = "16.448000") -> str:
    return (f'"{i}","1","a","h","{name}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
            f'"{dur}","1.500000"\n')


def ncu_text(n: int = 6, rows: list[str] | None = None) -> str:
    return NCU_HEADER + NCU_UNITS + "".join(ncu_row(i) for i in range(n)) + "".join(rows or [])


# ============================================================ the corpus
def build(out: Path, *, big: bool = True, dry: bool = False) -> list[Case]:
    """Write every corpus file into ``out`` and return the manifest rows.

    With ``big=False`` the files above :data:`COMMIT_LIMIT` are not written (their rows are
    still returned); with ``dry=True`` nothing is written (the manifest rows only)."""
    if not dry:
        out.mkdir(parents=True, exist_ok=True)
    cases: list[Case] = []

    def add(name: str, outcome: str, fragment: str, writer: Callable[[Path], object] | None,
            *, args: tuple[str, ...] = ("info", "{file}"), note: str = "",
            outputs: tuple[str, ...] = (), large: bool = False) -> None:
        if writer is not None and not dry and (big or not large):
            if (out / name).is_file():
                (out / name).unlink()
            writer(out / name)
        cases.append(Case(name, outcome, fragment, args, note, outputs))

    def data(b: bytes) -> Callable[[Path], object]:
        return lambda p: p.write_bytes(b)

    # ---------------------------------------------------------------- nsys SQLite
    good = out / "nsys_good.sqlite"
    if not dry:
        nsys_db(good, kernels=400)
    add("nsys_good.sqlite", "ingest", "gpu kernel", None, note="the intact base export")
    good_bytes = b"" if dry else good.read_bytes()
    add("nsys_empty.sqlite", "error", "empty file", data(b""))
    add("nsys_magic_only.sqlite", "error", "SQLite", data(good_bytes[:16]),
        note="16-byte header magic and nothing else")
    for frac in (0.1, 0.5, 0.9):
        add(f"nsys_trunc_{int(frac * 100)}pct.sqlite", "error", "truncated",
            lambda p, f=frac: _truncate(good, p, frac=f), note="cut at a page boundary or not")
    add("nsys_trunc_odd_offset.sqlite", "error", "truncated",
        lambda p: _truncate(good, p, size=len(good_bytes) - 777))
    add("nsys_garbage_after_magic.sqlite", "error", "SQLite",
        data(good_bytes[:16] + random.Random(1).randbytes(8192)))
    add("nsys_random_bytes.sqlite", "error", "not an SQLite database",
        data(random.Random(2).randbytes(4096)))

    def other_app(p: Path) -> None:
        con = sqlite3.connect(p)
        con.executescript("CREATE TABLE moz_places(id INTEGER PRIMARY KEY, url TEXT);"
                          "INSERT INTO moz_places VALUES (1, 'https://example.org');")
        con.close()
    add("other_app.sqlite", "error", "without Nsight Systems tables", other_app)
    add("nsys_kernel_no_start.sqlite", "error", "no 'start' column",
        lambda p: nsys_db(p, kernel_start=False), note="kernel table lacks start")
    add("nsys_runtime_no_end.sqlite", "error", "no 'end' column",
        lambda p: _sql(nsys_db(p), "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME DROP COLUMN "
                                   '"end"'))
    add("nsys_nvtx_no_eventtype.sqlite", "error", "no 'eventType' column",
        lambda p: _sql(nsys_db(p), "ALTER TABLE NVTX_EVENTS DROP COLUMN eventType"))
    add("nsys_no_stringids.sqlite", "error", "StringIds", lambda p: nsys_db(p, strings=False),
        note="names reference a missing StringIds table")
    add("nsys_dangling_string_ids.sqlite", "ingest", "<unnamed kernel>",
        lambda p: nsys_db(p, kernel_rows=[(5_000_000, 5_000_100, 9999, 424242)]),
        args=("kernels", "{file}", "--format", "csv"),
        note="kernel name id not in StringIds: kept with a placeholder name")
    add("nsys_end_before_start.sqlite", "ingest",
        "skipped CUPTI_ACTIVITY_KIND_KERNEL 1 (end before start)",
        lambda p: nsys_db(p, kernel_rows=[(5_000_000, 4_999_000, 9001, 1)]))
    add("nsys_null_times.sqlite", "ingest",
        "skipped CUPTI_ACTIVITY_KIND_KERNEL 2 (null start or end)",
        lambda p: nsys_db(p, kernel_rows=[(None, 5_000_000, 9001, 1),
                                          (5_000_000, None, 9002, 1)]))
    add("nsys_duplicate_correlation.sqlite", "ingest", "gpu kernel 43",
        lambda p: nsys_db(p, kernel_rows=[(5_000_000 + i * 10, 5_000_005 + i * 10, 1, 1)
                                          for i in range(3)]),
        note="3 extra kernels reuse correlation id 1: all kept")
    add("nsys_copykind_99.sqlite", "ingest", "[CUDA memcpy Unknown]",
        lambda p: nsys_db(p, memcpy_kinds=(1, 99)), args=("memops", "{file}"),
        note="unknown copyKind 99 -> Unknown")
    add("nsys_eventtype_1234.sqlite", "ingest", "(not a range or mark (eventType 1234))",
        lambda p: nsys_db(p, nvtx_types=(59, 1234, 1234)))
    add("nsys_huge_kernel_name.sqlite", "ingest", "gpu kernel",
        lambda p: nsys_db(p, names={1: "k" * (1 << 20)}), large=True,
        note="a 1 MiB demangled name")
    add("nsys_non_utf8_name.sqlite", "ingest", "gpu kernel",
        lambda p: nsys_db(p, names={1: b"void k\xff\xfe\x80(int)"}),
        note="StringIds TEXT holding invalid UTF-8")
    add("nsys_start_as_text.sqlite", "error", "not an integer",
        lambda p: _sql(nsys_db(p), "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' "
                                   "WHERE correlationId = 3"),
        note="SQLite is dynamically typed: a TEXT start in an INT column")
    add("nsys_start_as_real.sqlite", "error", "not an integer",
        lambda p: _sql(nsys_db(p), "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 1e30 "
                                   "WHERE correlationId = 3"))
    add("nsys_negative_times.sqlite", "ingest", "gpu kernel 41",
        lambda p: nsys_db(p, kernel_rows=[(-5_000, -4_000, 9001, 1)]),
        note="negative but ordered times are kept (clock before session start)")
    add("nsys_duration_overflow.sqlite", "ingest",
        "skipped CUPTI_ACTIVITY_KIND_KERNEL 1 (duration overflows int64)",
        lambda p: nsys_db(p, kernel_rows=[(-(2**63) + 1, 2**63 - 1, 9001, 1)]),
        note="end - start does not fit in int64")
    add("nsys_empty_tables.sqlite", "ingest", "gpu 0",
        lambda p: nsys_db(p, kernels=0, memcpy_kinds=(), nvtx_types=()))

    # ---------------------------------------------------------------- Kineto JSON
    doc = kineto_doc()
    raw = _json(doc)
    add("torch_good.json", "ingest", "gpu kernel", data(raw))
    add("torch_empty.json", "error", "empty file", data(b""))
    add("torch_whitespace.json", "error", "empty", data(b"  \n\t\n"))
    for frac in (0.02, 0.5, 0.98):
        add(f"torch_trunc_{int(frac * 100)}pct.json", "error", "invalid JSON",
            data(raw[: int(len(raw) * frac)]))
    gz = gzip.compress(raw, mtime=0)
    add("torch_good.json.gz", "ingest", "gpu kernel", data(gz))
    add("torch_trunc_half.json.gz", "error", "truncated gzip", data(gz[: len(gz) // 2]))
    add("torch_trunc_header.json.gz", "error", "gzip", data(gz[:6]))
    add("torch_trunc_no_trailer.json.gz", "error", "gzip", data(gz[:-4]))
    flipped = bytearray(gz)
    for i in range(40, len(gz) - 20, 97):
        flipped[i] ^= 0x5A
    add("torch_corrupt.json.gz", "error", "gzip", data(bytes(flipped)))
    add("torch_gzip_bomb.json.gz", "error", "gzip bomb", gzip_bomb, large=True,
        note=f"{BOMB_BYTES >> 30} GiB of spaces in ~3 MB; refused after inflating ~64 MiB")
    add("torch_not_a_trace.json", "error", "no traceEvents key",
        data(b'{"name": "package.json", "version": "1.0"}'))
    add("torch_scalar.json", "error", "not a trace", data(b"42"))
    add("torch_trace_events_dict.json", "error", "traceEvents is a dict",
        data(b'{"traceEvents": {"ph": "X"}}'))
    add("torch_events_not_objects.json", "error", "traceEvents holds a int",
        data(b'{"traceEvents": [1, 2, 3]}'))
    add("torch_cat_is_list.json", "error", "not a string",
        data(_json(kineto_doc(2, [_kernel(cat=["kernel"])]))))
    add("torch_ts_string.json", "error", "'ts' is not a number",
        data(_json(kineto_doc(2, [_kernel(ts="soon")]))))
    add("torch_ts_nan.json", "error", "invalid JSON",
        data(_json(kineto_doc(2)).replace(b'"ts":10.0', b'"ts":NaN', 1)),
        note="NaN is not JSON")
    add("torch_ts_infinity.json", "error", "invalid JSON",
        data(_json(kineto_doc(2)).replace(b'"ts":10.0', b'"ts":1e400', 1)))
    add("torch_ts_overflow.json", "error", "out of range",
        data(_json(kineto_doc(2, [_kernel(ts=1e30)]))), note="1e30 us does not fit in int64 ns")
    add("torch_ts_bigint.json", "error", "out of range",
        data(_json(kineto_doc(2, [_kernel(ts=99999999999999999999)]))))
    add("torch_dur_overflow.json", "error", "out of range",
        data(_json(kineto_doc(2, [_kernel(dur=9.2e15)]))),
        note="start + dur overflows int64 ns after the epoch base is added")
    add("torch_negative_dur.json", "ingest", "(negative duration)",
        data(_json(kineto_doc(2, [_kernel(dur=-5.0)]))))
    add("torch_negative_ts.json", "ingest", "gpu kernel 3",
        data(_json(kineto_doc(2, [_kernel(ts=-50.0)]))),
        note="negative relative ts is before the base time: kept")
    add("torch_duplicate_correlation.json", "ingest", "gpu kernel 22",
        data(_json(kineto_doc(20, [_kernel(args={"correlation": 1000}),
                                   _kernel(args={"correlation": 1000})]))))
    add("torch_unknown_category.json", "ingest", "(category weird_cat not used)",
        data(_json(kineto_doc(2, [{"ph": "X", "cat": "weird_cat", "name": "x", "ts": 1,
                                   "dur": 1}]))))
    add("torch_args_wrong_types.json", "ingest", "gpu kernel",
        data(_json(kineto_doc(2, [_kernel(args=[1, 2]), _kernel(args={"correlation": "x",
                                                                      "device": [0]}),
                                  _kernel(name=12345)]))))
    add("torch_missing_ts.json", "ingest", "(missing ts or dur)",
        data(_json(kineto_doc(2, [{"ph": "X", "cat": "kernel", "name": "k"}]))))
    add("torch_huge_name.json", "ingest", "gpu kernel",
        data(_json(kineto_doc(2, [_kernel(name="k" * (1 << 20))]))), large=True)
    add("torch_non_utf8.json", "error", "invalid JSON",
        data(_json(kineto_doc(2)).replace(b"aten::mm", b"aten::\xff\xfe", 1)))
    add("torch_utf16.json", "error", "invalid JSON",
        data(json.dumps(kineto_doc(1)).encode("utf-16")))
    add("torch_bare_list_open.json", "error", "invalid JSON", data(b"["))

    # ---------------------------------------------------------------- ncu CSV
    ncu_good = ncu_text()
    add("ncu_good.csv", "ingest", "ncu", data(ncu_good.encode()))
    add("ncu_empty.csv", "error", "empty file", data(b""))
    add("ncu_error_log.csv", "error", "no Nsight Compute CSV",
        data(b"==PROF== Connected to process 4242\n==ERROR== The application returned an "
             b"error code (1).\n==WARNING== No kernels were profiled.\n"))
    add("ncu_header_only.csv", "error", "no kernel launch rows",
        data((NCU_HEADER + NCU_UNITS).encode()))
    add("ncu_no_kernel_name.csv", "error", "'Kernel Name'",
        data(b'"ID","Process ID"\n"0","1"\n'))
    add("ncu_wrong_column_count.csv", "ingest", "wrong number of columns",
        data(ncu_text(6, ['"6","1","a"\n', ncu_row(7).rstrip("\n") + ',"extra","x"\n'])
             .encode()), note="one short row, one long row among 6 good ones")
    add("ncu_trunc_mid_row.csv", "ingest", "wrong number of columns",
        data(ncu_good.encode()[: len(ncu_good) - 30]))
    add("ncu_trunc_in_header.csv", "error", "'Kernel Name'", data(NCU_HEADER[:40].encode()))
    add("ncu_id_not_integer.csv", "ingest", "ncu",
        data(ncu_text(3, [ncu_row(0).replace('"0"', '"zero"', 1)]).encode()),
        note="a row whose ID is not an integer is skipped")
    add("ncu_nan_values.csv", "ingest", "ncu",
        data(ncu_text(2, [ncu_row(2, dur="nan"), ncu_row(3, dur="inf"),
                          ncu_row(4, dur="-1e400"), ncu_row(5, dur="n/a")]).encode()))
    add("ncu_non_utf8.csv", "ingest", "ncu",
        data(ncu_text(2).encode() + ncu_row(2, name="k\xe9rnel").encode("latin-1")))
    add("ncu_huge_name.csv", "ingest", "ncu",
        data(ncu_text(2, [ncu_row(2, name="k" * (1 << 20))]).encode()), large=True)
    add("ncu_binary.csv", "error", "no Nsight Compute CSV",
        data(random.Random(3).randbytes(2048).replace(b"\n", b"")))

    # ---------------------------------------------------------------- CLI / paths
    add("cli_missing_out_dir", "error", "does not exist", None,
        args=("kernels", "nsys_good.sqlite", "-o", "missing/dir/out.csv"),
        outputs=("missing",), note="-o in a missing directory")
    add("cli_convert_missing_out_dir", "error", "does not exist", None,
        args=("convert", "torch_good.json", "-o", "/nonexistent/dir/x"),
        note="absolute output path in a missing directory")
    add("cli_convert_bad_input", "error", "truncated", None,
        args=("convert", "nsys_trunc_50pct.sqlite", "-o", "out_timeline"),
        outputs=("out_timeline",), note="bad input: no output directory left behind")
    add("cli_kernels_bad_input", "error", "invalid JSON", None,
        args=("kernels", "torch_trunc_50pct.json", "-o", "out.csv"), outputs=("out.csv",))
    add("cli_no_such_file", "error", "no such file", None,
        args=("info", "does_not_exist.sqlite"))
    add("dir_as_file.csv", "error", "no Kineto trace files", lambda p: p.mkdir(exist_ok=True),
        note="a directory where a file is expected (also the portable stand-in for an "
             "unreadable file when running as root)")

    def bad_timeline(p: Path) -> None:
        p.mkdir(exist_ok=True)
        (p / "timeline.json").write_text("{not json")
    add("timeline_broken", "error", "unreadable timeline.json", bad_timeline)

    def dup_ranks(p: Path) -> None:
        p.mkdir(exist_ok=True)
        for n in ("a.json", "b.json"):
            d = kineto_doc(1)
            d["distributedInfo"] = {"rank": 0, "world_size": 2}
            (p / n).write_bytes(_json(d))
    add("torch_dir_duplicate_rank", "error", "several files claim rank 0", dup_ranks)

    def dir_one_bad(p: Path) -> None:
        p.mkdir(exist_ok=True)
        (p / "rank0.json").write_bytes(raw)
        (p / "rank1.json").write_bytes(raw[:100])
    add("torch_dir_one_bad_file", "error", "rank1.json", dir_one_bad)

    if not dry:
        _write_manifest(out, cases)
    return cases


def _write_manifest(out: Path, cases: list[Case]) -> None:
    with open(out / "manifest.csv", "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["file", "outcome", "fragment", "args", "note"])
        for c in cases:
            w.writerow([c.file, c.outcome, c.fragment, " ".join(c.args), c.note])


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    cases = build(out, big=len(sys.argv) > 1)
    big = sorted(p.name for p in out.iterdir() if p.is_file() and p.stat().st_size
                 > COMMIT_LIMIT)
    print(f"{len(cases)} cases in {out}; not for committing (> {COMMIT_LIMIT} B): {big}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
