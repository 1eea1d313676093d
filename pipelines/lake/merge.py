"""A run's stored rows of a lake table merged with newly read ones: the rows of files read again dropped first."""

from __future__ import annotations

import polars as pl

from pipelines.lake.parquet import read_parquet
from pipelines.lake.paths import partition_file
from pipelines.lake_store import LakePath
from pipelines.release.flatten import ColumnKinds, python_values, typed_series


def read_partition(lake: LakePath, table: str, run_id: str) -> pl.DataFrame | None:
    path = partition_file(lake, table, run_id)
    return read_parquet(path) if path.exists() else None


def keep_rows(frame: pl.DataFrame | None, drop_paths: set[str]) -> pl.DataFrame | None:
    if frame is None:
        return None
    return frame.filter(~pl.col("source_path").is_in(list(drop_paths)))


def concat_frames(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    present = [f for f in frames if f is not None and f.width > 0]
    if len(present) == 1:
        return present[0]
    return pl.concat(present, how="diagonal_relaxed") if present else pl.DataFrame()


def may_differ_from_a_fresh_parse(frame: pl.DataFrame, kinds: ColumnKinds, schema: dict) -> bool:
    """Whether a run's merged rows, after a file was rewritten or removed, may have other columns than a first
    ingest of its files would give: an extra column left without a value (the key may be gone with that file), a
    Float64 one left with whole numbers only (integers beside a float that only file had), or one kept as JSON
    text whose values are no longer of the types recorded. Then the run is parsed again whole."""
    for name in frame.columns:
        if name in schema:
            continue
        column = frame[name]
        values = column.drop_nulls()
        if not values.len():
            return True
        if name in kinds:  # what a first ingest would make of the values left
            if typed_series(name, python_values(values, kinds[name]))[1] != kinds[name]:
                return True
        elif column.dtype == pl.Float64 and (values.is_finite() & (values == values.floor())).all():
            return True
    return False
