"""The benchmark harness: `python -m benchmarks` times the ingest, rebuilds and the whole build (docs/benchmarks.md)."""
