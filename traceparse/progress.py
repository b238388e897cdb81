"""A one-line progress indicator on stderr for long ingests, silent unless stderr is a TTY.

:class:`Progress` is a context manager. Nothing is drawn for work that finishes within
``delay`` seconds, nothing at all when the stream is not a terminal (pipes, files, CI logs,
tests) or when ``TRACEPARSE_PROGRESS=0``. While drawn, a background thread redraws the line
every ``interval`` seconds (``\\r`` + text, no newline) and the line is erased at the end,
so the command's real output is unaffected.

With a ``total`` (files of a directory, traces of a batch) the line is a bar::

    traceparse: batch [##########..........] 512/1024 traces 41.3 s

Without one (a single file whose parser reports no steps) it shows the input size and the
elapsed time::

    traceparse: reading report.sqlite (1.2 GB) 3.4 s

Example:
    >>> import io
    >>> with Progress("reading x", stream=io.StringIO()) as bar:   # not a TTY: silent
    ...     bar.advance()
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

_WIDTH = 20


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def enabled(stream: TextIO) -> bool:
    """True when progress should be drawn on ``stream``: a TTY and not disabled by
    ``TRACEPARSE_PROGRESS=0``."""
    if os.environ.get("TRACEPARSE_PROGRESS") == "0":
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """Progress line for a long operation (see the module docstring).

    Args:
        label: what is being done (``"reading report.sqlite"``).
        total: number of steps, when known; :meth:`advance` counts them.
        unit: the name of a step (``"files"``, ``"traces"``).
        nbytes: input size shown when there is no total.
        stream: where to draw (default ``sys.stderr``).
        delay: seconds before the first draw (short work is never shown).
        interval: seconds between redraws.
    """

    def __init__(self, label: str, *, total: int | None = None, unit: str = "",
                 nbytes: int | None = None, stream: TextIO | None = None,
                 delay: float = 0.5, interval: float = 0.25) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.nbytes = nbytes
        self.stream = stream if stream is not None else sys.stderr
        self.delay = delay
        self.interval = interval
        self.done = 0
        self._start = 0.0
        self._drawn = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if enabled(self.stream):
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def advance(self, n: int = 1) -> None:
        """Count ``n`` finished steps."""
        with self._lock:
            self.done += n

    def text(self) -> str:
        """The current progress line (without ``\\r``)."""
        elapsed = time.monotonic() - self._start
        if self.total:
            filled = min(_WIDTH, _WIDTH * self.done // self.total)
            bar = "#" * filled + "." * (_WIDTH - filled)
            return (f"traceparse: {self.label} [{bar}] {self.done}/{self.total} "
                    f"{self.unit} {elapsed:.1f} s").replace("  ", " ")
        size = f" ({_size(self.nbytes)})" if self.nbytes else ""
        return f"traceparse: {self.label}{size} {elapsed:.1f} s"

    def _draw(self, line: str) -> None:
        pad = " " * max(0, self._drawn - len(line))
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._drawn = len(line)

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        while True:
            with self._lock:
                self._draw(self.text())
            if self._stop.wait(self.interval):
                return

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            if self._drawn:
                self.stream.write("\r" + " " * self._drawn + "\r")
                self.stream.flush()
