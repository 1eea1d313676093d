"""The code location: loads every asset, check, job, sensor and schedule under defs/, and sets automation, owners
and domains once."""

import functools
import warnings
from pathlib import Path

import dagster as dg

from pipelines.defs.ingest.partitions import REFRESHES_TAG
from pipelines.defs.ingest.sensors import ingest_runs_job, ingest_runs_job_on, release_files_sensor
from pipelines.defs.resources import WarehouseConfig

# The SQL models and exports follow their inputs by themselves: when an upstream asset (a lake partition, another
# model) is materialized with a new data version, they are requested too, once nothing upstream is missing or in
# progress. Eager, except that an upstream materialization that changed nothing (same data version: a model whose
# inputs were unchanged, a lake partition with no new file) requests nothing downstream.
AUTOMATED_GROUPS = ("models", "exports")
AUTOMATION_INTERVAL_SECONDS = 30
ANY_DEPS_CHANGED = dg.AutomationCondition.any_deps_match(
    (dg.AutomationCondition.data_version_changed() & ~dg.AutomationCondition.executed_with_root_target())
    | dg.AutomationCondition.will_be_requested()
).with_label("any_deps_changed")
# And a new code version (code_versions): after a change to the code that makes them, they are made again.
ON_CHANGE = dg.AutomationCondition.eager().replace(
    "any_deps_updated", ANY_DEPS_CHANGED | dg.AutomationCondition.code_version_changed()
)


# Who answers for the data, and which domain of it an asset belongs to, by group: the catalog filters on both.
OWNERS = ["team:rl-research"]
DOMAINS = {"ingest": "lake", "models": "warehouse", "exports": "exports"}


def _apply_policies(spec: dg.AssetSpec) -> dg.AssetSpec:
    if spec.group_name in AUTOMATED_GROUPS and spec.automation_condition is None:
        spec = spec.replace_attributes(automation_condition=ON_CHANGE)
    return spec.merge_attributes(
        owners=[] if spec.owners else OWNERS,
        tags={"domain": DOMAINS[spec.group_name]} if spec.group_name in DOMAINS else {},
    )


automation_sensor = dg.AutomationConditionSensorDefinition(
    "models_and_exports_automation",
    target=dg.AssetSelection.groups(*AUTOMATED_GROUPS),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=AUTOMATION_INTERVAL_SECONDS,
    description=f"Every {AUTOMATION_INTERVAL_SECONDS} s, requests the SQL models and exports whose inputs changed "
    "(a new data version upstream) or whose code changed (a new code version): an upstream materialization that "
    "changed nothing requests nothing.",
    run_tags={REFRESHES_TAG: "the models and exports whose inputs changed"},
)


def build_definitions(config: WarehouseConfig, run_partitions: bool = True) -> dg.Definitions:
    """Every definition under defs/, with the one configuration as the `warehouse` resource; without run_partitions,
    the lake of runs is not partitioned (ingest_assets.unpartitioned_run_lake: a build on a throwaway instance)."""
    loaded = _defs_folder()
    if not run_partitions:
        loaded = _with_assets(loaded, [_unpartitioned(asset) for asset in loaded.assets or []])
    # map_asset_specs is the documented way to apply one policy to every asset; it is marked preview in 1.13.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        automated = loaded.map_asset_specs(func=_apply_policies)
    # Every run executes its steps in one process: the model steps take turns anyway (pool "duckdb_writer",
    # one slot) and ingest spreads over cores itself, so a process per step only added its start-up (seconds per
    # step, a minute per "Materialize all" of the ~25 steps) without any parallelism to show for it.
    ingest_job = ingest_runs_job
    if config.executor == "dask":
        automated, ingest_job = _distributed(automated, config)
    return dg.Definitions.merge(
        automated,
        dg.Definitions(
            sensors=[automation_sensor, release_files_sensor(config.sensor_interval_seconds, ingest_job)],
            resources={"warehouse": config},
            executor=dg.in_process_executor,
        ),
    )


@functools.cache
def _defs_folder() -> dg.Definitions:
    """The definitions under defs/, loaded once per process as a code server does: they follow from the code alone
    (the configuration is bound afterwards), and walking the folder costs about 0.3 s of each build."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent / "defs")


def _distributed(loaded: dg.Definitions, config: WarehouseConfig) -> tuple[dg.Definitions, object]:
    """The definitions with the run partitions spread out: ingest_runs' steps run on the Dask cluster, and a backfill
    of the lake becomes Dagster runs of partitions_per_run partitions each. Every other job keeps the in-process
    executor: the models write one DuckDB file, on this node, one step at a time (pool duckdb_writer), which the Dask
    executor does not enforce."""
    from pipelines.distributed import dask_cluster_executor

    executor = dask_cluster_executor.configured({"address": config.dask_address}, name="dask_executor")
    ingest_job = ingest_runs_job_on(executor)
    policy = dg.BackfillPolicy.multi_run(config.partitions_per_run)
    assets = [
        asset.with_attributes(backfill_policy=policy)
        if isinstance(asset, dg.AssetsDefinition) and asset.partitions_def is not None
        else asset
        for asset in loaded.assets or []
    ]
    jobs = [ingest_job if job.name == ingest_job.name else job for job in loaded.jobs or []]
    return _with_assets(loaded, assets, jobs), ingest_job


def _unpartitioned(asset):
    """The lake of runs without its run partitions (ingest_assets.unpartitioned_run_lake); any other asset itself."""
    from pipelines.defs.ingest import assets as ingest_assets

    if isinstance(asset, dg.AssetsDefinition) and asset.keys == ingest_assets.run_lake.keys:
        return ingest_assets.unpartitioned_run_lake()
    return asset


def _with_assets(loaded: dg.Definitions, assets: list, jobs: list | None = None) -> dg.Definitions:
    """The definitions with these assets (and jobs) in place of their own."""
    return dg.Definitions(
        assets=assets,
        asset_checks=loaded.asset_checks,
        jobs=loaded.jobs if jobs is None else jobs,
        schedules=loaded.schedules,
        sensors=loaded.sensors,
        resources=loaded.resources,
        loggers=loaded.loggers,
    )


def ingest_job_for(config: dict) -> dg.JobDefinition:
    """The ingest_runs job of the definitions for a configuration's fields: how a Dask worker rebuilds the job
    (dagster.build_reconstructable_job) with the same configuration as the build that submitted its step."""
    return build_definitions(WarehouseConfig(**config)).resolve_job_def(ingest_runs_job.name)


@dg.definitions
def defs() -> dg.Definitions:
    """The code location `dg dev` loads: configured from the environment (WarehouseConfig.from_env)."""
    return build_definitions(WarehouseConfig.from_env())
