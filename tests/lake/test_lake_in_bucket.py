"""The lake in an S3-compatible bucket (moto's server on loopback): the same partitions as a lake on a disk, no
temporary object left, DuckDB reading it through fsspec, and the incremental ingest (a no-change ingest puts
nothing, new epochs rewrite only their run, a run removed leaves nothing, a quarantined file fixed is loaded)."""

import time

import duckdb
import pytest
from helpers import epoch_document, touch_later, write_epoch_file

from pipelines import warehouse_db
from pipelines.build import BuildError, configure
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.parquet import read_parquet
from pipelines.lake.paths import RUN_TABLES, gone_runs, lake_runs, partition_file, remove_run
from pipelines.lake.runs import ingest_runs
from pipelines.lake_store import file_stamp, lake_root, register_lake
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import create_lake_views

LIMIT = 1 << 20
RUNS = ("a b", "c=d")


def write_release(release):
    """Two runs, one per layout; the second has a damaged third epoch."""
    for epoch in (1, 2):
        write_epoch_file(release / "a b", epoch, epoch_document(epoch, n=2))
        write_epoch_file(release / "c=d", epoch, epoch_document(epoch, n=3), layout="folder")
    return write_epoch_file(release / "c=d", 3, "{damaged", layout="folder")


def ingest(release, lake) -> dict:
    """The release's runs ingested into the lake in this process, gone runs removed; each run's result by id."""
    runs, _, _ = find_run_folders([release])
    for run_id in gone_runs(lake, runs):
        remove_run(lake, run_id)
    return {r.run_id: r for r in ingest_runs(list(runs.values()), lake, LIMIT, workers=1)}


def both_lakes(tmp_path, prefix: str):
    """The release ingested into a lake on disk and into one under a bucket prefix; (local lake, lake in bucket)."""
    release, local, remote = tmp_path / "rel", tmp_path / "lake", lake_root(prefix)
    write_release(release)
    ingest(release, local)
    ingest(release, remote)
    return local, remote


def partitions(lake) -> dict:
    """Every run's partition of every per-run table, as frames."""
    return {
        (table, run_id): read_parquet(partition_file(lake, table, run_id))
        for table in RUN_TABLES
        for run_id in lake_runs(lake)
        if partition_file(lake, table, run_id).exists()
    }


def same_partitions(local, remote) -> bool:
    ours, theirs = partitions(local), partitions(remote)
    return ours.keys() == theirs.keys() and all(ours[key].equals(theirs[key]) for key in ours)


def objects(fs, prefix: str) -> dict[str, tuple]:
    """Every object under a prefix, by key below it, with what a put changes (its last-modified time, its ETag)."""
    found = fs.find(prefix, detail=True)
    return {name[len(prefix) + 1 :]: (info["LastModified"], info["ETag"]) for name, info in found.items()}


def test_a_lake_in_a_bucket_holds_what_a_lake_on_disk_does_and_nothing_else(bucket, tmp_path):
    fs, name = bucket
    local, remote = both_lakes(tmp_path, f"s3://{name}/the lake")
    assert list(lake_runs(remote)) == list(RUNS) == list(lake_runs(local))
    assert same_partitions(local, remote)
    # The same files, and no temporary object beside them: each was put whole, nothing renamed.
    on_disk = {
        path.relative_to(local).as_posix() for path in local.rglob("*") if path.is_file() and ".locks" not in path.parts
    }
    assert set(objects(fs, f"{name}/the lake")) == on_disk
    # Per run: its id, its partitions (these runs have no transcripts: no transcripts partition), its manifest.
    assert len(on_disk) == 2 * (1 + len(RUN_TABLES) - 1 + 1)


def test_duckdb_reads_the_lake_in_a_bucket_through_the_registered_filesystem(bucket, tmp_path, monkeypatch):
    fs, name = bucket
    # A prefix DuckDB and fsspec would take for a pattern, and a hive partition, if the lake's paths were not names.
    local, remote = both_lakes(tmp_path, f"s3://{name}/we[ir]d*?=x lake")
    assert list(lake_runs(remote)) == list(RUNS)
    read, schemas_of = [], warehouse_db._read_schemas
    monkeypatch.setattr(warehouse_db, "_read_schemas", lambda con, files: read.extend(files) or schemas_of(con, files))
    rows = {}
    for lake in (local, remote):
        with duckdb.connect() as con:
            register_lake(con, lake)
            create_lake_views(con, lake)
            rows[str(lake)] = [
                con.execute(f"select * exclude (source_path) from lake.{table} order by all").fetchall()
                for table in RUN_TABLES
            ]
    assert rows[str(remote)] == rows[str(local)]
    assert len(rows[str(local)][0]) == 2 + 2  # epochs: two of each run, the damaged one not loaded
    # The files' schemas are read on the disk alone: in a bucket DuckDB would look for its own S3 extension instead.
    assert read and not [file for file in read if file.startswith("s3://")]
    with duckdb.connect() as con, pytest.raises(duckdb.Error):
        create_lake_views(con, remote)  # without the filesystem, DuckDB has no way to the bucket


def test_keys_that_differ_only_in_case_have_a_column_each_in_a_bucket_too(bucket, tmp_path):
    fs, name = bucket
    release = tmp_path / "rel"
    write_epoch_file(release / "a", 0, epoch_document(0, n=1, lr=0.1, LR=7.0))  # one file read by position
    write_epoch_file(release / "b", 0, epoch_document(0, n=1, lr=0.3))
    ingest(release, lake_root(f"s3://{name}/lake"))
    with duckdb.connect() as con:
        register_lake(con, lake_root(f"s3://{name}/lake"))
        create_lake_views(con, lake_root(f"s3://{name}/lake"))
        sql = 'select run_id, "LR__upper_1_2", "lr__lower" from lake.epochs order by 1'
        assert con.execute(sql).fetchall() == [("a", 7.0, 0.1), ("b", None, 0.3)]


def test_a_no_change_ingest_puts_nothing_and_new_epochs_rewrite_only_their_run(bucket, tmp_path):
    fs, name = bucket
    release, local, remote = tmp_path / "rel", tmp_path / "lake", lake_root(f"s3://{name}/lake")
    write_release(release)
    ingest(release, remote)
    before = objects(fs, f"{name}/lake")
    time.sleep(1.1)  # an object's last-modified time is in whole seconds: a put now would show

    assert not any(result.changed for result in ingest(release, remote).values())
    assert objects(fs, f"{name}/lake") == before

    write_epoch_file(release / "a b", 3, epoch_document(3, n=2))
    results = ingest(release, remote)
    assert [run_id for run_id, result in results.items() if result.changed] == ["a b"]
    assert (results["a b"].files_parsed, results["a b"].epochs) == (1, 3)
    after = objects(fs, f"{name}/lake")
    key_a, key_c = lake_runs(remote)["a b"], lake_runs(remote)["c=d"]
    assert {k for k in after if after[k] != before.get(k)} == {
        f"{table}/{key_a}/data.parquet"
        for table in RUN_TABLES
        if table != "transcripts"  # it has none
    } | {f"manifests/{key_a}.json"}
    assert all(after[k] == before[k] for k in after if key_c in k)
    ingest(release, local)  # the same release ingested at once into a lake on disk
    assert same_partitions(local, remote)


def test_a_run_removed_from_the_release_leaves_no_object_behind(bucket, tmp_path):
    fs, name = bucket
    release, remote = tmp_path / "rel", lake_root(f"s3://{name}/lake")
    write_release(release)
    ingest(release, remote)
    key = lake_runs(remote)["c=d"]
    for path in sorted((release / "c=d").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (release / "c=d").rmdir()

    ingest(release, remote)
    assert list(lake_runs(remote)) == ["a b"]
    assert [k for k in objects(fs, f"{name}/lake") if key in k] == []
    assert ("epochs", "a b") in partitions(remote)


def test_a_quarantined_object_fixed_in_the_release_is_loaded_at_the_next_ingest(bucket, tmp_path):
    fs, name = bucket
    release, remote = tmp_path / "rel", lake_root(f"s3://{name}/lake")
    damaged = write_release(release)
    assert ingest(release, remote)["c=d"].files_quarantined == 1
    errors = read_parquet(partition_file(remote, "errors", "c=d"))
    assert errors.select("source_path", "error_kind").rows() == [("c=d/epoch_003/results.json", "invalid_json")]

    write_epoch_file(release / "c=d", 3, epoch_document(3, n=3), layout="folder")
    touch_later(damaged)
    result = ingest(release, remote)["c=d"]
    assert (result.files_parsed, result.files_quarantined, result.epochs) == (1, 0, 3)
    assert read_parquet(partition_file(remote, "errors", "c=d")).height == 0
    files = read_parquet(partition_file(remote, "files", "c=d"))
    assert files.get_column("status").to_list() == ["loaded"] * 3


def test_an_object_rewritten_at_its_size_within_a_second_has_a_new_stamp(bucket):
    fs, name = bucket
    path = lake_root(f"s3://{name}/lake") / "runs.parquet"
    assert file_stamp(path) is None
    path.write_bytes(b"first")
    first = file_stamp(path)
    path.write_bytes(b"again")  # the same size, most likely the same second: only the ETag tells them apart
    assert first is not None and file_stamp(path) not in (None, first)


def test_the_lake_is_placed_by_flag_or_variable_and_a_missing_bucket_is_refused(bucket, tmp_path, monkeypatch):
    fs, name = bucket
    config = WarehouseConfig.from_env({"GRPO_LAKE_DIR": f"s3://{name}/lake/", "GRPO_WAREHOUSE_DIR": str(tmp_path)})
    assert str(config.lake) == f"s3://{name}/lake"
    monkeypatch.chdir(tmp_path)
    assert configure([], warehouse="wh", lake="elsewhere").lake == tmp_path / "elsewhere"
    assert configure([], warehouse="wh").lake == tmp_path / "wh" / "lake"
    with pytest.raises(BuildError, match=r"^the lake s3://no-such-bucket-here/lake cannot be written: no such bucket$"):
        configure([], warehouse="wh", lake="s3://no-such-bucket-here/lake")
