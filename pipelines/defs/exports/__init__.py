"""Exports: the ablation figures, CSV/Parquet copies of the result tables and report.md, under <warehouse>/exports."""
