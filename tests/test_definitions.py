"""The code location loads, and its graph has every table of the public contract."""

import dagster as dg

from pipelines.definitions import defs

CONTRACT_TABLES = ["fact_epochs", "fact_trajectories", "dim_runs", "ingest_errors"]


def test_definitions_load_with_the_contract_tables():
    definitions = defs()
    keys = {key.to_user_string() for key in definitions.resolve_all_asset_keys()}
    for table in CONTRACT_TABLES:
        assert table in keys
    assert definitions.resolve_job_def("refresh_warehouse") is not None


def test_model_dependencies_come_from_the_sql():
    graph = defs().resolve_asset_graph()
    assert dg.AssetKey("fact_epochs") in graph.get(dg.AssetKey("fact_trajectories")).parent_keys
    assert dg.AssetKey(["lake", "trajectories"]) in graph.get(dg.AssetKey("fact_trajectories")).parent_keys
    assert dg.AssetKey(["lake", "runs"]) in graph.get(dg.AssetKey("dim_runs")).parent_keys
