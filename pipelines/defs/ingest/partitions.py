"""One partition per training run, added as run folders are found."""

import dagster as dg

from pipelines.lake.paths import run_key

run_partitions = dg.DynamicPartitionsDefinition(name="run_id")
REFRESHES_TAG = "grpo/refreshes"  # a run's tag saying what it refreshes, in words
# A run's tag saying its events are thrown away after it (the CLI build's own instance): run_lake records no
# per-partition numbers then, which cost Dagster about 8 ms a partition (4 s at 500 runs) for no reader.
THROWAWAY_TAG = "grpo/throwaway_instance"
# What Dagster refuses in a partition key (dagster's INVALID_PARTITION_SUBSTRINGS): a run folder may hold any of them.
NOT_IN_PARTITION_KEYS = ("...", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")


def partition_key(run_id: str) -> str:
    """A run's partition key: its run id, or the lake's key for it (lake.run_key) when Dagster would refuse the id
    as a key (a newline, a tab, `...` in a folder name)."""
    return run_key(run_id) if any(part in run_id for part in NOT_IN_PARTITION_KEYS) else run_id


def runs_by_partition(run_ids) -> dict[str, str]:
    """Partition key -> run id, for the given run ids."""
    return {partition_key(run_id): run_id for run_id in run_ids}


def all_runs_tags(keys: list[str]) -> dict[str, str]:
    """Run tags selecting every run partition, first to last, for one run (run_lake's single-run backfill policy)."""
    return run_range_tags(keys[0], keys[-1])


def run_range_tags(first: str, last: str) -> dict[str, str]:
    """Run tags selecting the run partitions from first to last, in the instance's order, for one run."""
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
