"""Assets that scan the releases and flatten each run's epoch files into the Parquet lake."""

import hashlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import dagster as dg
import polars as pl

from pipelines.code_versions import code_version
from pipelines.defs.ingest.partitions import THROWAWAY_TAG, partition_key, run_partitions, runs_by_partition
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.inventory import ERROR_COLUMNS, FILE_COLUMNS
from pipelines.lake.manifest import RunIngestResult, lake_version
from pipelines.lake.parquet import count_rows, parquet_schema, read_parquet, write_atomically
from pipelines.lake.paths import gone_runs, lake_runs, partition_file, remove_run
from pipelines.lake.runs import ingest_runs
from pipelines.lake_store import LakePath, file_stamp
from pipelines.release.registry import build_dim_runs, unmatched_registry_rows
from pipelines.removals import check_removals

# The release tables are made again by every scan (and written when they differ): their code version is this module's.
CODE_VERSION = code_version(__name__)
PROGRESS_SECONDS = 1.0  # at most one progress line a second from run_lake, besides the first, last and troubled
RUN_TABLES = {
    "epochs": "One row per loaded epoch document, scalar extras as columns.",
    "trajectories": "One row per trajectory of a loaded epoch document, per-trajectory extras as columns.",
    "errors": "Problems found in a run's files: quarantined documents and warnings.",
    "files": "Inventory of every file in a run folder: loaded, quarantined or skipped, with the reason.",
    "transcripts": "One row per transcript record of a run: its trajectory id, file and place, and what it holds.",
}
RELEASE_TABLES = {
    "runs": "The run folders found in the releases, with their registry attributes.",
    "release_files": "Entries at release roots that are not run folders.",
    "release_errors": "Problems with the releases themselves: missing folders, duplicate run ids, links out.",
}


def column_schema(schema: Mapping[str, pl.DataType]) -> dg.TableSchema:
    return dg.TableSchema(columns=[dg.TableColumn(name, str(dtype)) for name, dtype in schema.items()])


def frame_version(frame: pl.DataFrame) -> dg.DataVersion:
    """A digest of a frame's schema and rows: the same rows give the same version, so nothing downstream follows."""
    digest = hashlib.sha256(repr(frame.schema).encode())
    digest.update(frame.hash_rows(seed=0).to_numpy().tobytes())
    return dg.DataVersion(digest.hexdigest()[:16])


def partitions_version(lake: LakePath, table: str, run_ids: list[str]) -> dg.DataVersion:
    """A digest of the given runs' partition files of a lake table (lake_store.file_stamp): unchanged while none of
    them is rewritten, which an ingest that finds nothing new does not do."""
    stamps = []
    for run_id in sorted(run_ids):
        stamps.append(f"{run_id}:{file_stamp(partition_file(lake, table, run_id)) or '-'}")
    return dg.DataVersion(hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:16])


def release_problems(root_entries: list, problems: list[str], unused_rows: list[str]) -> pl.DataFrame:
    """The rows of lake.release_errors: bad entries at release roots, problems of the releases themselves, and the
    registry rows that name no run."""

    def problem(kind: str, severity: str, message: str, action: str, source_path: str | None = None) -> dict:
        return {
            "run_id": None,
            "source_path": source_path,
            "epoch": None,
            "error_kind": kind,
            "severity": severity,
            "message": message,
            "action": action,
        }

    rows = [
        problem(s.error_kind or "bad_entry", "error", s.reason, "skipped: not opened", s.source_path)
        for s in root_entries
        if s.is_problem
    ]
    rows += [problem("release_problem", "error", p, "skipped") for p in problems]
    rows += [problem("registry_row_unused", "warning", p, "not used") for p in unused_rows]
    return pl.DataFrame(rows, schema=ERROR_COLUMNS)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            ["lake", name],
            description=text,
            kinds={"parquet"},
            group_name="ingest",
            code_version=CODE_VERSION,
        )
        for name, text in RELEASE_TABLES.items()
    ],
)
def release_runs(context: dg.AssetExecutionContext, warehouse: WarehouseConfig):
    """Scans the release folders for run folders and resolves each run's attributes."""
    lake = warehouse.lake
    runs, root_entries, problems = warehouse.find_runs()
    check_removals(warehouse.release_roots(), runs, lake, warehouse.remove_releases)
    for problem in problems:
        context.log.warning(problem)
    registries = [Path(p) for p in warehouse.registries]
    dim = build_dim_runs(list(runs.values()), registries)
    unused_rows = unmatched_registry_rows(list(runs.values()), registries)
    for problem in unused_rows:
        context.log.warning(problem)
    errors = release_problems(root_entries, problems, unused_rows)
    files = pl.DataFrame(
        [{"run_id": None, "source_path": s.source_path, "status": "skipped", "reason": s.reason} for s in root_entries],
        schema=FILE_COLUMNS,
    )
    # A run whose folder is gone from a release that still shows runs leaves the lake, and so the warehouse.
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
            data_version=frame_version(frame),
        )


def run_lake_specs() -> list[dg.AssetSpec]:
    """The lake's tables of runs, with the lake's own code version, which its manifests record: partitions of other
    code are parsed again. (A function: a list of specs in a module of defs/ would be loaded as assets of their own.)"""
    return [
        dg.AssetSpec(
            ["lake", name],
            description=text,
            kinds={"parquet", "polars"},
            group_name="ingest",
            code_version=lake_version(),
        )
        for name, text in RUN_TABLES.items()
    ]


@dg.multi_asset(specs=run_lake_specs(), partitions_def=run_partitions, backfill_policy=dg.BackfillPolicy.single_run())
def run_lake(context: dg.AssetExecutionContext, warehouse: WarehouseConfig):
    """Flattens each selected run's new or changed epoch files into the lake's Parquet partitions."""
    per_partition = context.run.tags.get(THROWAWAY_TAG) != "true"
    yield from ingest_partitions(context, warehouse, context.partition_keys, per_partition)


class RunsToIngest(dg.Config):
    """The run partitions, by key, that the unpartitioned run_lake of a build on a throwaway instance ingests."""

    partition_keys: list[str] = []


def unpartitioned_run_lake() -> dg.AssetsDefinition:
    """run_lake for a build whose Dagster instance is thrown away after it: the same tables and ingest, over the runs
    its config names, without a partition per run. Dagster records a few events for each partition a run covers
    (milliseconds each: over a minute at 3,000 runs), which nothing reads once such an instance is gone."""

    @dg.multi_asset(specs=run_lake_specs(), name=run_lake.node_def.name)
    def unpartitioned(context: dg.AssetExecutionContext, warehouse: WarehouseConfig, config: RunsToIngest):
        """Flattens the given runs' new or changed epoch files into the lake's Parquet partitions."""
        yield from ingest_partitions(context, warehouse, config.partition_keys, per_partition=False)

    return unpartitioned


def ingest_partitions(context: dg.AssetExecutionContext, warehouse: WarehouseConfig, keys, per_partition: bool):
    """run_lake's work over the given run partition keys: the runs ingested, those gone from the releases removed
    from the lake; per_partition: each partition's own numbers recorded on its materialization."""
    lake = warehouse.lake
    runs, _, _ = warehouse.find_runs()
    by_key = runs_by_partition(runs)
    selected = [by_key[key] for key in keys if key in by_key]
    gone_keys = set(keys) - set(by_key)
    gone = [run_id for key, run_id in runs_by_partition(lake_runs(lake)).items() if key in gone_keys]
    if gone:
        check_removals(warehouse.release_roots(), runs, lake, warehouse.remove_releases)
    for run_id in gone:
        context.log.info(f"run {run_id} no longer exists in any release; removing it from the lake")
        remove_run(lake, run_id)
    # Every selected run is listed in full (full_scan): a run is selected because something asked for it (the
    # build's own check, the sensor, the nightly refresh, a click), and a file rewritten in place changes no folder.
    results = ingest_runs(
        [runs[run_id] for run_id in selected],
        lake,
        warehouse.max_file_bytes,
        warehouse.workers,
        _progress_lines(context),
        full_scan=True,
        quiet_seconds=warehouse.quiet_seconds,
        transcript_text=warehouse.transcript_text,
    )
    unchanged = [r for r in results if not r.changed]
    if unchanged:
        context.log.info(
            f"{len(unchanged)} of {len(results)} run(s) unchanged, nothing parsed: "
            f"{sum(r.epochs for r in unchanged)} epochs, {sum(r.files_quarantined for r in unchanged)} quarantined"
        )
    warn_quarantined(context, lake, [r for r in results if r.changed and r.files_quarantined])
    if per_partition:
        for result in results:
            partition_metadata(context, lake, result)
        for key in sorted(gone_keys):
            for name in RUN_TABLES:
                context.add_asset_metadata({"grpo/removed": True}, asset_key=["lake", name], partition_key=key)
    yield from _table_results(lake, results, selected)


def _progress_lines(context: dg.AssetExecutionContext):
    """The ingest's progress callback: a line for the changed runs only, and of those the first, the last, any with a
    quarantined file and otherwise one every PROGRESS_SECONDS. Every log line is an event Dagster stores
    (milliseconds each, seconds at 500 runs); the unchanged runs are counted once by the caller."""
    last_line = [0.0]  # when the last progress line was logged (time.monotonic)

    def progress(result, done: int, total: int) -> None:
        now = time.monotonic()
        if result.changed and (
            done in (1, total) or result.files_quarantined or now - last_line[0] >= PROGRESS_SECONDS
        ):
            last_line[0] = now
            context.log.info(
                f"[{done}/{total}] {result.run_id}: {result.files_parsed} file(s) parsed, {result.epochs} epochs, "
                f"{result.files_quarantined} quarantined ({result.seconds:.2f} s)"
            )

    return progress


def _table_results(
    lake: LakePath, results: list[RunIngestResult], selected: list[str]
) -> Iterator[dg.MaterializeResult]:
    """One result per lake table: its data version over the selected runs' partitions, and its column schema when a
    single run was ingested."""
    for name in RUN_TABLES:
        metadata = {}
        # A column schema is only a partition's own for one run (runs have their own extra columns), and Dagster
        # copies it onto each selected partition's materialization: for many, most of the cost of recording them.
        sample = partition_file(lake, name, results[0].run_id) if len(results) == 1 else None
        if sample is not None and sample.exists():
            metadata["dagster/column_schema"] = column_schema(parquet_schema(sample))
        # One version for every partition of the run (Dagster stores one per output): a run over one partition,
        # as the sensor launches, gives that partition's own.
        yield dg.MaterializeResult(
            asset_key=["lake", name], metadata=metadata, data_version=partitions_version(lake, name, selected)
        )


def partition_metadata(context: dg.AssetExecutionContext, lake: LakePath, result) -> None:
    """Each run partition's own numbers, on its own materialization, however many partitions the run covered."""
    own = {
        "grpo/changed": result.changed,
        "grpo/files_parsed": result.files_parsed,
        "grpo/files_quarantined": result.files_quarantined,
        "grpo/epochs": result.epochs,
        "grpo/trajectories": result.trajectories,
    }
    counted = {"epochs": result.epochs, "trajectories": result.trajectories}
    for name in RUN_TABLES:
        path = partition_file(lake, name, result.run_id)
        rows = counted.get(name)
        if rows is None:  # from the Parquet footer
            rows = count_rows(path)
        context.add_asset_metadata(
            {**own, "dagster/row_count": rows}, asset_key=["lake", name], partition_key=partition_key(result.run_id)
        )


def warn_quarantined(context: dg.AssetExecutionContext, lake: LakePath, results) -> None:
    """A warning per run whose newly read files were quarantined, naming them and what is wrong (see ingest_errors)."""
    for result in results:
        errors = read_parquet(partition_file(lake, "errors", result.run_id)).filter(pl.col("severity") == "error")
        named = "; ".join(f"{row['source_path']}: {row['message']}" for row in errors.head(5).iter_rows(named=True))
        context.log.warning(
            f"{result.run_id}: {result.files_quarantined} file(s) quarantined, not loaded: {named}"
            + ("; ..." if errors.height > 5 else "")
        )
