"""The ``traceparse`` command line (click). Importing this package registers every command."""

from traceparse.cli import (  # noqa: F401  (imported to register their commands)
    analysis_cmds,
    batch_cmds,
    llm_cmds,
    memory_cmds,
    model_cmds,
    perf_cmds,
    report_cmds,
    roofline_cmds,
    trace_cmds,
)
from traceparse.cli.main import main, run

__all__ = ["main", "run"]
