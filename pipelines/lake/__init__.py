"""The Parquet lake: one folder per table, one partition per run, rewritten only when a run's files change."""
