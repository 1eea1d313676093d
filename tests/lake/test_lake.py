"""The Parquet lake: incremental ingest, type drift across builds, retries, and nothing read outside a release."""

import builtins
import io
import os
from pathlib import Path

import polars as pl
import pytest
from helpers import epoch_document, touch_later

from pipelines.lake.ingest import ingest_run
from pipelines.lake.paths import manifest_file, partition_file
from pipelines.lake.runs import ingest_runs
from pipelines.release.discover import list_run
from pipelines.release.releases import find_run_folders

LIMIT = 1 << 20


def ingest(release: Path, lake: Path, run_id: str = "run", limit: int = LIMIT):
    runs, _, _ = find_run_folders([release])
    return ingest_run(list_run(runs[run_id]), lake, limit)


def table(lake: Path, name: str, run_id: str = "run") -> pl.DataFrame:
    return pl.read_parquet(partition_file(lake, name, run_id))


@pytest.mark.parametrize(
    "before, rewritten, parsed",
    [
        # epoch 0's extras, then epoch 1's before and after its rewrite; the files parsed by the second ingest
        (({}, {"note": "x"}), {}, 1 + 2),  # the only value of a key rewritten away: its column goes
        (({"count": 1}, {"count": 2.5}), {"count": 2}, 1 + 2),  # the only float beside integers: Int64 again
        (({"phase": 1}, {"phase": "warm"}), {}, 1 + 2),  # the only string: no longer JSON text
        (({"phase": 1}, {"phase": "warm"}), {"phase": 2}, 1),  # the same, but the merge types old and new values again
        (({"per_traj": [1, 2]}, {"per_traj": [0.5, 1]}), {"per_traj": [3, 4]}, 1 + 2),  # per trajectory too
        (({"lr": 0.1}, {"lr": 0.5}), {"lr": 0.25}, 1),  # nothing taken away: the rewritten file merged alone
    ],
)
def test_a_rewrite_that_takes_away_a_key_or_a_type_leaves_the_columns_of_a_fresh_ingest(
    tmp_path, write_epoch, before, rewritten, parsed
):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0, epoch_document(0, n=2, **before[0]))
    path = write_epoch(release / "run", 1, epoch_document(1, n=2, **before[1]))
    ingest(release, lake)
    write_epoch(release / "run", 1, epoch_document(1, n=2, **rewritten))
    touch_later(path)

    assert ingest(release, lake).files_parsed == parsed
    ingest(release, tmp_path / "fresh")
    for name in ("epochs", "trajectories"):
        assert table(lake, name).equals(table(tmp_path / "fresh", name), null_equal=True), name
        assert table(lake, name).schema == table(tmp_path / "fresh", name).schema, name


def test_type_drift_across_incremental_builds_keeps_every_value(tmp_path, write_epoch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0, epoch_document(0, n=2, phase=1, score=[1, 2]))
    write_epoch(release / "run", 1, epoch_document(1, n=2, phase=2, score=[3, 4]))
    ingest(release, lake)
    assert table(lake, "epochs")["phase"].dtype == pl.Int64

    write_epoch(release / "run", 2, epoch_document(2, n=2, phase="warm", score=["a", "b"]))
    result = ingest(release, lake)
    assert result.files_parsed == 1  # only the new file
    assert table(lake, "epochs").sort("epoch")["phase"].to_list() == ["1", "2", '"warm"']
    assert table(lake, "trajectories").sort("epoch", "traj_index")["score"].to_list() == [
        "1",
        "2",
        "3",
        "4",
        '"a"',
        '"b"',
    ]
    drift = table(lake, "errors").filter(pl.col("error_kind") == "type_drift")
    assert sorted(drift["message"].str.extract(r"`(\w+)`").to_list()) == ["phase", "score"]
    assert set(drift["severity"]) == {"warning"}

    # A later file of the first type: still JSON text, and the drift is still reported.
    write_epoch(release / "run", 3, epoch_document(3, n=2, phase=3, score=[5, 6]))
    ingest(release, lake)
    assert table(lake, "epochs").sort("epoch")["phase"].to_list() == ["1", "2", '"warm"', "3"]
    assert table(lake, "errors").filter(pl.col("error_kind") == "type_drift").height == 2

    # The odd file fixed: the column is typed again, natively, and the warning leaves.
    write_epoch(release / "run", 2, epoch_document(2, n=2, phase=9, score=[7, 8]))
    os.utime(release / "run" / "epoch_002_results.json", ns=(1, 1))
    ingest(release, lake)
    epochs = table(lake, "epochs").sort("epoch")
    assert epochs["phase"].dtype == pl.Int64 and epochs["phase"].to_list() == [1, 2, 9, 3]
    assert table(lake, "errors").filter(pl.col("error_kind") == "type_drift").height == 0


def test_fixed_file_is_loaded_and_its_error_leaves(tmp_path, write_epoch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0)
    bad = write_epoch(release / "run", 1, '{"epoch": 1, "rew')
    ingest(release, lake)
    assert table(lake, "errors")[["source_path", "error_kind"]].rows() == [
        ("run/epoch_001_results.json", "truncated_json")
    ]
    assert table(lake, "epochs")["epoch"].to_list() == [0]
    write_epoch(release / "run", 1)
    assert bad.stat().st_size != 17
    ingest(release, lake)
    assert table(lake, "errors").height == 0
    assert table(lake, "epochs")["epoch"].to_list() == [0, 1]


def test_file_over_the_size_limit_is_quarantined_unread(tmp_path, write_epoch, monkeypatch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    path = write_epoch(release / "run", 0)
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(str(p)) or real_open(p, *a, **k))
    ingest(release, lake, limit=100)
    assert str(path) not in opened
    (row,) = table(lake, "errors").rows(named=True)
    assert (row["error_kind"], row["action"]) == ("file_too_large", "quarantined: not loaded")
    assert str(path.stat().st_size) in row["message"]
    # A larger limit next time: the file is retried although it did not change.
    ingest(release, lake, limit=LIMIT)
    assert table(lake, "epochs")["epoch"].to_list() == [0]


def test_unreadable_file_is_quarantined_then_retried_when_readable(tmp_path, write_epoch, monkeypatch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0)
    locked = write_epoch(release / "run", 1)
    real_open = os.open

    def deny(path, *args, **kwargs):
        if Path(path) == locked.resolve():
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", deny)
        ingest(release, lake)
    (row,) = table(lake, "errors").rows(named=True)
    assert (row["source_path"], row["error_kind"], row["epoch"]) == ("run/epoch_001_results.json", "unreadable", 1)
    assert "Permission denied" in row["message"]
    # Readable again (a chmod changes neither size nor mtime): the next ingest retries it.
    ingest(release, lake)
    assert table(lake, "errors").height == 0
    assert table(lake, "epochs")["epoch"].to_list() == [0, 1]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode; see the monkeypatched test")
def test_unreadable_file_by_its_mode(tmp_path, write_epoch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    locked = write_epoch(release / "run", 0)
    locked.chmod(0)
    try:
        ingest(release, lake)
    finally:
        locked.chmod(0o644)
    assert table(lake, "errors")["error_kind"].to_list() == ["unreadable"]


def test_nothing_outside_the_release_is_opened(tmp_path, write_epoch, monkeypatch):
    release, lake, outside = tmp_path / "rel", tmp_path / "lake", tmp_path / "outside"
    write_epoch(release / "run", 0)
    secret = write_epoch(outside, 1)
    secret_dir = write_epoch(outside / "folder", 2, layout="folder").parent
    secret.chmod(0)
    os.symlink(secret, release / "run" / "epoch_001_results.json")
    os.symlink(secret_dir, release / "run" / "epoch_002")
    (release / "run" / "epoch_003").mkdir()
    os.symlink(secret, release / "run" / "epoch_003" / "results.json")
    os.symlink(release / "run" / "epoch_000_results.json", release / "run" / "epoch_004_results.json")  # inside
    os.symlink(release / "run" / "missing.json", release / "run" / "epoch_005_results.json")  # broken
    os.symlink(release / "run" / "epoch_006_results.json", release / "run" / "epoch_006_results.json")  # a loop

    opened: list[str] = []
    for module, name in ((os, "open"), (builtins, "open"), (io, "open")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda p, *a, _real=real, **k: opened.append(os.fspath(p)) or _real(p, *a, **k)
        )
    ingest(release, lake)
    monkeypatch.undo()

    outside_opened = [
        p
        for p in opened
        if not Path(p).resolve().is_relative_to(release.resolve())
        and not Path(p).resolve().is_relative_to(lake.resolve())
    ]
    assert outside_opened == []
    errors = {r["source_path"]: r for r in table(lake, "errors").rows(named=True)}
    kinds = {path: r["error_kind"] for path, r in errors.items()}
    assert kinds == {
        "run/epoch_001_results.json": "outside_link",
        "run/epoch_002": "outside_link",
        "run/epoch_003/results.json": "outside_link",
        "run/epoch_005_results.json": "outside_link",
        "run/epoch_006_results.json": "outside_link",
        # The link inside the release is followed: it leads to epoch 0's document, read and found mismatched.
        "run/epoch_004_results.json": "epoch_mismatch",
    }
    assert "broken link" in errors["run/epoch_005_results.json"]["message"]
    # Paths in messages are relative to the release: the absolute outside path is nowhere.
    assert not any(str(tmp_path) in r["message"] for r in errors.values())
    assert table(lake, "epochs")["epoch"].to_list() == [0]


def test_links_out_swapped_in_after_the_listing_are_not_read(tmp_path, write_epoch):
    """Between listing a run and reading its files, a file and an epoch folder are replaced by links out."""
    release, lake, outside = tmp_path / "rel", tmp_path / "lake", tmp_path / "outside"
    write_epoch(release / "run", 0)
    write_epoch(release / "run", 1)
    write_epoch(release / "run", 2, layout="folder")
    secret = write_epoch(outside, 1, epoch_document(1, n=2, loss=-99.0))
    secret_dir = write_epoch(outside / "folder", 2, epoch_document(2, n=2, loss=-99.0), layout="folder").parent
    runs, _, _ = find_run_folders([release])
    listing = list_run(runs["run"])

    (release / "run" / "epoch_001_results.json").unlink()
    os.symlink(secret, release / "run" / "epoch_001_results.json")
    (release / "run" / "epoch_002" / "results.json").unlink()
    (release / "run" / "epoch_002").rmdir()
    os.symlink(secret_dir, release / "run" / "epoch_002")
    ingest_run(listing, lake, LIMIT)

    assert table(lake, "epochs")["epoch"].to_list() == [0]
    assert -99.0 not in table(lake, "epochs")["loss"].to_list()
    errors = {r["source_path"]: r for r in table(lake, "errors").rows(named=True)}
    assert set(errors) == {"run/epoch_001_results.json", "run/epoch_002/results.json"}
    assert all("outside the release" in r["message"] for r in errors.values())


def test_second_ingest_with_no_change_rewrites_nothing(tmp_path, write_epoch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0)
    write_epoch(release / "run", 1, "{")
    ingest(release, lake)
    stamps = {p: p.stat().st_mtime_ns for p in lake.rglob("*") if p.is_file()}
    result = ingest(release, lake)
    assert (result.changed, result.files_parsed) == (False, 0)
    assert {p: p.stat().st_mtime_ns for p in lake.rglob("*") if p.is_file()} == stamps


def test_a_pool_of_two_workers_ingests_new_and_changed_runs_as_one_process_does(tmp_path, write_epoch):
    """Runs new to the lake are listed by the worker that ingests them; a run the lake holds is listed here."""
    release = tmp_path / "release"
    for run, n_epochs in (("run_a", 3), ("run_b", 2), ("run_c", 4)):
        for epoch in range(n_epochs):
            write_epoch(release / run, epoch)
    runs = sorted(find_run_folders([release])[0].values(), key=lambda r: r.run_id)
    pooled, alone = tmp_path / "pooled", tmp_path / "alone"
    ingest_runs(runs[:1], pooled, 10**6, workers=2)
    write_epoch(release / "run_a", 3)

    results = ingest_runs(runs, pooled, 10**6, workers=2)
    # 4 trajectories an epoch (epoch_document's default)
    assert [(r.run_id, r.changed, r.files_parsed, r.epochs, r.trajectories) for r in results] == [
        ("run_a", True, 1, 4, 16),
        ("run_b", True, 2, 2, 8),
        ("run_c", True, 4, 4, 16),
    ]
    ingest_runs(runs, alone, 10**6, workers=1)
    for run in ("run_a", "run_b", "run_c"):
        for table in ("epochs", "trajectories", "errors"):
            assert pl.read_parquet(partition_file(pooled, table, run)).equals(
                pl.read_parquet(partition_file(alone, table, run))
            ), (run, table)


def test_a_manifest_of_other_code_leaves_none_of_its_runs_columns_behind(tmp_path, write_epoch):
    from pipelines.lake.paths import manifest_file

    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0, epoch_document(0, n=2, lr=0.1))
    ingest(release, lake)
    path = partition_file(lake, "epochs", "run")
    pl.read_parquet(path).with_columns(made_by_other_code=pl.lit(1)).write_parquet(path)
    manifest_file(lake, "run").write_text("{}")  # as read_manifest takes a manifest of other code: none
    assert ingest(release, lake).files_parsed == 1
    assert "made_by_other_code" not in table(lake, "epochs").columns
    assert table(lake, "epochs")["lr"].to_list() == [0.1]


def test_a_disk_that_fills_while_a_run_is_written_leaves_no_part_taken_as_done(tmp_path, write_epoch, monkeypatch):
    release, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(release / "run", 0, epoch_document(0, n=3))
    ingest(release, lake)
    manifest = manifest_file(lake, "run").read_bytes()
    write_epoch(release / "run", 1, epoch_document(1, n=5))
    trajectories = partition_file(lake, "trajectories", "run")
    write_bytes = Path.write_bytes

    def fills_the_disk(path, data):  # the epochs partition is written, the trajectories' half, then the disk is full
        if path.parent == trajectories.parent:
            write_bytes(path, data[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", fills_the_disk)
    with pytest.raises(OSError) as failed:
        ingest(release, lake)
    monkeypatch.undo()
    assert str(failed.value) == f"[Errno 28] No space left on device: '{trajectories}'"  # the file, not its temp
    assert [p.name for p in lake.rglob("*tmp*")] == []
    assert manifest_file(lake, "run").read_bytes() == manifest  # the run is not recorded as ingested
    assert table(lake, "trajectories")["epoch"].to_list() == [0] * 3

    assert ingest(release, lake).files_parsed == 1  # space freed: the next ingest completes
    ingest(release, tmp_path / "fresh")
    for name in ("epochs", "trajectories", "files", "errors"):
        assert table(lake, name).equals(table(tmp_path / "fresh", name), null_equal=True), name
