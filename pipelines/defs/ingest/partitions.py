"""One partition per training run, added as run folders are found."""

import dagster as dg

run_partitions = dg.DynamicPartitionsDefinition(name="run_id")
