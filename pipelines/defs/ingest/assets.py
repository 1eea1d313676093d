"""Assets that scan the releases and flatten each run's epoch files into the Parquet lake."""

import time
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import polars as pl

from pipelines.defs.ingest.partitions import run_partitions
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake import (
    ERROR_COLUMNS, FILE_COLUMNS, gone_runs, ingest_runs, partition_file, read_parquet, remove_run, write_atomically,
)
from pipelines.release.discover import find_run_folders
from pipelines.release.registry import build_dim_runs
from pipelines.warehouse_db import lake_dir

PROGRESS_SECONDS = 1.0  # at most one progress line a second from run_lake, besides the first, last and troubled
RUN_TABLES = {
    "epochs": "One row per loaded epoch document, scalar extras as columns.",
    "trajectories": "One row per trajectory of a loaded epoch document, per-trajectory extras as columns.",
    "errors": "Problems found in a run's files: quarantined documents and warnings.",
    "files": "Inventory of every file in a run folder: loaded, quarantined or skipped, with the reason.",
}
RELEASE_TABLES = {
    "runs": "The run folders found in the releases, with their registry attributes.",
    "release_files": "Entries at release roots that are not run folders.",
    "release_errors": "Problems with the releases themselves: missing folders, duplicate run ids, links out.",
}


def column_schema(schema: Mapping[str, pl.DataType]) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name, str(dtype)) for name, dtype in schema.items()])


@dg.multi_asset(
    specs=[
        dg.AssetSpec(["lake", name], description=text, kinds={"parquet"}, group_name="ingest")
        for name, text in RELEASE_TABLES.items()
    ],
)
def release_runs(context: dg.AssetExecutionContext, warehouse: WarehouseConfig):
    """Scans the release folders for run folders and resolves each run's attributes."""
    lake = lake_dir(warehouse.warehouse)
    runs, root_entries, problems = find_run_folders(warehouse.release_roots())
    for problem in problems:
        context.log.warning(problem)
    dim = build_dim_runs(list(runs.values()), [Path(p) for p in warehouse.registries])
    errors = pl.DataFrame(
        [{"run_id": None, "source_path": s.source_path, "epoch": None, "error_kind": s.error_kind or "bad_entry",
          "severity": "error", "message": s.reason, "action": "skipped: not opened"}
         for s in root_entries if s.is_problem]
        + [{"run_id": None, "source_path": None, "epoch": None, "error_kind": "release_problem", "severity": "error",
            "message": p, "action": "skipped"} for p in problems],
        schema=ERROR_COLUMNS,
    )
    files = pl.DataFrame(
        [{"run_id": None, "source_path": s.source_path, "status": "skipped", "reason": s.reason} for s in root_entries],
        schema=FILE_COLUMNS,
    )
    # A run whose folder is gone leaves the lake, and so the warehouse.
    for run_id in gone_runs(lake, runs):
        context.log.info(f"run {run_id} no longer exists in any release; removing it from the lake")
        remove_run(lake, run_id)
    for name, frame in (("runs", dim), ("release_files", files), ("release_errors", errors)):
        path = lake / f"{name}.parquet"
        # Rewriting an unchanged file would change its mtime, and so make every model downstream rebuild.
        if not (path.exists() and read_parquet(path).equals(frame)):
            write_atomically(frame, path)
        yield dg.MaterializeResult(
            asset_key=["lake", name],
            metadata={"dagster/row_count": frame.height, "dagster/column_schema": column_schema(frame.schema)},
        )


@dg.multi_asset(
    specs=[
        dg.AssetSpec(["lake", name], description=text, kinds={"parquet", "polars"}, group_name="ingest")
        for name, text in RUN_TABLES.items()
    ],
    partitions_def=run_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def run_lake(context: dg.AssetExecutionContext, warehouse: WarehouseConfig):
    """Flattens each selected run's new or changed epoch files into the lake's Parquet partitions."""
    lake = lake_dir(warehouse.warehouse)
    runs, _, _ = find_run_folders(warehouse.release_roots())
    selected = context.partition_keys
    gone = [key for key in selected if key not in runs]
    for key in gone:
        context.log.info(f"run {key} no longer exists in any release; removing it from the lake")
        remove_run(lake, key)

    last_line = [0.0]  # when the last progress line was logged (time.monotonic)

    def progress(result, done: int, total: int) -> None:
        # Changed runs only, and of those the first, the last, any with a quarantined file and otherwise one every
        # PROGRESS_SECONDS: every log line is an event Dagster stores (milliseconds each, seconds at 500 runs); the
        # unchanged runs are counted once below.
        now = time.monotonic()
        if result.changed and (done in (1, total) or result.files_quarantined
                               or now - last_line[0] >= PROGRESS_SECONDS):
            last_line[0] = now
            context.log.info(
                f"[{done}/{total}] {result.run_id}: {result.files_parsed} file(s) parsed, {result.epochs} epochs, "
                f"{result.files_quarantined} quarantined ({result.seconds:.2f} s)"
            )

    # Every selected run is listed in full (full_scan): a run is selected because something asked for it (the
    # build's own check, the sensor, the nightly refresh, a click), and a file rewritten in place changes no folder.
    results = ingest_runs(
        [runs[key] for key in selected if key in runs], lake, warehouse.max_file_bytes, warehouse.workers, progress,
        full_scan=True,
    )
    unchanged = [r for r in results if not r.changed]
    if unchanged:
        context.log.info(
            f"{len(unchanged)} of {len(results)} run(s) unchanged, nothing parsed: "
            f"{sum(r.epochs for r in unchanged)} epochs, {sum(r.files_quarantined for r in unchanged)} quarantined"
        )
    totals = {
        "runs": len(results),
        "runs_changed": sum(r.changed for r in results),
        "files_parsed": sum(r.files_parsed for r in results),
        "files_quarantined": sum(r.files_quarantined for r in results),
        "epochs": sum(r.epochs for r in results),
        "trajectories": sum(r.trajectories for r in results),
    }
    rows = {"epochs": totals["epochs"], "trajectories": totals["trajectories"]}
    for name in RUN_TABLES:
        metadata = {f"grpo/{k}": v for k, v in totals.items()}
        # Dagster copies this metadata onto each selected partition's materialization. A row count and a column
        # schema are only a partition's own for one run (runs have their own extra columns); for many, the schema
        # alone was most of the cost of recording them (a few milliseconds a partition and table).
        if name in rows and len(results) == 1:
            metadata["dagster/row_count"] = rows[name]
        sample = partition_file(lake, name, results[0].run_id) if len(results) == 1 else None
        if sample is not None and sample.exists():
            metadata["dagster/column_schema"] = column_schema(pl.scan_parquet(sample, glob=False, hive_partitioning=False).collect_schema())
        yield dg.MaterializeResult(asset_key=["lake", name], metadata=metadata)
