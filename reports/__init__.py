"""traceparse reports."""
