"""Remove the capture machine's environment and paths from gzipped nsys SQLite exports.

``nsys export`` copies the profiled process's whole environment (``DeviceEnvironment`` in
``TARGET_INFO_SYSTEM_ENV``, and one ``PROCESS_N:ENVIRONMENT_VARIABLE`` row per variable in
``META_DATA_CAPTURE``: container name, working directory, scratch paths), its command line
and working directory (``META_DATA_CAPTURE``) and the files it touched (``StringIds``)
into the export. This rewrites, in place, each ``*.sqlite.gz`` given: the environment
becomes ``(removed)`` (its rows in ``META_DATA_CAPTURE`` are deleted), the working
directory ``.``, and the checkout's absolute path (``--root``) and the capture's scratch
folders (``--strip``) become relative in every text value of those tables and of
``META_DATA_EXPORT`` (the export's own input and output paths). Nothing else changes;
the result is gzipped again with mtime 0.

    python3 sample_traces/capture/scrub_nsys.py --root CHECKOUT [--strip SCRATCH] DIR/*.sqlite.gz
"""

from __future__ import annotations

import argparse
import gzip
import sqlite3
import tempfile
from pathlib import Path

TABLES = {"TARGET_INFO_SYSTEM_ENV": "value", "META_DATA_CAPTURE": "value",
          "META_DATA_EXPORT": "value", "StringIds": "value"}


def scrub(path: Path, root: str, strip: tuple[str, ...] = ()) -> int:
    """Scrub one ``.sqlite.gz``; returns how many rows changed. ``strip``: more absolute
    folders (the capture's scratch output folders) to make relative."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "x.sqlite"
        db.write_bytes(gzip.decompress(path.read_bytes()))
        con = sqlite3.connect(db)
        n = con.execute("UPDATE TARGET_INFO_SYSTEM_ENV SET value = '(removed)' "
                        "WHERE name = 'DeviceEnvironment'").rowcount
        n += con.execute("DELETE FROM META_DATA_CAPTURE "
                         "WHERE name LIKE 'PROCESS_%:ENVIRONMENT_VARIABLE'").rowcount
        n += con.execute("UPDATE META_DATA_CAPTURE SET value = '.' WHERE name LIKE "
                         "'PROCESS_%:WORKING_DIR' AND value = ?", (root.rstrip("/"),)).rowcount
        for folder in (root, *strip):
            prefix = folder.rstrip("/") + "/"
            for table, col in TABLES.items():
                # the folder itself as a value (``--out /scratch/dir``): its own name
                n += con.execute(f"UPDATE {table} SET {col} = ? WHERE {col} = ?",
                                 (Path(folder).name or ".", folder.rstrip("/"))).rowcount
                n += con.execute(f"UPDATE {table} SET {col} = REPLACE({col}, ?, '') "
                                 f"WHERE {col} LIKE ?", (prefix, f"%{prefix}%")).rowcount
        con.commit()
        con.execute("VACUUM")
        con.close()
        with open(path, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0,
                                                    filename="") as gz:
            gz.write(db.read_bytes())
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the capture checkout's absolute path")
    ap.add_argument("--strip", action="append", default=[],
                    help="another absolute folder to make relative (repeatable): the "
                         "capture's scratch output folder")
    ap.add_argument("files", nargs="+", type=Path)
    a = ap.parse_args()
    for f in a.files:
        print(f"{f.name}: {scrub(f, a.root, tuple(a.strip))} rows scrubbed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
