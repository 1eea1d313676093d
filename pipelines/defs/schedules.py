"""The nightly refresh of the whole warehouse: every run partition, every model, every export."""

import dagster as dg

from pipelines.defs import jobs
from pipelines.defs.ingest.partitions import REFRESHES_TAG, all_runs_tags, run_partitions

NIGHTLY_CRON = "0 3 * * *"


@dg.schedule(
    cron_schedule=NIGHTLY_CRON,
    target=jobs.refresh_warehouse,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    execution_timezone="UTC",
    description="Refreshes the whole warehouse each night at 03:00 UTC: every run partition listed in full (finding "
    "a file rewritten in place in a quiet run, which the sensor does not list), then every model and "
    "export, which are kept when their inputs did not change.",
)
def nightly_refresh(context: dg.ScheduleEvaluationContext):
    """Refreshes every asset each night at 03:00 UTC, over every run partition known then."""
    keys = context.instance.get_dynamic_partitions(run_partitions.name)
    if not keys:
        return dg.SkipReason("no run partitions yet: the release sensor adds one per run folder it finds")
    # One run over the whole partition range: run_lake ingests all runs in one step (BackfillPolicy.single_run).
    return dg.RunRequest(
        tags={**all_runs_tags(keys), REFRESHES_TAG: f"everything: {len(keys)} run partition(s), every model and export"}
    )
