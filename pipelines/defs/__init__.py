"""Dagster definitions, one folder per domain of data: ingest, models, exports."""
