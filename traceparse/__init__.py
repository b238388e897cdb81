"""traceparse: one unified kernel timeline from Nsight Systems, Nsight Compute and the
PyTorch profiler, and the analyses that say where the GPU time went.

    >>> import traceparse
    >>> tl = traceparse.load("report.sqlite")      # doctest: +SKIP
    >>> tl.kernels.head()                          # doctest: +SKIP
"""

from traceparse._version import __version__
from traceparse.errors import TraceError
from traceparse.loader import detect, load
from traceparse.schema import SCHEMA_VERSION
from traceparse.timeline import Timeline

__all__ = ["SCHEMA_VERSION", "Timeline", "TraceError", "__version__", "detect", "load"]
