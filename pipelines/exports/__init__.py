"""What researchers read: the ablation figures, CSV/Parquet copies of the result tables and report.md (no Dagster)."""
