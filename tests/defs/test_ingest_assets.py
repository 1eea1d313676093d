"""The lake assets in Dagster: each run partition's own numbers after a run over several, a warning naming the
files quarantined, and data versions that change only when a partition's files are rewritten."""

import dagster as dg
import polars as pl
from helpers import epoch_document

from pipelines.defs.ingest.assets import RUN_TABLES, run_lake, unpartitioned_run_lake
from pipelines.defs.ingest.partitions import THROWAWAY_TAG, run_range_tags
from pipelines.defs.resources import WarehouseConfig


def lake_materializations(instance, table: str) -> dict[str, dg.AssetMaterialization]:
    """The latest materialization of each partition of a lake table."""
    records = instance.fetch_materializations(dg.AssetKey(["lake", table]), limit=100).records
    latest: dict[str, dg.AssetMaterialization] = {}
    for record in sorted(records, key=lambda r: r.storage_id):
        latest[record.partition_key] = record.asset_materialization
    return latest


def test_each_partition_of_a_run_over_several_carries_its_own_numbers(tmp_path, write_epoch):
    release = tmp_path / "release"
    for epoch in range(3):
        write_epoch(release / "run_a", epoch, epoch_document(epoch, n=4))
    write_epoch(release / "run_a", 3, '{"epoch": 3, "rewards": [')  # truncated: quarantined
    for epoch in range(2):
        write_epoch(release / "run_b", epoch, epoch_document(epoch, n=2), layout="folder")
    config = WarehouseConfig(releases=[str(release)], warehouse_dir=str(tmp_path / "wh"), workers=1)

    def materialize():
        result = dg.materialize(
            [run_lake], instance=instance, resources={"warehouse": config}, tags=run_range_tags("run_a", "run_b")
        )
        assert result.success
        return result

    with dg.DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions("run_id", ["run_a", "run_b"])
        result = materialize()
        epochs, errors = lake_materializations(instance, "epochs"), lake_materializations(instance, "errors")
        own = {
            run: {
                key: epochs[run].metadata[key].value
                for key in ("grpo/epochs", "grpo/trajectories", "grpo/files_quarantined", "dagster/row_count")
            }
            for run in epochs
        }
        # By hand: run_a 3 loaded epochs of 4 trajectories and a quarantined file; run_b 2 epochs of 2 trajectories.
        assert own == {
            "run_a": {"grpo/epochs": 3, "grpo/trajectories": 12, "grpo/files_quarantined": 1, "dagster/row_count": 3},
            "run_b": {"grpo/epochs": 2, "grpo/trajectories": 4, "grpo/files_quarantined": 0, "dagster/row_count": 2},
        }
        assert {run: m.metadata["dagster/row_count"].value for run, m in errors.items()} == {"run_a": 1, "run_b": 0}
        warnings = [
            event.message
            for event in instance.all_logs(result.run_id)
            if event.level == 30 and "quarantined" in (event.message or "")
        ]
        assert len(warnings) == 1 and "run_a/epoch_003_results.json" in warnings[0]

        versions = {run: m.tags["dagster/data_version"] for run, m in epochs.items()}
        materialize()  # nothing new: the same data versions, so nothing downstream follows
        assert {
            run: m.tags["dagster/data_version"] for run, m in lake_materializations(instance, "epochs").items()
        } == versions
        write_epoch(release / "run_b", 2, epoch_document(2, n=2), layout="folder")
        materialize()
        assert lake_materializations(instance, "epochs")["run_b"].tags["dagster/data_version"] != versions["run_b"]


def test_a_run_on_a_throwaway_instance_writes_the_same_lake_without_per_partition_numbers(tmp_path, write_epoch):
    # The CLI build's own instance is dropped after the build: nothing would read each partition's numbers.
    for epoch in range(2):
        write_epoch(tmp_path / "release" / "run_a", epoch, epoch_document(epoch, n=4))
    lakes = {}
    for throwaway in (False, True):
        config = WarehouseConfig(
            releases=[str(tmp_path / "release")], warehouse_dir=str(tmp_path / f"wh_{throwaway}"), workers=1
        )
        tags = {THROWAWAY_TAG: "true"} if throwaway else {}
        with dg.DagsterInstance.ephemeral() as instance:
            instance.add_dynamic_partitions("run_id", ["run_a"])
            result = dg.materialize(
                [run_lake], instance=instance, resources={"warehouse": config}, partition_key="run_a", tags=tags
            )
            assert result.success
            metadata = lake_materializations(instance, "epochs")["run_a"].metadata
        assert ("grpo/epochs" in metadata) is not throwaway
        lakes[throwaway] = pl.read_parquet(tmp_path / f"wh_{throwaway}" / "lake" / "epochs" / "*" / "*.parquet")
    assert lakes[True].equals(lakes[False]) and lakes[True].height == 2


def test_the_unpartitioned_lake_of_runs_writes_the_lake_the_run_partitions_write(tmp_path, write_epoch):
    # What a build on a throwaway instance runs: the given runs ingested, gone ones left alone, no partition recorded.
    for run, epochs in (("run_a", 2), ("run_b", 1)):
        for epoch in range(epochs):
            write_epoch(tmp_path / "release" / run, epoch, epoch_document(epoch, n=3))
    lakes = {}
    for partitioned in (True, False):
        config = WarehouseConfig(
            releases=[str(tmp_path / "release")], warehouse_dir=str(tmp_path / f"wh_{partitioned}"), workers=1
        )
        resources = {"warehouse": config}
        with dg.DagsterInstance.ephemeral() as instance:
            if partitioned:
                instance.add_dynamic_partitions("run_id", ["run_a", "run_b"])
                tags = run_range_tags("run_a", "run_b")
                result = dg.materialize([run_lake], instance=instance, resources=resources, tags=tags)
            else:
                run_config = {"ops": {"run_lake": {"config": {"partition_keys": ["run_a", "run_b"]}}}}
                lake = unpartitioned_run_lake()
                result = dg.materialize([lake], instance=instance, resources=resources, run_config=run_config)
            assert result.success
            recorded = [event.partition for event in result.get_asset_materialization_events()]
        tables = len(RUN_TABLES)
        assert sorted(recorded, key=str) == (
            ["run_a"] * tables + ["run_b"] * tables if partitioned else [None] * tables
        )
        lakes[partitioned] = {
            table: pl.read_parquet(tmp_path / f"wh_{partitioned}" / "lake" / table / "*" / "*.parquet")
            for table in ("epochs", "trajectories", "errors", "files")
        }
    assert lakes[True]["epochs"].height == 3 and lakes[True]["trajectories"].height == 9
    for table, frame in lakes[True].items():
        assert frame.equals(lakes[False][table]), table
