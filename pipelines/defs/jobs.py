"""The job that refreshes the whole warehouse: every asset, in dependency order."""

import dagster as dg

refresh_warehouse = dg.define_asset_job(
    "refresh_warehouse",
    selection=dg.AssetSelection.all(),
    description="Everything at once: scans the releases, ingests every selected run partition (new or changed files "
    "only), rebuilds the models and exports whose inputs changed. The nightly_refresh schedule and "
    "`grpo-warehouse build` run it; between them, release_files_sensor ingests changed runs (jobs "
    "scan_releases and ingest_runs) and the models_and_exports_automation sensor rebuilds what follows "
    "(each model and export has an eager automation condition, so this job's page shows none of its own).",
)
