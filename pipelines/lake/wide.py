"""Runs with thousands of extra keys: the warehouse's tables take the first MAX_EXTRA_COLUMNS by name as columns;
the lake's Parquet keeps them all.

DuckDB holds a block (256 KiB) per column of a table being written, and reads a Parquet file's columns each into
buffers of their own: thousands of columns exhaust a build's memory limit (512 MB) in the first model that reads
them. The lake views select the columns the tables get, and DuckDB reads no other.
"""

from __future__ import annotations

import polars as pl

from pipelines.lake.inventory import ERROR_COLUMNS, error_row
from pipelines.lake.paths import partition_file
from pipelines.release.flatten import EPOCH_COLUMNS, TRAJECTORY_COLUMNS, column_order

MAX_EXTRA_COLUMNS = 500


def view_columns(names: list[str], schema: dict) -> list[str]:
    """A lake table's columns as the warehouse reads them, in the lake's order: its own, then the first
    MAX_EXTRA_COLUMNS extra keys by name."""
    ordered = column_order(names, schema)
    extras = [name for name in ordered if name not in schema][:MAX_EXTRA_COLUMNS]
    return [name for name in ordered if name in schema] + extras


def wide_notes(run_id: str, lake, epochs: pl.DataFrame, trajectories: pl.DataFrame) -> pl.DataFrame:
    """A warning for each of a run's tables with more extra keys than the warehouse's tables take, saying which are
    left out and where they are kept."""
    rows = []
    for lake_table, table, frame, schema in (
        ("epochs", "fact_epochs", epochs, EPOCH_COLUMNS),
        ("trajectories", "fact_trajectories", trajectories, TRAJECTORY_COLUMNS),
    ):
        extras = [name for name in column_order(frame.columns, schema) if name not in schema]
        if len(extras) > MAX_EXTRA_COLUMNS:
            message = (
                f"{len(extras)} extra keys: {table} has a column for the first {MAX_EXTRA_COLUMNS} by name (to "
                f"{extras[MAX_EXTRA_COLUMNS - 1]}); the other {len(extras) - MAX_EXTRA_COLUMNS} (from "
                f"{extras[MAX_EXTRA_COLUMNS]}) are kept in the lake, {partition_file(lake, lake_table, run_id)}"
            )
            rows.append(error_row(run_id, f"{run_id}/", None, "wide_extras", "warning", message, "loaded"))
    return pl.DataFrame(rows, schema=ERROR_COLUMNS)
