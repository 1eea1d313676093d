"""One partition per training run, added as run folders are found."""

import dagster as dg

run_partitions = dg.DynamicPartitionsDefinition(name="run_id")


def all_runs_tags(keys: list[str]) -> dict[str, str]:
    """Run tags selecting every run partition, first to last, for one run (run_lake's single-run backfill policy)."""
    return {"dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]}
