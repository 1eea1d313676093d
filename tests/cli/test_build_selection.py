"""`grpo-warehouse build` hands Dagster only the run partitions with something to ingest."""

import shutil
from collections import Counter

import dagster as dg
import pytest
from helpers import epoch_document

import pipelines.build
import pipelines.lake.runs
from pipelines.build import _partition_blocks, stale_runs
from pipelines.lake.runs import ingest_runs, select_runs
from pipelines.release.releases import find_run_folders

LAKE_TABLES = ("epochs", "trajectories", "errors", "files")


@pytest.fixture
def launches(monkeypatch):
    """Every Dagster run the build launches: its tags, asset selection and result."""
    seen: list[dict] = []
    execute = dg.JobDefinition.execute_in_process

    def spy(job, **kwargs):
        result = execute(job, **kwargs)
        seen.append(
            {
                "tags": kwargs.get("tags") or {},
                "selection": kwargs.get("asset_selection"),
                "run_config": kwargs.get("run_config") or {},
                "result": result,
            }
        )
        return result

    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", spy)
    return seen


def lake_partitions(launch) -> Counter:
    """(lake table, run) -> materializations of it in one launched Dagster run."""
    return Counter(
        (event.asset_key.path[1], event.partition)
        for event in launch["result"].get_asset_materialization_events()
        if event.asset_key.path[0] == "lake" and event.asset_key.path[1] in LAKE_TABLES
    )


def unpartitioned_ingest(launch) -> list[str] | None:
    """The run partitions the unpartitioned lake of runs was given in one launched Dagster run (None: it did not run),
    once its four tables were each materialized once, with no partition."""
    materialized = lake_partitions(launch)
    if not materialized:
        return None
    assert materialized == Counter({(table, None): 1 for table in LAKE_TABLES})
    return launch["run_config"]["ops"]["run_lake"]["config"]["partition_keys"]


def three_runs(release, write_epoch):
    for run, epochs in (("run_a", 2), ("run_b", 2), ("run_c", 1)):
        for epoch in range(epochs):
            write_epoch(release / run, epoch)


def test_partition_blocks_group_consecutive_selected_keys_and_bridge_short_gaps():
    keys = ["a", "b", "c", "d", "e", "f", "g"]
    assert _partition_blocks(keys, set(), 2) == []
    assert _partition_blocks(keys, {"b", "c", "f"}, 2) == [["b", "c"], ["f"]]  # d, e: a gap of 2, not under 2
    assert _partition_blocks(keys, {"b", "c", "f"}, 3) == [["b", "c", "d", "e", "f"]]
    assert _partition_blocks(keys, {"a", "g"}, 1) == [["a"], ["g"]]
    assert _partition_blocks(keys, {"g", "a"}, 6) == [["a", "b", "c", "d", "e", "f", "g"]]


def test_select_runs_names_new_changed_and_gone_runs(tmp_path, write_epoch):
    release, lake = tmp_path / "release", tmp_path / "lake"
    three_runs(release, write_epoch)
    runs, _, _ = find_run_folders([release])
    ingest_runs(list(runs.values()), lake, 10**6, workers=1)
    assert select_runs(list(runs.values()), lake, 10**6).stale == []

    write_epoch(release / "run_b", 2)  # a new file
    write_epoch(release / "run_d", 0)  # a run new to the lake
    (release / "run_a" / "notes.txt").write_text("not an epoch file")  # inventoried: the run's files table changes
    shutil.rmtree(release / "run_c")  # gone, its manifest still in the lake
    runs, _, _ = find_run_folders([release])
    selection = select_runs(list(runs.values()), lake, 10**6)
    assert selection.stale == ["run_a", "run_b", "run_c", "run_d"]
    # What each run lacks, as the release sensor reads it: the files to parse or drop, an inventory to redo.
    work = selection.work
    assert [f.source_path for f in work["run_b"].changed] == ["run_b/epoch_002_results.json"]
    assert (work["run_b"].removed, work["run_b"].inventory_changed) == ([], False)
    assert (work["run_a"].changed, work["run_a"].removed, work["run_a"].inventory_changed) == ([], [], True)
    assert [f.source_path for f in work["run_d"].changed] == ["run_d/epoch_000_results.json"]
    assert selection.gone == ["run_c"] and "run_c" not in work

    (release / "run_b" / "epoch_001_results.json").unlink()
    runs, _, _ = find_run_folders([release])
    assert select_runs(list(runs.values()), lake, 10**6).work["run_b"].removed == ["run_b/epoch_001_results.json"]


def test_runs_new_to_the_lake_are_stale_without_being_listed(tmp_path, write_epoch, monkeypatch):
    release, lake = tmp_path / "release", tmp_path / "lake"
    three_runs(release, write_epoch)
    runs, _, _ = find_run_folders([release])
    ingest_runs([runs["run_a"], runs["run_b"]], lake, 10**6, workers=1)
    write_epoch(release / "run_b", 2)
    listed = []
    list_run = pipelines.lake.runs.list_run
    monkeypatch.setattr(pipelines.lake.runs, "list_run", lambda run: listed.append(run.run_id) or list_run(run))
    # run_c has no manifest: its ingest lists it; run_b's new file is found by listing it here
    assert stale_runs(runs, lake, 10**6, full_scan=True) == {"run_b", "run_c"}
    assert sorted(listed) == ["run_a", "run_b"]


@pytest.mark.slow
def test_no_change_build_ingests_no_run_and_one_new_file_only_its_run(
    tmp_path, monkeypatch, write_epoch, build, query, launches
):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)  # the default: a throwaway instance per build
    release, wh = tmp_path / "release", tmp_path / "wh"
    three_runs(release, write_epoch)
    assert build([release], wh) == 0
    assert len(launches) == 1
    # A throwaway instance records no partition per run: the lake of runs is one unpartitioned step over the stale runs.
    assert unpartitioned_ingest(launches[0]) == ["run_a", "run_b", "run_c"]

    launches.clear()
    assert build([release], wh) == 0
    assert len(launches) == 1
    assert unpartitioned_ingest(launches[0]) is None
    assert not any(key.path[0] == "lake" and key.path[1] in LAKE_TABLES for key in launches[0]["selection"])
    assert "dagster/asset_partition_range_start" not in launches[0]["tags"]

    launches.clear()
    write_epoch(release / "run_b", 2, epoch_document(2, n=3))
    assert build([release], wh) == 0
    assert len(launches) == 1
    assert unpartitioned_ingest(launches[0]) == ["run_b"]
    # run_b: epochs 0, 1 with 4 trajectories each, and the new epoch 2 with 3.
    assert query(wh, "select run_id, count(*), sum(n_trajectories) from fact_epochs group by 1 order by 1") == [
        ("run_a", 2, 8),
        ("run_b", 3, 11),
        ("run_c", 1, 4),
    ]
    assert query(wh, "select count(*), sum(reward) from fact_trajectories where run_id = 'run_b' and epoch = 2") == [
        (3, 0.0 + 0.25 + 0.5)
    ]
    assert query(wh, "select count(*) from epoch_metrics") == [(6,)]

    launches.clear()
    shutil.rmtree(release / "run_c")
    assert build([release], wh) == 0
    assert unpartitioned_ingest(launches[0]) is None  # release_runs takes a gone run out of the lake
    assert query(wh, "select run_id, count(*) from fact_epochs group by 1 order by 1") == [("run_a", 2), ("run_b", 3)]


@pytest.mark.slow
def test_a_kept_instance_records_only_changed_partitions_and_each_new_partition_once(
    tmp_path, monkeypatch, write_epoch, build, query, launches
):
    release, wh = tmp_path / "release", tmp_path / "wh"
    three_runs(release, write_epoch)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    assert build([release], wh) == 0

    # Two changed runs with an unchanged one between them: with no gap bridged, one Dagster run each.
    launches.clear()
    monkeypatch.setattr(pipelines.build, "MAX_PARTITION_GAP", 1)
    write_epoch(release / "run_a", 2)
    write_epoch(release / "run_c", 1)
    assert build([release], wh) == 0
    assert [lake_partitions(launch) for launch in launches] == [
        Counter({(t, "run_a"): 1 for t in LAKE_TABLES}),
        Counter({(t, "run_c"): 1 for t in LAKE_TABLES}),
    ]
    with dg.DagsterInstance.get() as instance:
        recorded = Counter(
            record.partition_key
            for record in instance.fetch_materializations(dg.AssetKey(["lake", "epochs"]), limit=100).records
        )
    assert recorded == {"run_a": 2, "run_b": 1, "run_c": 2}
    assert query(wh, "select run_id, count(*) from fact_epochs group by 1 order by 1") == [
        ("run_a", 3),
        ("run_b", 2),
        ("run_c", 2),
    ]

    # Another instance has never seen these partitions: each is materialized once though the lake is up to date.
    launches.clear()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home2"))
    (tmp_path / "home2").mkdir()
    assert build([release], wh) == 0
    assert len(launches) == 1
    assert set(lake_partitions(launches[0])) == {(t, r) for t in LAKE_TABLES for r in ("run_a", "run_b", "run_c")}
