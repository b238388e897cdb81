"""A report rendered through the real parsers and CLI from traces whose kernel names, API
names and NVTX / annotation text are HTML, JavaScript and URLs: every trace-derived string
is escaped, and the page loads nothing from outside (no src/href/url() to another origin).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import generator

REPO = Path(__file__).resolve().parent.parent
GEN = generator()
HOSTILE = [
    '</script><script src="https://evil.example/a.js"></script>',
    "<img src=x onerror=alert(1)>",
    '"><a href="javascript:alert(2)">x</a>',
    "<style>@import url(https://evil.example/b.css)</style>",
    "<iframe src=//evil.example/c>",
]


def _nsys(path: Path) -> Path:
    GEN.nsys_db(path, kernels=20, names={1: HOSTILE[0], 2: HOSTILE[1], 3: HOSTILE[2]},
                nvtx_types=(59, 59))
    import sqlite3

    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = 1", (HOSTILE[3],))
    con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = 2", (HOSTILE[4],))
    con.commit()
    con.close()
    return path


def _kineto(path: Path) -> Path:
    doc = GEN.kineto_doc(6)
    for i, e in enumerate(doc["traceEvents"]):
        if e.get("cat") in ("kernel", "cpu_op", "cuda_runtime"):
            e["name"] = HOSTILE[i % len(HOSTILE)]
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": HOSTILE[3],
                               "pid": 100, "tid": 7, "ts": 5.0, "dur": 200.0})
    doc["deviceProperties"][0]["name"] = HOSTILE[4]
    path.write_text(json.dumps(doc))
    return path


def _scan(html: str) -> tuple[list[str], set[str], str]:
    from html.parser import HTMLParser

    links: list[str] = []
    tags: set[str] = set()
    css: list[str] = []
    stack: list[str] = []

    class P(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            tags.add(tag)
            stack.append(tag)
            links.extend(v or "" for k, v in attrs if k in ("src", "href", "action"))
            css.extend(v or "" for k, v in attrs if k == "style")

        def handle_endtag(self, tag: str) -> None:
            if stack and stack[-1] == tag:
                stack.pop()

        def handle_data(self, data: str) -> None:
            if stack and stack[-1] == "style":
                css.append(data)

    P().feed(html)
    return links, tags, "\n".join(css)


def _css(html: str) -> str:
    return _scan(html)[2]


def _links(html: str) -> list[str]:
    return _scan(html)[0]


def _tags(html: str) -> set[str]:
    return _scan(html)[1]


@pytest.mark.parametrize("make", [_nsys, _kineto], ids=["nsys", "kineto"])
def test_report_escapes_trace_strings(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    src = make(tmp_path / ("t.sqlite" if make is _nsys else "t.json"))
    out = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "traceparse", "report", str(src), "-o", str(out)],
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    for s in HOSTILE:
        assert s not in html, s  # never verbatim
    assert "evil.example" in html  # the names are in the page (as text or escaped JSON)
    assert not re.search(r"<(img|iframe|style)\b[^>]*(evil|onerror|url\()", html, re.I)
    assert "javascript:" not in html.replace("javascript:alert", "")  # only escaped text
    # nothing is loaded from elsewhere: the real tags (parsed, so escaped text inside
    # attributes or script data does not count) have no src/href but in-page anchors
    refs = _links(html)
    assert refs and all(r.startswith("#") for r in refs), refs
    tags = _tags(html)
    assert not {"img", "iframe", "link", "object", "embed"} & tags, tags
    css = _css(html)  # the page's own CSS: <style> elements and style attributes
    assert not re.search(r"url\(\s*['\"]?(https?:|//)|@import", css, re.I)
    assert html.count("</script>") == html.count("<script")
