"""What a capture records about where it ran: GPU, driver, software, the command.

Shared by ``gpt_profile.py`` and ``ncu_kernels.py`` (both put this folder on ``sys.path``).
Nothing here may write a machine path into a committed file: commands are rewritten relative
to the repository root (:func:`portable_command`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import subprocess
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]


def portable_command(argv: list[str]) -> str:
    """The command as typed, with absolute paths made relative to the repository root (or cut
    to their file name when outside it), so no machine path is recorded.

    Example:
        >>> portable_command([str(REPO / "x.py"), "--out", "/elsewhere/t.json.gz"])
        'python3 x.py --out t.json.gz'
    """
    out = []
    for a in argv:
        if os.path.isabs(a):
            try:
                a = str(Path(a).resolve().relative_to(REPO))
            except ValueError:
                a = Path(a).name
        out.append(a)
    return shlex.join(["python3", *out])


def _nvidia_smi(field: str) -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader", "-i", "0"],
            capture_output=True, text=True, check=True, timeout=30).stdout.strip()
        return out or None
    return None


def gpu_info() -> dict[str, Any] | None:
    """Name, driver, VBIOS-free identity of GPU 0 as torch and nvidia-smi see it; None
    without CUDA."""
    if not torch.cuda.is_available():
        return None
    prop = torch.cuda.get_device_properties(0)
    return {"name": prop.name, "driver": _nvidia_smi("driver_version"),
            "compute_capability": f"{prop.major}.{prop.minor}",
            "sm_count": prop.multi_processor_count, "memory_bytes": prop.total_memory,
            "power_limit_w": _nvidia_smi("power.limit"),
            "max_sm_clock_mhz": _nvidia_smi("clocks.max.sm"),
            "max_mem_clock_mhz": _nvidia_smi("clocks.max.mem")}


def software_info() -> dict[str, Any]:
    """Python, torch, CUDA and cuDNN versions (CUDA/cuDNN None on a CPU build)."""
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": cudnn, "os": platform.platform(terse=True),
            "machine": platform.machine()}
