"""Vendor wording: text written in NVIDIA terms, said in AMD terms for AMD traces.

One rule for the CLI's text output and the HTML report: a trace is AMD when every described
device is an AMD GPU (``devices.vendor``); its text then says HIP graphs for CUDA graphs and
compute units for SMs.

Example:
    ``speak_vendor("CUDA graphs could save 2 ms", tl)`` -> ``"HIP graphs could save 2 ms"``
    for a ROCm trace, unchanged otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable

from traceparse.timeline import Timeline

#: (NVIDIA wording, AMD wording), replaced in this order.
AMD_WORDS = (("CUDA graphs", "HIP graphs"), ("CUDA graph", "HIP graph"),
             ("CUDA-graph", "HIP-graph"), (" SMs", " compute units"),
             (" SM ", " compute unit "))


def amd_vendors(vendors: Iterable[str | None]) -> bool:
    """True when the known vendors (None: not described) are all AMD, and there is one."""
    known = {str(v).lower() for v in vendors if v is not None}
    return bool(known) and known <= {"amd"}


def is_amd(tl: Timeline) -> bool:
    """True when every described device of ``tl`` is an AMD GPU."""
    return amd_vendors(tl.devices["vendor"].to_list())


def amd_words(text: str) -> str:
    """``text`` with NVIDIA terms replaced by AMD ones (:data:`AMD_WORDS`)."""
    for nv, amd in AMD_WORDS:
        text = text.replace(nv, amd)
    return text


def speak_vendor(text: str, tl: Timeline) -> str:
    """Text written in NVIDIA terms, in AMD terms when ``tl`` is an AMD trace: HIP graphs
    for CUDA graphs, compute units (CUs) for SMs."""
    return amd_words(text) if is_amd(tl) else text
