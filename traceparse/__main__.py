"""``python -m traceparse`` runs the command line."""

from traceparse.cli import run

run()
