"""Exports: the ablation figures, CSV/Parquet copies of the result tables, report.md and the run explorer, under
<warehouse>/exports."""
