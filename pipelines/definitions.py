"""The code location: loads every asset, check, job, sensor and schedule under defs/, and sets automation once."""

import warnings
from pathlib import Path

import dagster as dg

# The SQL models and exports follow their inputs by themselves: whenever an upstream asset (a lake partition,
# another model) is materialized, they are requested too, once nothing upstream is missing or in progress.
AUTOMATED_GROUPS = ("models", "exports")
AUTOMATION_INTERVAL_SECONDS = 30


def _automate(spec: dg.AssetSpec) -> dg.AssetSpec:
    if spec.group_name in AUTOMATED_GROUPS and spec.automation_condition is None:
        return spec.replace_attributes(automation_condition=dg.AutomationCondition.eager())
    return spec


automation_sensor = dg.AutomationConditionSensorDefinition(
    "models_and_exports_automation",
    target=dg.AssetSelection.groups(*AUTOMATED_GROUPS),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=AUTOMATION_INTERVAL_SECONDS,
    description="Rebuilds the SQL models and exports whose inputs were updated.",
)


@dg.definitions
def defs() -> dg.Definitions:
    loaded = dg.load_from_defs_folder(path_within_project=Path(__file__).parent / "defs")
    # map_asset_specs is the documented way to apply one policy to every asset; it is marked preview in 1.13.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        automated = loaded.map_asset_specs(func=_automate)
    # Every run executes its steps in one process: the model steps take turns anyway (pool "duckdb_writer",
    # one slot) and ingest spreads over cores itself, so a process per step only added its start-up (seconds per
    # step, a minute per "Materialize all" of the ~25 steps) without any parallelism to show for it.
    return dg.Definitions.merge(
        automated, dg.Definitions(sensors=[automation_sensor], executor=dg.in_process_executor)
    )
