"""One partition per training run, added as run folders are found."""

import dagster as dg

run_partitions = dg.DynamicPartitionsDefinition(name="run_id")
REFRESHES_TAG = "grpo/refreshes"  # a run's tag saying what it refreshes, in words


def all_runs_tags(keys: list[str]) -> dict[str, str]:
    """Run tags selecting every run partition, first to last, for one run (run_lake's single-run backfill policy)."""
    return run_range_tags(keys[0], keys[-1])


def run_range_tags(first: str, last: str) -> dict[str, str]:
    """Run tags selecting the run partitions from first to last, in the instance's order, for one run."""
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
