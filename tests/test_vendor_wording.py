"""AMD wording: the CLI's text and the HTML report say HIP graphs and compute units for AMD
traces, from one rule (traceparse.vendor)."""

from __future__ import annotations

import re

import pytest
from conftest import TRACES

from traceparse.vendor import amd_vendors, amd_words


def test_amd_words_and_vendors() -> None:
    assert amd_words("CUDA graphs could save 2 ms; 104 SMs") == \
        "HIP graphs could save 2 ms; 104 compute units"
    assert amd_words("capture in a CUDA graph") == "capture in a HIP graph"
    assert amd_vendors(["amd", None, "AMD"])
    assert not amd_vendors(["amd", "nvidia"])
    assert not amd_vendors([None])  # nothing described: NVIDIA wording


@pytest.mark.shared
def test_rocm_report_speaks_amd_like_the_cli() -> None:
    from click.testing import CliRunner

    from traceparse import load
    from traceparse.cli import main
    from traceparse.reports.html import render_html
    from traceparse.reports.payload import build_payload

    path = TRACES / "torch" / "hta__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.is_file():
        pytest.skip("corpus missing")
    tl = load(path)
    assert set(tl.devices["vendor"].cast(str).to_list()) == {"amd"}  # MI250 GCDs
    p = build_payload(tl)
    assert "HIP graphs could save" in p["launches"]["note"]
    html = render_html(p)
    text = re.sub(r"<script.*?</script>", "", html, flags=re.S)  # the visible page
    assert "CUDA graph" not in text and "HIP graphs could save" in text
    assert ">compute units<" in text and ">SMs<" not in text
    # the CLI's summary says the same words for the same figure
    out = CliRunner().invoke(main, ["summary", str(path)])
    assert out.exit_code == 0, out.output
    assert "HIP graphs could save" in out.output and "CUDA graph" not in out.output
