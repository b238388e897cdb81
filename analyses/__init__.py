"""traceparse analyses."""
