"""The code location loads, and its graph has every table of the public contract."""

from pathlib import Path

import dagster as dg
import pytest

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


def test_the_catalog_declares_columns_lineage_owners_and_code_references():
    graph = defs().resolve_asset_graph()
    fact_epochs = graph.get(dg.AssetKey("fact_epochs"))
    columns = {c.name: c for c in fact_epochs.metadata["dagster/column_schema"].columns}
    assert columns["epoch"].description == "The training epoch (the document's `epoch`)."
    assert columns["run_id"].constraints.nullable is False
    lineage = graph.get(dg.AssetKey("dim_runs")).metadata["dagster/column_lineage"].deps_by_column
    assert lineage["group_size"] == [
        dg.TableColumnDep(asset_key=dg.AssetKey(["lake", "runs"]), column_name="group_size")
    ]
    trajectories = graph.get(dg.AssetKey("fact_trajectories")).metadata["dagster/column_lineage"].deps_by_column
    assert "group_index" not in trajectories and "reward" in trajectories  # computed, not passed through
    references = fact_epochs.metadata["dagster/code_references"].code_references
    assert [Path(r.file_path).name for r in references] == ["fact_epochs.sql", "schema.yml"]
    for key in graph.get_all_asset_keys():
        assert graph.get(key).owners and graph.get(key).tags.get("domain"), key
    assert graph.get(dg.AssetKey("warehouse_duckdb")).freshness_policy is not None


@pytest.mark.parametrize("partitioned", [False, True])
def test_downstream_follows_a_new_data_version_only(partitioned):
    """The models' and exports' automation condition, on a two-asset graph: upstream materialized again with the
    same data version requests nothing downstream; with a new one, downstream is requested."""
    from pipelines.definitions import ON_CHANGE

    runs = dg.DynamicPartitionsDefinition(name="runs") if partitioned else None
    version = {"value": "1"}

    @dg.asset(partitions_def=runs)
    def upstream() -> dg.MaterializeResult:
        return dg.MaterializeResult(data_version=dg.DataVersion(version["value"]))

    @dg.asset(deps=[upstream], automation_condition=ON_CHANGE)
    def downstream() -> None:
        pass

    def materialize_upstream():
        assert dg.materialize([upstream], instance=instance, partition_key="run_a" if partitioned else None).success

    with dg.DagsterInstance.ephemeral() as instance:
        if partitioned:
            instance.add_dynamic_partitions("runs", ["run_a"])
        materialize_upstream()
        assert dg.materialize([downstream], instance=instance).success
        first = dg.evaluate_automation_conditions(defs=[upstream, downstream], instance=instance)
        materialize_upstream()  # nothing changed
        second = dg.evaluate_automation_conditions(defs=[upstream, downstream], instance=instance, cursor=first.cursor)
        assert second.total_requested == 0
        version["value"] = "2"
        materialize_upstream()
        third = dg.evaluate_automation_conditions(defs=[upstream, downstream], instance=instance, cursor=second.cursor)
        assert third.get_requested_partitions(downstream.key) == {None}


def test_an_asset_whose_code_version_changed_is_requested():
    """After a change to the code that makes a model or an export (a new code version), the automation requests it,
    its inputs unchanged; the same code requests nothing."""
    from pipelines.definitions import ON_CHANGE

    @dg.asset
    def upstream() -> None:
        pass

    def downstream_of(code: str):
        @dg.asset(deps=[upstream], automation_condition=ON_CHANGE, code_version=code)
        def downstream() -> None:
            pass

        return downstream

    with dg.DagsterInstance.ephemeral() as instance:
        assert dg.materialize([upstream, downstream_of("a")], instance=instance).success
        first = dg.evaluate_automation_conditions(defs=[upstream, downstream_of("a")], instance=instance)
        same = dg.evaluate_automation_conditions(
            defs=[upstream, downstream_of("a")], instance=instance, cursor=first.cursor
        )
        assert same.total_requested == 0
        changed = dg.evaluate_automation_conditions(
            defs=[upstream, downstream_of("b")], instance=instance, cursor=same.cursor
        )
        assert changed.get_requested_partitions(dg.AssetKey("downstream")) == {None}


def test_the_models_run_any_subset_of_models_and_checks(tmp_path, build):
    """One definition makes every model: a selected model is refreshed with its checks and nothing else; a selected
    check alone runs against the table as it stands (the UI's "Execute" on a check)."""
    from helpers import write_epoch_file

    from pipelines.defs.models.assets import sql_models
    from pipelines.defs.resources import WarehouseConfig

    release, warehouse = tmp_path / "rel", tmp_path / "wh"
    for epoch in range(2):
        write_epoch_file(release / "run_a", epoch)
    assert build([release], warehouse) == 0
    resources = {"warehouse": WarehouseConfig(releases=[str(release)], warehouse_dir=str(warehouse))}

    check = dg.AssetCheckKey(dg.AssetKey("fact_epochs"), "no_duplicate_epochs")
    result = dg.materialize([sql_models], selection=dg.AssetSelection.checks(check), resources=resources)
    assert result.get_asset_materialization_events() == []
    assert [(e.asset_check_key, e.passed) for e in result.get_asset_check_evaluations()] == [(check, True)]

    result = dg.materialize([sql_models], selection=dg.AssetSelection.assets("run_summary"), resources=resources)
    [materialization] = [e.materialization for e in result.get_asset_materialization_events()]
    assert (materialization.asset_key, materialization.metadata["grpo/refresh"].value) == (
        dg.AssetKey("run_summary"),
        "kept",
    )
    assert {e.asset_check_key.asset_key for e in result.get_asset_check_evaluations()} == {dg.AssetKey("run_summary")}
