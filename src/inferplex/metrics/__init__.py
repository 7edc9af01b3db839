"""Prometheus metrics: declared here once, read from the engine's counters at scrape time."""
