"""The DuckDB side: a private build database that models write to, published to readers by an atomic rename."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl
from filelock import FileLock, Timeout

from pipelines.lake import ERROR_COLUMNS, FILE_COLUMNS
from pipelines.release.flatten import EPOCH_COLUMNS, TRAJECTORY_COLUMNS
from pipelines.release.registry import RUN_COLUMNS

PUBLISHED_NAME = "warehouse.duckdb"
# Each lake view: the Parquet files it reads, and the columns it has when there are none yet.
LAKE_VIEWS = {
    "epochs": ("epochs/*/data.parquet", EPOCH_COLUMNS),
    "trajectories": ("trajectories/*/data.parquet", TRAJECTORY_COLUMNS),
    "errors": ("errors/*/data.parquet", ERROR_COLUMNS),
    "files": ("files/*/data.parquet", FILE_COLUMNS),
    "runs": ("runs.parquet", RUN_COLUMNS),
    "release_errors": ("release_errors.parquet", ERROR_COLUMNS),
    "release_files": ("release_files.parquet", FILE_COLUMNS),
}


class WarehouseBusy(Exception):
    """Another process holds the build database for longer than we were willing to wait."""


def lake_dir(warehouse: Path) -> Path:
    return Path(warehouse) / "lake"


def build_dir(warehouse: Path) -> Path:
    return Path(warehouse) / ".build"


def published_path(warehouse: Path) -> Path:
    return Path(warehouse) / PUBLISHED_NAME


def _empty_select(schema: dict) -> str:
    frame = pl.DataFrame(schema=schema)
    con = duckdb.connect()
    types = dict(zip(con.from_arrow(frame.to_arrow()).columns, con.from_arrow(frame.to_arrow()).types))
    con.close()
    return "select " + ", ".join(f"cast(null as {t}) as {name}" for name, t in types.items()) + " limit 0"


def create_lake_views(con: duckdb.DuckDBPyConnection, lake: Path) -> None:
    """(Re)defines the lake.* views over the Parquet lake; a table with no file yet is an empty view."""
    con.execute("create schema if not exists lake")
    for view, (pattern, schema) in LAKE_VIEWS.items():
        files = sorted(Path(lake).glob(pattern))
        if files:
            listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            body = f"select * from read_parquet([{listing}], union_by_name = true)"
        else:
            body = _empty_select(schema)
        con.execute(f"create or replace view lake.{view} as {body}")


def lake_fingerprint(lake: Path) -> str:
    """Changes whenever any lake file is rewritten; cheap, from file metadata only."""
    digest = hashlib.sha256()
    for view, (pattern, _) in sorted(LAKE_VIEWS.items()):
        for path in sorted(Path(lake).glob(pattern)):
            st = path.stat()
            digest.update(f"{path.relative_to(lake)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return digest.hexdigest()[:16]


@contextmanager
def open_build_db(warehouse: Path, read_only: bool = False, timeout: float = 600) -> Iterator[duckdb.DuckDBPyConnection]:
    """The build database, held under a cross-process lock so that one writer at a time touches it."""
    folder = build_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / "db.lock")
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise WarehouseBusy(f"the build database in {folder} stayed locked by another build for {timeout:.0f} s") from None
    try:
        path = folder / "build.duckdb"
        con = duckdb.connect(str(path), read_only=read_only and path.exists())
        try:
            if not read_only:
                con.execute(
                    "create table if not exists _model_state"
                    " (model varchar primary key, fingerprint varchar, built_at timestamptz)"
                )
            yield con
        finally:
            con.close()
    finally:
        lock.release()


def model_fingerprint(con: duckdb.DuckDBPyConnection, model: str) -> str | None:
    row = con.execute("select fingerprint from _model_state where model = ?", [model]).fetchone()
    return row[0] if row else None


def record_model(con: duckdb.DuckDBPyConnection, model: str, fingerprint: str) -> None:
    con.execute("insert or replace into _model_state values (?, ?, now())", [model, fingerprint])


def publish(warehouse: Path) -> Path:
    """Copies the build database to warehouse.duckdb by atomic rename, so readers see either the old or the new one.

    Takes the build lock itself: call it outside open_build_db's block.
    """
    folder = build_dir(warehouse)
    target = published_path(warehouse)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with FileLock(folder / "db.lock"):
        shutil.copyfile(folder / "build.duckdb", tmp)
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, target)
    return target
