"""Releases in an S3-compatible bucket (moto's server on loopback): the same runs, layouts and problems as the same
files on a disk, and the incremental ingest of new, rewritten and fixed objects by their ETags."""

import json
from datetime import UTC, datetime

import polars as pl
from helpers import epoch_document, write_epoch_file

import pipelines.release.objects
from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import partition_file
from pipelines.lake.runs import select_runs
from pipelines.release.discover import RunFolder, list_run
from pipelines.release.objects import ObjectTree
from pipelines.release.releases import find_run_folders, release_problem

LIMIT = 1 << 20


def upload(fs, folder, url: str) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        fs.pipe_file(f"{url}/{path.relative_to(folder).as_posix()}", path.read_bytes())


def test_a_release_in_a_bucket_lists_as_the_same_folder_on_disk(bucket, tmp_path):
    fs, name = bucket
    release = tmp_path / "rel"
    write_epoch_file(release / "flat run", 1)
    write_epoch_file(release / "flat run", 2, "{not json")
    (release / "flat run" / "epoch_2_results.json.bak").write_text("{}")
    write_epoch_file(release / "folder=run", 1, layout="folder")
    (release / "folder=run" / "epoch_001" / "metrics.json").write_text(json.dumps(epoch_document(1)))
    (release / "folder=run" / "epoch_002").mkdir()
    (release / "folder=run" / "epoch_002" / "notes.txt").write_text("no document")
    (release / "README.md").write_text("not a run")
    upload(fs, release, f"{name}/rel")

    local, local_entries, _ = find_run_folders([release])
    remote, remote_entries, problems = find_run_folders([f"s3://{name}/rel"])
    assert problems == []
    assert sorted(remote) == sorted(local) == ["flat run", "folder=run"]
    assert [vars(e) for e in remote_entries] == [vars(e) for e in local_entries]
    for run_id in local:
        on_disk, in_bucket = list_run(local[run_id]), list_run(remote[run_id])
        fields = ("source_path", "epoch_in_name", "layout", "size")
        assert [[getattr(f, k) for k in fields] for f in in_bucket.epoch_files] == [
            [getattr(f, k) for k in fields] for f in on_disk.epoch_files
        ]
        assert [vars(s) for s in in_bucket.skipped] == [vars(s) for s in on_disk.skipped]
        assert all(f.file_path.startswith(f"s3://{name}/rel/") for f in in_bucket.epoch_files)


def test_new_rewritten_and_fixed_objects_are_read_again_and_nothing_else(bucket, tmp_path):
    fs, name = bucket
    url = f"s3://{name}/rel"
    fs.pipe_file(f"{url}/run/epoch_001_results.json", json.dumps(epoch_document(1)).encode())
    fs.pipe_file(f"{url}/run/epoch_002_results.json", b'{"epoch": 2, "trajectory_ids": [')
    lake = tmp_path / "lake"

    def ingest():
        runs, _, _ = find_run_folders([url])
        return ingest_run(list_run(runs["run"]), lake, LIMIT)

    first = ingest()
    assert (first.files_parsed, first.epochs, first.files_quarantined) == (2, 1, 1)
    errors = pl.read_parquet(partition_file(lake, "errors", "run"))
    assert errors.filter(pl.col("severity") == "error")["source_path"].to_list() == ["run/epoch_002_results.json"]
    assert ingest().files_parsed == 0  # nothing new: no object read

    fs.pipe_file(f"{url}/run/epoch_002_results.json", json.dumps(epoch_document(2)).encode())  # fixed
    fs.pipe_file(f"{url}/run/epoch_003_results.json", json.dumps(epoch_document(3)).encode())  # new
    # Rewritten with the same size: only its ETag tells (its last-modified time may be the same second).
    fs.pipe_file(f"{url}/run/epoch_001_results.json", json.dumps(epoch_document(1, loss=2.5)).encode())
    runs, _, _ = find_run_folders([url])
    work = select_runs(runs.values(), lake, LIMIT).work["run"]
    assert sorted(f.source_path for f in work.changed) == [f"run/epoch_00{n}_results.json" for n in (1, 2, 3)]
    second = ingest()
    assert (second.files_parsed, second.epochs, second.files_quarantined) == (3, 3, 0)
    epochs = pl.read_parquet(partition_file(lake, "epochs", "run")).sort("epoch")
    assert epochs["loss"].to_list() == [2.5, 2.5, 3.5]


def test_an_object_rewritten_in_the_same_second_at_the_same_size_is_changed_by_its_etag(tmp_path, monkeypatch):
    modified = datetime(2026, 1, 1, tzinfo=UTC)
    text = json.dumps(epoch_document(1)).encode()
    release = "s3://b/rel"

    def listing(etag: str):
        info = {
            "name": "b/rel/run/epoch_001_results.json",
            "size": len(text),
            "LastModified": modified,
            "ETag": etag,
            "type": "file",
        }
        return list_run(RunFolder("run", "rel", release, f"{release}/run"), ObjectTree(f"{release}/run", [info]))

    reads = []
    monkeypatch.setattr(pipelines.release.objects, "read_objects", lambda urls, limit: reads.extend(urls) or [text])
    lake = tmp_path / "lake"
    assert ingest_run(listing('"aaa"'), lake, LIMIT).files_parsed == 1
    assert ingest_run(listing('"aaa"'), lake, LIMIT).files_parsed == 0
    assert ingest_run(listing('"bbb"'), lake, LIMIT).files_parsed == 1
    assert reads == [f"{release}/run/epoch_001_results.json"] * 2


def test_a_missing_bucket_or_a_run_folder_given_as_the_release_is_refused_in_one_line(bucket):
    fs, name = bucket
    fs.pipe_file(f"{name}/run/epoch_001_results.json", json.dumps(epoch_document(1)).encode())
    assert "does not exist" in release_problem("s3://no-such-bucket-here/rel")
    refusal = release_problem(f"s3://{name}/run")
    assert "is a run folder" in refusal and f"--release s3://{name}" in refusal
    assert release_problem(f"s3://{name}") is None


def test_an_object_refused_once_is_asked_for_again_unchanged(bucket, tmp_path, monkeypatch):
    fs, name = bucket
    url = f"s3://{name}/rel"
    fs.pipe_file(f"{url}/run/epoch_001_results.json", json.dumps(epoch_document(1)).encode())
    runs, _, _ = find_run_folders([url])
    granted = pipelines.release.objects.read_objects
    monkeypatch.setattr(pipelines.release.objects, "read_objects", lambda urls, limit: [PermissionError("Denied")])
    first = ingest_run(list_run(runs["run"]), tmp_path / "lake", LIMIT)
    assert (first.epochs, first.files_quarantined) == (0, 1)
    errors = pl.read_parquet(partition_file(tmp_path / "lake", "errors", "run"))
    assert errors.select("source_path", "error_kind").rows() == [("run/epoch_001_results.json", "unreadable")]
    monkeypatch.setattr(pipelines.release.objects, "read_objects", granted)  # access granted, the object as it was
    second = ingest_run(list_run(runs["run"]), tmp_path / "lake", LIMIT)
    assert (second.files_parsed, second.epochs, second.files_quarantined) == (1, 1, 0)


def test_a_key_that_is_both_an_object_and_a_prefix_is_reported_and_the_prefix_read(bucket, tmp_path):
    fs, name = bucket
    url = f"s3://{name}/rel"
    document = json.dumps(epoch_document(1)).encode()
    fs.pipe_file(f"{url}/run/epoch_001", document)
    fs.pipe_file(f"{url}/run/epoch_001/results.json", document)
    fs.pipe_file(f"{url}/run/epoch_002_results.json/x", b"a key under a document's name")
    fs.pipe_file(f"{url}/run/epoch_002_results.json", json.dumps(epoch_document(2)).encode())
    runs, _, _ = find_run_folders([url])
    listing = list_run(runs["run"])
    assert [f.source_path for f in listing.epoch_files] == ["run/epoch_001/results.json"]
    clashes = [(s.source_path, s.error_kind, s.is_problem) for s in listing.skipped if s.error_kind == "name_clash"]
    assert clashes == [("run/epoch_001", "name_clash", True), ("run/epoch_002_results.json", "name_clash", True)]

    ingest_run(listing, tmp_path / "lake", LIMIT)
    errors = pl.read_parquet(partition_file(tmp_path / "lake", "errors", "run"))
    assert errors.filter(pl.col("error_kind") == "name_clash").get_column("source_path").to_list() == [
        "run/epoch_001",
        "run/epoch_002_results.json",
    ]


def test_a_clash_is_found_in_either_order_of_the_keys():
    objects = [
        {"name": "b/rel/run/epoch_001/results.json", "size": 1, "ETag": "a"},
        {"name": "b/rel/run/epoch_001", "size": 1, "ETag": "b"},
    ]
    for listed in (objects, objects[::-1]):
        tree = ObjectTree("s3://b/rel/run", listed)
        assert tree.clashes == ["s3://b/rel/run/epoch_001"]
        assert [(e.name, e.is_dir()) for e in tree.scan("s3://b/rel/run")] == [("epoch_001", True)]
