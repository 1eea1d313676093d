"""The job that refreshes the whole warehouse: every asset, in dependency order."""

import dagster as dg

refresh_warehouse = dg.define_asset_job(
    "refresh_warehouse",
    selection=dg.AssetSelection.all(),
    description="Scans the releases, ingests new or changed epoch files, rebuilds the models and exports.",
)
