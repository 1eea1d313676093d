"""A quiet run whose folders have not changed is settled from their stamps, without a stat of each file; every
change that adds, removes or renames an entry is still found, and a full scan finds a file rewritten in place.

A run is quiet once it was last written to (its latest ctime) GRPO_QUIET_SECONDS before a listing (default an
hour). Files written by a test are minutes old at most, so most tests set it to 0: quiet at once."""

import json
import os
import time

import polars as pl
import pytest
from helpers import epoch_document

import pipelines.lake.ingest
import pipelines.lake.runs
from pipelines.lake.manifest import DEFAULT_QUIET_SECONDS, unchanged_by_stamps
from pipelines.lake.paths import partition_file, remove_run, stamps_file
from pipelines.lake.runs import ingest_runs
from pipelines.release import discover
from pipelines.release.releases import find_run_folders
from pipelines.settings import ENV_QUIET_SECONDS

HOURS = 2 * 3600 * 10**9  # longer than the default wait
assert HOURS > DEFAULT_QUIET_SECONDS * 10**9


QUIET = {"seconds": DEFAULT_QUIET_SECONDS}  # the quiet_seconds the helpers below pass


def wait_for_quiet(monkeypatch, seconds: int) -> None:
    """Runs count as quiet this long after their last write: for the helpers, and for builds (GRPO_QUIET_SECONDS)."""
    monkeypatch.setitem(QUIET, "seconds", seconds)
    monkeypatch.setenv(ENV_QUIET_SECONDS, str(seconds))


@pytest.fixture
def quiet_at_once(monkeypatch):
    wait_for_quiet(monkeypatch, 0)


def select_runs(*args, **kwargs):
    return pipelines.lake.runs.select_runs(*args, quiet_seconds=QUIET["seconds"], **kwargs)


def set_mtime_back(*paths):
    """Sets the files' mtimes two hours back, as utime, tar or cp -p do: their ctimes stay at now."""
    when = time.time_ns() - HOURS
    for path in paths:
        os.utime(path, ns=(when, when))


@pytest.fixture
def listed(monkeypatch):
    """The run ids list_run is called for from now on (in this process)."""
    seen: list[str] = []
    list_run = pipelines.lake.runs.list_run

    def counting(run):
        seen.append(run.run_id)
        return list_run(run)

    monkeypatch.setattr(pipelines.lake.runs, "list_run", counting)
    return seen


def stamps(lake, run_id):
    """The run's stamps record, None when it has none (it is listed on every build)."""
    path = stamps_file(lake, run_id)
    return json.loads(path.read_text()) if path.exists() else None


def runs_of(release):
    runs, _, _ = find_run_folders([release])
    return [runs[k] for k in sorted(runs)]


def ingest(release, lake, full_scan=False):
    return {
        r.run_id: r
        for r in ingest_runs(
            runs_of(release), lake, 10**6, workers=1, full_scan=full_scan, quiet_seconds=QUIET["seconds"]
        )
    }


@pytest.fixture
def quiet_release(tmp_path, write_epoch, quiet_at_once):
    """Two quiet runs (one per layout) of three epochs, ingested once."""
    release, lake = tmp_path / "release", tmp_path / "lake"
    for e in range(3):
        write_epoch(release / "run_a", e)
        write_epoch(release / "run_b", e, layout="folder")
    ingest(release, lake)
    return release, lake


def test_a_quiet_unchanged_run_is_settled_without_listing_it(quiet_release, listed):
    release, lake = quiet_release
    assert stamps(lake, "run_a")["folders"].keys() == {"run_a"}
    assert stamps(lake, "run_b")["folders"].keys() == {"run_b", "run_b/epoch_000", "run_b/epoch_001", "run_b/epoch_002"}

    results = ingest(release, lake)
    assert listed == []
    # What the manifest says of the lake: 3 epochs of 4 trajectories each, per run.
    assert {k: (r.changed, r.files_parsed, r.epochs, r.trajectories) for k, r in results.items()} == {
        "run_a": (False, 0, 3, 12),
        "run_b": (False, 0, 3, 12),
    }
    assert select_runs(runs_of(release), lake, 10**6).stale == []
    assert listed == []


@pytest.mark.parametrize(
    "change",
    [
        "new file",
        "new folder-layout epoch",
        "file removed",
        "file renamed",
        "file beside results.json",
        "results.json removed",
        "run folder replaced",
    ],
)
def test_every_change_to_a_folder_is_found(quiet_release, write_epoch, listed, change):
    release, lake = quiet_release
    run = (
        "run_b"
        if change in ("new folder-layout epoch", "file beside results.json", "results.json removed")
        else "run_a"
    )
    if change == "new file":
        set_mtime_back(write_epoch(release / "run_a", 3))  # even with an old mtime
    elif change == "new folder-layout epoch":
        set_mtime_back(write_epoch(release / "run_b", 3, layout="folder"))
    elif change == "file removed":
        (release / "run_a" / "epoch_001_results.json").unlink()
    elif change == "file renamed":
        (release / "run_a" / "epoch_001_results.json").rename(release / "run_a" / "epoch_001_results.json.bak")
    elif change == "file beside results.json":
        (release / "run_b" / "epoch_001" / "notes.txt").write_text("x")
    elif change == "results.json removed":
        (release / "run_b" / "epoch_001" / "results.json").unlink()
    else:  # replaced by a copy without epoch 0: the folder's inode tells
        copy = release.parent / "copy"
        copy.mkdir()
        for path in sorted((release / "run_a").iterdir())[1:]:
            (copy / path.name).write_bytes(path.read_bytes())
        os.rename(release / "run_a", release.parent / "old")
        os.rename(copy, release / "run_a")

    assert select_runs(runs_of(release), lake, 10**6).stale == [run]
    assert sorted(listed) == [run]  # the other run was settled from its stamps
    expected_epochs = {
        "new file": 4,
        "new folder-layout epoch": 4,
        "file removed": 2,
        "file renamed": 2,
        "file beside results.json": 3,
        "results.json removed": 2,
        "run folder replaced": 2,
    }[change]
    assert ingest(release, lake)[run].epochs == expected_epochs


def test_a_file_rewritten_in_place_in_a_quiet_run_is_found_by_a_full_scan(quiet_release):
    release, lake = quiet_release
    path = release / "run_a" / "epoch_001_results.json"
    with open(path, "r+b") as handle:  # in place: the folder does not change
        handle.truncate(0)
        handle.write(json.dumps(epoch_document(1, n=6)).encode())

    # The documented limit of the quick look: nothing in run_a's folder changed.
    quick = select_runs(runs_of(release), lake, 10**6)
    assert quick.stale == [] and "run_a" in quick.quiet and "run_a" not in quick.work
    assert select_runs(runs_of(release), lake, 10**6, full_scan=True).stale == ["run_a"]
    # A run named in must_list (the sensor's runs with files still settling) is listed even when quiet.
    assert select_runs(runs_of(release), lake, 10**6, must_list={"run_a"}).stale == ["run_a"]
    results = ingest(release, lake, full_scan=True)
    assert (results["run_a"].files_parsed, results["run_a"].trajectories) == (1, 4 + 6 + 4)


def test_a_busy_run_is_listed_every_time_and_becomes_quiet_an_hour_after_its_last_write(
    tmp_path, write_epoch, listed, monkeypatch
):
    release, lake = tmp_path / "release", tmp_path / "lake"
    files = [write_epoch(release / "run_a", e) for e in range(2)]  # just written: a trainer may still rewrite them
    set_mtime_back(*files)  # an mtime set back does not make a run quiet: its ctime says it was written now
    ingest(release, lake)
    assert stamps(lake, "run_a") is None
    listed.clear()

    with open(files[1], "r+b") as handle:  # rewritten in place, with a new size: found without a full scan
        handle.truncate(0)
        handle.write(json.dumps(epoch_document(1, n=5)).encode())
    assert ingest(release, lake)["run_a"].files_parsed == 1
    assert listed == ["run_a"]

    # Two hours later, nothing changed: nothing is parsed, and the listing finds the run quiet. The stamps are
    # recorded, also when the listing is the CLI's check (which parses nothing).
    listing_time = time.time_ns() + HOURS
    with monkeypatch.context() as later:
        later.setattr(discover.time, "time_ns", lambda: listing_time)
        assert select_runs(runs_of(release), lake, 10**6).stale == []
    record = stamps(lake, "run_a")
    assert record["listed_at_ns"] == listing_time
    assert record["changed_at_ns"] == max(os.stat(p).st_ctime_ns for p in [*files, release / "run_a"])
    listed.clear()
    assert ingest(release, lake)["run_a"].files_parsed == 0
    assert listed == []


def test_a_negative_wait_lists_every_run_on_every_build(tmp_path, write_epoch, monkeypatch):
    release, lake = tmp_path / "release", tmp_path / "lake"
    write_epoch(release / "run_a", 0)
    wait_for_quiet(monkeypatch, -1)
    monkeypatch.setattr(discover.time, "time_ns", lambda: 10**20)  # any time later
    ingest(release, lake)
    assert stamps(lake, "run_a") is None and unchanged_by_stamps(runs_of(release)[0], lake) is None


@pytest.mark.parametrize("trouble", ["quarantined file", "link"])
def test_runs_with_something_to_look_at_again_are_always_listed(tmp_path, write_epoch, listed, trouble, quiet_at_once):
    release, lake = tmp_path / "release", tmp_path / "lake"
    files = [write_epoch(release / "run_a", e) for e in range(2)]
    if trouble == "quarantined file":
        files.append(write_epoch(release / "run_a", 2, b'{"epoch": 2, "rewards": [0.5,'))
    else:
        files.append(write_epoch(release / "source", 2))
        os.symlink(files[-1], release / "run_a" / "epoch_002_results.json")
    ingest(release, lake)
    assert stamps(lake, "run_a") is None
    listed.clear()

    # Fixed (or its link target rewritten) in place, old mtime and all: found because the run is listed.
    path = files[-1]
    path.write_text(json.dumps(epoch_document(2, n=7)))
    set_mtime_back(path)
    assert ingest(release, lake)["run_a"].files_parsed == 1
    assert "run_a" in listed
    assert ingest(release, lake)["run_a"].trajectories == 4 + 4 + 7


def test_a_rewrite_cut_short_leaves_no_stamps_to_trust(quiet_release, monkeypatch):
    release, lake = quiet_release
    path = release / "run_a" / "epoch_001_results.json"
    path.write_text(json.dumps(epoch_document(1, n=6)))  # in place: the folder does not change
    write = pipelines.lake.ingest.write_atomically

    def crash_on_trajectories(frame, path):
        if "trajectories" in str(path):
            raise OSError("disk full")
        write(frame, path)

    with monkeypatch.context() as crashing, pytest.raises(OSError):
        crashing.setattr(pipelines.lake.ingest, "write_atomically", crash_on_trajectories)
        ingest(release, lake, full_scan=True)
    # The epochs partition holds the new epoch 1 already, the manifest the old one: the run's folder has not
    # changed, but its stamps were dropped before the rewrite began, so it is listed and finished.
    assert stamps(lake, "run_a") is None
    assert select_runs(runs_of(release), lake, 10**6).stale == ["run_a"]
    assert ingest(release, lake)["run_a"].trajectories == 4 + 6 + 4


@pytest.mark.slow
def test_build_full_scan_finds_a_file_rewritten_in_place(tmp_path, write_epoch, build, query, quiet_at_once):
    release, wh = tmp_path / "release", tmp_path / "wh"
    files = [write_epoch(release / "run_a", e) for e in range(2)]
    assert build([release], wh) == 0
    files[1].write_text(json.dumps(epoch_document(1, n=6)))  # in place
    assert build([release], wh) == 0
    assert query(wh, "select count(*) from fact_trajectories") == [(8,)]
    assert build([release], wh, "--full-scan") == 0
    assert query(wh, "select count(*) from fact_trajectories") == [(4 + 6,)]


def test_a_run_whose_folder_is_gone_is_named_and_leaves_no_stamps(quiet_release):
    release, lake = quiet_release
    for path in (release / "run_a").iterdir():
        path.unlink()
    (release / "run_a").rmdir()
    assert select_runs(runs_of(release), lake, 10**6).stale == ["run_a"]
    remove_run(lake, "run_a")
    assert stamps(lake, "run_a") is None and stamps(lake, "run_b") is not None


def test_a_full_scan_finds_a_same_size_rewrite_whose_mtime_was_set_back(tmp_path, write_epoch):
    """touch -r: the file's size and mtime are as before the rewrite; its change time is not."""
    release, lake = tmp_path / "release", tmp_path / "lake"
    path = write_epoch(release / "run_a", 0, epoch_document(0, n=4))
    ingest(release, lake)
    before = path.stat()
    rewritten = json.dumps(epoch_document(0, n=4)).replace('"loss": 0.5', '"loss": 0.7')
    assert len(rewritten) == before.st_size
    path.write_text(rewritten)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert ingest(release, lake, full_scan=True)["run_a"].files_parsed == 1
    assert pl.read_parquet(partition_file(lake, "epochs", "run_a"))["loss"].to_list() == [0.7]
