"""traceparse roofline."""
