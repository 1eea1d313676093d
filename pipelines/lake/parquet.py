"""The lake's Parquet files read and written by their exact paths, each write atomic."""

from __future__ import annotations

import io

import polars as pl

from pipelines.lake_store import LakePath, exists, in_bucket, write_bytes_atomically


def read_parquet(path: LakePath) -> pl.DataFrame:
    """A Parquet file read by its exact path: polars otherwise takes `*`, `?` and `[` in a path as a pattern, and
    `key=value` folders as columns. An object in a bucket is fetched whole, in one GET."""
    if in_bucket(path):
        return pl.read_parquet(io.BytesIO(path.read_bytes()))
    return pl.read_parquet(path, glob=False, hive_partitioning=False)


def write_atomically(frame: pl.DataFrame, path: LakePath) -> None:
    """Writes Parquet so that no reader sees a part of it (lake_store.write_bytes_atomically)."""
    # Serialised in memory, then written by Python: polars reports a full disk as a ComputeError naming neither the
    # file nor the errno. zstd level 1 rather than polars' default 3, and no column statistics (a run's partition
    # is one row group, read whole): a run's trajectories written in 8 ms instead of 17 ms, to a file of about the
    # same size.
    buffer = io.BytesIO()
    frame.write_parquet(buffer, statistics=False, compression="zstd", compression_level=1)
    write_bytes_atomically(buffer.getvalue(), path)


def write_text_atomically(text: str, path: LakePath) -> None:
    write_bytes_atomically(text.encode(), path)


def count_rows(path: LakePath) -> int:
    """A lake file's rows, from its Parquet footer; 0 when there is no file."""
    if not exists(path):
        return 0
    if in_bucket(path):
        import pyarrow.parquet as pq  # here: its import costs every ingest process 0.1 s

        return pq.read_metadata(io.BytesIO(path.read_bytes())).num_rows
    return pl.scan_parquet(path, glob=False, hive_partitioning=False).select(pl.len()).collect().item()


def parquet_schema(path: LakePath) -> pl.Schema:
    """A lake file's columns and their types, from its Parquet footer."""
    if in_bucket(path):
        return pl.read_parquet_schema(io.BytesIO(path.read_bytes()))
    return pl.scan_parquet(path, glob=False, hive_partitioning=False).collect_schema()


def column_names(path: LakePath) -> list[str]:
    """A lake file's columns as spelled in it, in order, from its Parquet footer (in a bucket, read by range)."""
    if in_bucket(path):
        import pyarrow.parquet as pq

        with path.open("rb") as file:
            return pq.ParquetFile(file).schema_arrow.names
    return list(parquet_schema(path))
