"""The scale-out configuration: the Dask executor and the partitions per run it is given, and its refusals."""

import pytest

from pipelines.build import _pieces
from pipelines.definitions import build_definitions
from pipelines.defs.resources import WarehouseConfig
from pipelines.settings import ConfigError


def test_dask_needs_a_scheduler_address(tmp_path):
    with pytest.raises(ConfigError, match="GRPO_DASK_ADDRESS"):
        WarehouseConfig.from_env({"GRPO_EXECUTOR": "dask", "GRPO_WAREHOUSE_DIR": str(tmp_path)})
    with pytest.raises(ConfigError, match="GRPO_EXECUTOR"):
        WarehouseConfig.from_env({"GRPO_EXECUTOR": "kubernetes", "GRPO_WAREHOUSE_DIR": str(tmp_path)})


def test_dask_executor_runs_the_ingest_only_in_runs_of_n_partitions(tmp_path):
    config = WarehouseConfig.from_env(
        {
            "GRPO_EXECUTOR": "dask",
            "GRPO_DASK_ADDRESS": "tcp://127.0.0.1:8786",
            "GRPO_PARTITIONS_PER_RUN": "7",
            "GRPO_WAREHOUSE_DIR": str(tmp_path),
        }
    )
    definitions = build_definitions(config)
    assert definitions.resolve_job_def("ingest_runs").executor_def.name == "dask_executor"
    # The models write one DuckDB file: every other job stays in this process.
    assert definitions.resolve_job_def("refresh_warehouse").executor_def.name == "in_process"
    assert definitions.resolve_job_def("scan_releases").executor_def.name == "in_process"
    graph = definitions.resolve_asset_graph()
    policies = {graph.get(key).backfill_policy for key in graph.get_all_asset_keys() if graph.get(key).partitions_def}
    assert [policy.max_partitions_per_run for policy in policies] == [7]

    local = build_definitions(WarehouseConfig.from_env({"GRPO_WAREHOUSE_DIR": str(tmp_path)}))
    assert local.resolve_job_def("ingest_runs").executor_def.name == "in_process"
    graph = local.resolve_asset_graph()
    assert {
        graph.get(key).backfill_policy.max_partitions_per_run
        for key in graph.get_all_asset_keys()
        if graph.get(key).partitions_def
    } == {None}


def test_pieces_cut_a_block_into_ranges_of_at_most_n():
    keys = [f"k{i}" for i in range(7)]
    assert _pieces(keys, 3) == [["k0", "k1", "k2"], ["k3", "k4", "k5"], ["k6"]]
    assert _pieces(keys, 7) == [keys]
