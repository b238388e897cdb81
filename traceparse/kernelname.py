"""Short kernel names for labels and sentences: one rule for the report's evidence, the
roofline chart's labels and the gap causes.

A demangled kernel name carries a return type (``void``), namespaces, template arguments
and a parameter list. :func:`short_kernel_name` drops the return type and the parameter
list (the first ``(`` outside template brackets that does not open an anonymous-namespace
scope); with ``bare=True`` it also drops the template arguments and the namespaces, keeping
the kernel's own name (a generic wrapper such as ``cutlass::Kernel`` keeps its first
template argument's name, which is the one that says what it runs).
"""

from __future__ import annotations

import re

#: Anonymous-namespace scopes (GCC ``(anonymous namespace)::``, ``{anonymous}::``,
#: MSVC-style ```anonymous namespace'::``): their parenthesis is not a parameter list.
ANON = re.compile(r"(?:\(anonymous namespace\)|\{anonymous\}|`anonymous namespace')::")
#: Wrapper kernel names that say nothing alone; their first template argument is shown too.
GENERIC_KERNEL_NAMES = {"Kernel", "Kernel2", "kernel", "device_kernel", "DeviceKernel"}


def short_kernel_name(name: str, n: int = 70, *, bare: bool = False) -> str:
    """``name`` without return type and parameter list, at most ``n`` characters (cut
    with ``…``); ``bare``: without namespaces and template arguments too.

    Example:
        >>> short_kernel_name("void at::native::(anonymous namespace)::k<float>(long)")
        'at::native::(anonymous namespace)::k<float>'
        >>> short_kernel_name("void k<(int)3>(int)")
        'k<(int)3>'
        >>> short_kernel_name("void at::native::<unnamed>::distribution_kernel<float, 4>"
        ...                   "(int, T1)", bare=True)
        'distribution_kernel'
        >>> short_kernel_name("void cutlass::Kernel<cutlass::gemm::kernel::B2bGemm<int, 3>>"
        ...                   "(Params)", bare=True)
        'Kernel<B2bGemm>'
    """
    full = name.strip().removeprefix("void ").strip()
    if bare:
        plain = ANON.sub("", full)
        parts = [p for p in strip_templates(plain).split("(")[0].strip().split("::") if p]
        base = parts[-1] if parts else plain
        if base in GENERIC_KERNEL_NAMES and "<" in plain:  # cutlass::Kernel<...B2bGemm<...>>
            inner = re.split(r"[,>]", strip_templates(plain[plain.index("<") + 1:]))[0]
            scopes = [p.strip() for p in inner.split("::") if p.strip()]
            base = f"{base}<{scopes[-1]}>" if scopes else base
    else:
        base = full[:_parameter_list(full)].strip() or full
    return base if len(base) <= n else base[: n - 1] + "…"


def _parameter_list(name: str) -> int:
    """Index of the ``(`` that opens ``name``'s parameter list (``len(name)`` if none)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and not ANON.match(name, i):
            return i
    return len(name)


def strip_templates(s: str) -> str:
    """``s`` without its ``<...>`` groups (innermost first, until none is left)."""
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"<[^<>]*>", "", s)
    return s
