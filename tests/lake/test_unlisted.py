"""A run or epoch folder that cannot be listed keeps what the lake took from it, and says so; listed again, it is
read as any other."""

import os

import polars as pl
import pytest
from helpers import epoch_document

from pipelines.lake.paths import manifest_file, partition_file
from pipelines.lake.runs import ingest_runs
from pipelines.release.discover import LocalTree
from pipelines.release.releases import find_run_folders

LIMIT = 1 << 20


@pytest.fixture
def release(tmp_path, write_epoch):
    release = tmp_path / "rel"
    for epoch in range(4):  # epochs 0 and 1 flat, 2 and 3 in epoch folders
        write_epoch(release / "run", epoch, epoch_document(epoch, n=2), layout="file" if epoch < 2 else "folder")
    return release


def denied(monkeypatch, folder):
    """Listing the folder fails as a folder without read permission does (even for root)."""
    scan = LocalTree.scan

    def refusing(path):
        if os.fspath(path) == os.fspath(folder):
            raise PermissionError(13, "Permission denied")
        return scan(path)

    monkeypatch.setattr(LocalTree, "scan", staticmethod(refusing))


def ingest(release, lake):
    runs, _, _ = find_run_folders([release])
    return ingest_runs(list(runs.values()), lake, LIMIT, workers=1)[0]


def rows(lake, table):
    return pl.read_parquet(partition_file(lake, table, "run")).sort("source_path")


@pytest.mark.parametrize(
    ("folder", "kept", "seen"),
    [
        ("run", [0, 1, 2, 3], "run"),  # the whole run folder: every epoch kept
        ("run/epoch_002", [2], "run/epoch_002"),  # one epoch folder: its epoch kept, the others listed
    ],
)
def test_an_unlisted_folder_keeps_its_epochs_and_says_why(tmp_path, release, monkeypatch, folder, kept, seen):
    lake = tmp_path / "lake"
    assert ingest(release, lake).epochs == 4
    before = {name: rows(lake, name) for name in ("epochs", "trajectories")}
    manifest = manifest_file(lake, "run").read_bytes()

    with monkeypatch.context() as patch:
        denied(patch, release / folder)
        result = ingest(release, lake)
        assert (result.epochs, result.files_parsed) == (4, 0)
        for name, frame in before.items():  # nothing lost, nothing parsed again
            assert rows(lake, name).equals(frame), name
        errors = rows(lake, "errors").filter(pl.col("error_kind") == "unreadable")
        assert errors.select("source_path", "severity", "message").rows() == [
            (
                seen,
                "error",
                f"cannot list {'run' if folder == 'run' else 'epoch'} folder: Permission denied; the {len(kept)} "
                "epoch file(s) taken from it before are kept as they were",
            )
        ]
        files = rows(lake, "files")
        assert files.filter(pl.col("status") == "loaded")["epoch_in_name"].sort().to_list() == [0, 1, 2, 3]
        assert ingest(release, lake).changed is False  # a second build while it stays unlisted: nothing to do

    result = ingest(release, lake)  # readable again: listed, and its problem gone
    assert (result.changed, result.epochs, result.files_parsed) == (True, 4, 0)
    assert rows(lake, "errors").filter(pl.col("error_kind") == "unreadable").height == 0
    assert ingest(release, lake).changed is False
    assert manifest_file(lake, "run").read_bytes() == manifest
