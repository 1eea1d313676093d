"""The release sensor against a temporary release, as files appear, grow, change, are fixed and go away."""

import json
import os

import dagster as dg
import pytest
from helpers import epoch_document

import pipelines.lake.runs
from pipelines.defs.ingest.sensors import (
    dump_cursor,
    parse_cursor,
    release_files_sensor,
    release_sensor_result,
    scan_releases,
)
from pipelines.defs.resources import WarehouseConfig
from pipelines.lake.paths import partition_file
from pipelines.lake.runs import ingest_run_folder, select_runs
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import lake_dir

SETTLE_NS = 60 * 10**9
OLD = 1_600_000_000  # an mtime (s) long past: such a file is settled on first sight


def set_mtime(path, seconds):
    os.utime(path, (seconds, seconds))


class Ticker:
    """Evaluates the sensor like the daemon does: cursor carried over, partition requests applied."""

    def __init__(self, instance, release, warehouse, lake: str = ""):
        self.instance = instance
        self.config = WarehouseConfig(releases=[str(release)], warehouse_dir=str(warehouse), lake_dir=lake)
        self.cursor = None
        self.quiet_seconds = 3600  # how ingest (Ticker.ingest) settles runs

    def __call__(self):
        context = dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources={"warehouse": self.config}
        )
        result = release_files_sensor(self.config.sensor_interval_seconds)(context)
        for request in result.dynamic_partitions_requests:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                self.instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
            else:
                for key in request.partition_keys:
                    self.instance.delete_dynamic_partition(request.partitions_def_name, key)
        self.cursor = result.cursor
        return result

    def partitions(self):
        return sorted(self.instance.get_dynamic_partitions("run_id"))

    def ingest(self, result):
        """Does what the requested runs would do for run_lake: brings those runs' lake partitions up to date."""
        runs, _, _ = find_run_folders(self.config.release_roots())
        return {
            r.partition_key: ingest_run_folder(
                runs[r.partition_key], self.config.lake, 2**20, quiet_seconds=self.quiet_seconds
            )
            for r in result.run_requests
            if r.partition_key
        }


def ingested_runs(result):
    return sorted(r.partition_key for r in result.run_requests if r.partition_key)


def asks_for_release_scan(result):
    return any(r.partition_key is None and r.job_name == "scan_releases" for r in result.run_requests)


@pytest.fixture
def ticker(tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        yield Ticker(instance, tmp_path / "release", tmp_path / "wh")


def test_new_run_folder_adds_a_partition_and_its_files_are_taken_once_settled(tmp_path, ticker, write_epoch):
    release = tmp_path / "release"
    first = write_epoch(release / "run_a", 0)

    result = ticker()
    assert ticker.partitions() == ["run_a"]
    assert asks_for_release_scan(result)
    assert ingested_runs(result) == []  # the file is seconds old: it may still be being written

    result = ticker()  # same size and mtime as on the previous tick: settled
    assert ingested_runs(result) == ["run_a"]
    request = next(r for r in result.run_requests if r.partition_key)
    assert request.job_name == "ingest_runs"
    assert ticker.ingest(result)["run_a"].files_parsed == 1

    result = ticker()  # nothing changed: nothing requested, no file handed over twice
    assert result.run_requests == [] and result.dynamic_partitions_requests == []
    assert first.exists()


def test_a_growing_file_waits_until_its_size_and_mtime_hold_still(tmp_path, ticker, write_epoch):
    run = tmp_path / "release" / "run_a"
    write_epoch(run, 0)
    set_mtime(run / "epoch_000_results.json", OLD)
    growing = run / "epoch_001_results.json"
    text = json.dumps(epoch_document(1))
    growing.write_text(text[:20])

    result = ticker()
    assert ingested_runs(result) == ["run_a"]  # epoch 0 is old, so settled; epoch 1 is not
    assert ticker.ingest(result)["run_a"].files_parsed == 2  # ingest lists the folder itself: both are parsed
    growing.write_text(text[:60])
    assert ingested_runs(ticker()) == []  # grew since the last tick
    growing.write_text(text)
    assert ingested_runs(ticker()) == []  # grew again
    result = ticker()  # unchanged since the last tick
    assert ingested_runs(result) == ["run_a"]
    assert ticker.ingest(result)["run_a"].files_parsed == 1


def test_only_the_runs_whose_files_changed_are_requested(tmp_path, ticker, write_epoch):
    release = tmp_path / "release"
    for run in ("run_a", "run_b", "run_c"):
        for epoch in range(2):
            set_mtime(write_epoch(release / run, epoch, layout="folder" if run == "run_c" else "file"), OLD)
    result = ticker()
    assert ingested_runs(result) == ["run_a", "run_b", "run_c"]
    ticker.ingest(result)

    set_mtime(write_epoch(release / "run_b", 2), OLD)  # a new epoch, already complete
    set_mtime(write_epoch(release / "run_c", 0, epoch_document(0, n=3), layout="folder"), OLD + 5)  # rewritten
    result = ticker()
    assert ingested_runs(result) == ["run_b", "run_c"]
    assert not asks_for_release_scan(result)  # the set of runs did not change
    parsed = {run: r.files_parsed for run, r in ticker.ingest(result).items()}
    assert parsed == {"run_b": 1, "run_c": 1}


def test_a_quarantined_file_that_is_fixed_later_is_picked_up(tmp_path, ticker, write_epoch):
    run = tmp_path / "release" / "run_a"
    bad = write_epoch(run, 0, '{"epoch": 0, "rewards": [')
    set_mtime(bad, OLD)
    result = ticker()
    assert ticker.ingest(result)["run_a"].files_quarantined == 1

    write_epoch(run, 0)  # the fix: a new mtime
    set_mtime(bad, OLD + 10)
    result = ticker()
    assert ingested_runs(result) == ["run_a"]
    outcome = ticker.ingest(result)["run_a"]
    assert (outcome.files_parsed, outcome.files_quarantined, outcome.epochs) == (1, 0, 1)


def test_removed_files_and_run_folders(tmp_path, ticker, write_epoch):
    release = tmp_path / "release"
    for run in ("run_a", "run_b"):
        for epoch in range(2):
            set_mtime(write_epoch(release / run, epoch), OLD)
    ticker.ingest(ticker())

    (release / "run_a" / "epoch_001_results.json").unlink()
    result = ticker()
    assert ingested_runs(result) == ["run_a"]
    assert ticker.ingest(result)["run_a"].epochs == 1

    for path in (release / "run_b").iterdir():
        path.unlink()
    (release / "run_b").rmdir()
    result = ticker()
    assert ticker.partitions() == ["run_a"]
    assert ingested_runs(result) == []
    assert asks_for_release_scan(result)  # release_runs clears the run out of the lake


def test_a_release_and_a_lake_in_a_bucket_are_watched_as_folders_are(bucket, tmp_path):
    fs, name = bucket
    url = f"s3://{name}/release"

    def put(key: str, epoch: int, n: int = 4) -> None:
        fs.pipe_file(f"{url}/{key}", json.dumps(epoch_document(epoch, n=n)).encode())

    with dg.DagsterInstance.ephemeral() as instance:
        ticker = Ticker(instance, url, tmp_path / "wh", lake=f"s3://{name}/lake")
        put("run_a/epoch_000_results.json", 0)
        put("run_b/epoch_000/results.json", 0)
        result = ticker()
        assert ticker.partitions() == ["run_a", "run_b"] and asks_for_release_scan(result)
        assert ingested_runs(result) == []  # objects written seconds ago: a second look first
        result = ticker()
        assert ingested_runs(result) == ["run_a", "run_b"]
        assert [r.files_parsed for r in ticker.ingest(result).values()] == [1, 1]
        assert ticker().run_requests == []  # nothing new: nothing requested

        put("run_a/epoch_001_results.json", 1)
        put("run_b/epoch_000/results.json", 0, n=5)  # rewritten
        ticker()
        result = ticker()
        assert ingested_runs(result) == ["run_a", "run_b"] and not asks_for_release_scan(result)
        assert {run: r.files_parsed for run, r in ticker.ingest(result).items()} == {"run_a": 1, "run_b": 1}

        fs.rm(f"{url}/run_b", recursive=True)
        result = ticker()
        assert ticker.partitions() == ["run_a"] and ingested_runs(result) == []
        assert asks_for_release_scan(result)  # release_runs clears the run out of the lake


def test_files_already_in_the_lake_are_not_handed_to_ingest_again(tmp_path, write_epoch):
    release, lake = tmp_path / "release", tmp_path / "wh" / "lake"
    for epoch in range(3):
        set_mtime(write_epoch(release / "run_a", epoch), OLD)
    runs, _, _ = find_run_folders([release])
    ingest_run_folder(runs["run_a"], lake, 2**20)  # an earlier `grpo-warehouse build`
    set_mtime(write_epoch(release / "run_a", 3), OLD)

    changes = scan_releases([release], lake, set(), {}, now_ns=(OLD + 3600) * 10**9, settle_ns=SETTLE_NS)
    assert changes.new_runs == ["run_a"]
    assert {run: list(files) for run, files in changes.runs_to_ingest.items()} == {
        "run_a": ["run_a/epoch_003_results.json"]
    }


@pytest.fixture
def quiet_run(tmp_path, ticker, write_epoch, monkeypatch):
    """run_a, two epochs long ingested, quiet at once (quiet_seconds 0), as the sensor last saw it; and the
    run ids the sensor lists from then on."""
    ticker.quiet_seconds = 0
    run = tmp_path / "release" / "run_a"
    for epoch in range(2):
        set_mtime(write_epoch(run, epoch), OLD)
    ticker.ingest(ticker())  # the lake now holds the run, and its folder stamps
    listed: list[str] = []
    list_run = pipelines.lake.runs.list_run  # the sensor lists runs through select_runs, as a build does
    monkeypatch.setattr(pipelines.lake.runs, "list_run", lambda r: listed.append(r.run_id) or list_run(r))
    return run, listed


def test_a_quiet_run_is_not_listed(ticker, quiet_run):
    run, listed = quiet_run
    result = ticker()
    assert result.run_requests == [] and listed == []
    assert ticker.partitions() == ["run_a"]  # still known: not a run that went away
    assert result.skip_reason.skip_message == (
        "no new, changed or removed epoch file in 1 run folder(s) (1 quiet, not listed)"
    )

    result = ticker()  # and stays so
    assert result.run_requests == [] and listed == []


def test_a_quiet_run_that_changes_is_listed_and_only_its_new_file_handed_over(ticker, write_epoch, quiet_run):
    run, listed = quiet_run
    ticker()
    set_mtime(write_epoch(run, 2), OLD)  # the run folder changes: its stamps no longer hold
    changes = scan_releases(
        ticker.config.release_roots(),
        lake_dir(ticker.config.warehouse),
        {"run_a"},
        parse_cursor(ticker.cursor)[1],
        now_ns=(OLD + 3600) * 10**9,
        settle_ns=SETTLE_NS,
    )
    assert listed == ["run_a"] and changes.quiet_runs == 0
    assert list(changes.runs_to_ingest["run_a"]) == ["run_a/epoch_002_results.json"]  # the lake has the other two


def test_a_quiet_run_with_a_new_entry_beside_its_epochs_is_inventoried_again(ticker, quiet_run):
    run, listed = quiet_run
    ticker()
    (run / "notes.txt").write_text("a stray file: the run's inventory (lake.files) changes")
    result = ticker()
    assert listed == ["run_a"] and ingested_runs(result) == ["run_a"]
    assert ticker.ingest(result)["run_a"].files_parsed == 0


def test_the_sensor_asks_for_the_runs_a_build_would_ingest(tmp_path, write_epoch):
    release, lake = tmp_path / "release", tmp_path / "lake"
    for run in ("run_a", "run_b", "run_c", "run_d"):
        set_mtime(write_epoch(release / run, 0), OLD)
    runs, _, _ = find_run_folders([release])
    for run in runs.values():
        ingest_run_folder(run, lake, 2**20)
    set_mtime(write_epoch(release / "run_a", 1), OLD)  # a new epoch file
    (release / "run_b" / "notes.txt").write_text("inventoried, not parsed")  # the run's inventory changes
    partition_file(lake, "files", "run_c").unlink()  # a lake partition lost: the build writes it again
    runs, _, _ = find_run_folders([release])
    stale = select_runs(runs.values(), lake, 2**20).stale
    changes = scan_releases([release], lake, set(runs), {}, now_ns=(OLD + 3600) * 10**9, settle_ns=SETTLE_NS)
    assert stale == ["run_a", "run_b", "run_c"]
    assert sorted(changes.runs_to_ingest) == stale
    assert changes.runs_to_ingest["run_a"] == {
        "run_a/epoch_001_results.json": ((release / "run_a" / "epoch_001_results.json").stat().st_size, OLD * 10**9)
    }


def test_settling_by_age_and_by_a_second_look(tmp_path, write_epoch):
    release = tmp_path / "release"
    path = write_epoch(release / "run_a", 0)
    set_mtime(path, 1_000)
    mtime_ns = 1_000 * 10**9
    stat = (path.stat().st_size, mtime_ns)
    young = scan_releases([release], tmp_path / "lake", set(), {}, now_ns=mtime_ns + SETTLE_NS - 1, settle_ns=SETTLE_NS)
    assert young.runs_to_ingest == {} and young.waiting == {"run_a": ["run_a/epoch_000_results.json"]}
    old = scan_releases([release], tmp_path / "lake", set(), {}, now_ns=mtime_ns + SETTLE_NS, settle_ns=SETTLE_NS)
    assert old.runs_to_ingest == {"run_a": {"run_a/epoch_000_results.json": stat}}
    second = scan_releases(
        [release], tmp_path / "lake", set(), young.unsettled, now_ns=mtime_ns + 1, settle_ns=SETTLE_NS
    )
    assert second.runs_to_ingest == {"run_a": {"run_a/epoch_000_results.json": stat}} and second.unsettled == {}


def test_a_rewrite_of_the_same_size_with_a_new_mtime_is_taken(tmp_path, ticker, write_epoch):
    run = tmp_path / "release" / "run_a"
    path = write_epoch(run, 0, epoch_document(0, loss=0.5))
    set_mtime(path, OLD)
    assert ticker.ingest(ticker())["run_a"].files_parsed == 1
    assert ingested_runs(ticker()) == []
    size = path.stat().st_size
    write_epoch(run, 0, epoch_document(0, loss=0.7))  # one digit changed: the same number of bytes
    set_mtime(path, OLD + 60)
    assert path.stat().st_size == size
    result = ticker()
    assert ingested_runs(result) == ["run_a"]
    assert ticker.ingest(result)["run_a"].files_parsed == 1
    # A sensor starting afresh (no cursor) compares with the lake's manifest too: the same holds.
    write_epoch(run, 0, epoch_document(0, loss=0.9))
    set_mtime(path, OLD + 120)
    fresh = scan_releases(
        [tmp_path / "release"],
        lake_dir(tmp_path / "wh"),
        {"run_a"},
        {},
        now_ns=(OLD + 200) * 10**9,
        settle_ns=SETTLE_NS,
    )
    assert list(fresh.runs_to_ingest["run_a"]) == ["run_a/epoch_000_results.json"]


def test_a_missing_release_root_does_not_look_like_deleted_runs(tmp_path, write_epoch):
    release = tmp_path / "release"
    set_mtime(write_epoch(release / "run_a", 0), OLD)
    release.rename(tmp_path / "unmounted")
    second = scan_releases([release], tmp_path / "lake", {"run_a"}, {}, now_ns=OLD * 10**9, settle_ns=SETTLE_NS)
    assert second.gone_runs == [] and second.new_runs == []
    (tmp_path / "unmounted").rename(release)
    (release / "run_a" / "epoch_000_results.json").unlink()
    (release / "run_a").rmdir()
    third = scan_releases([release], tmp_path / "lake", {"run_a"}, {}, now_ns=OLD * 10**9, settle_ns=SETTLE_NS)
    assert third.gone_runs == ["run_a"]


def test_cursor_round_trips_and_a_garbled_one_starts_afresh():
    assert parse_cursor(dump_cursor(7, {"run_b": "2f", "run_a": "1e"})) == (7, {"run_a": "1e", "run_b": "2f"})
    assert parse_cursor("{not json") == (0, {})
    assert parse_cursor("zlib:eJwLycgsVgCiRIWS1OISAC3sBW0=") == (0, {})  # the older, compressed format
    assert parse_cursor(json.dumps({"format": 999})) == (0, {})


def test_the_cursor_is_small_and_readable_and_skip_reasons_say_what_is_happening(tmp_path, ticker, write_epoch):
    release = tmp_path / "release"
    for run in range(40):
        for epoch in range(5):
            set_mtime(write_epoch(release / f"run_{run:02d}", epoch), OLD)
    ticker.ingest(ticker())
    growing = release / "run_07" / "epoch_005_results.json"
    growing.write_text('{"epoch": 5, "rewards": [')  # being written: seconds old, not yet settled
    result = ticker()
    assert result.run_requests == []
    assert result.skip_reason.skip_message == (
        "waiting for 1 file(s) still being written to settle "
        "(run_07: run_07/epoch_005_results.json); they are taken once unchanged for a tick"
    )
    assert len(ticker.cursor) < 100 and list(json.loads(ticker.cursor)["unsettled"]) == ["run_07"]
    set_mtime(growing, OLD)  # finished long ago after all
    assert ingested_runs(ticker()) == ["run_07"]
    assert json.loads(ticker.cursor)["unsettled"] == {}


def test_runs_are_named_jobs_tagged_with_what_they_refresh_and_not_launched_twice(tmp_path, ticker, write_epoch):
    release = tmp_path / "release"
    set_mtime(write_epoch(release / "run_a", 0), OLD)
    result = ticker()
    scan, ingest = result.run_requests
    assert (scan.job_name, scan.tags["grpo/refreshes"]) == ("scan_releases", "the run list: 1 new run folder(s)")
    assert (ingest.job_name, ingest.partition_key) == ("ingest_runs", "run_a")
    assert ingest.tags["grpo/refreshes"] == "lake partition run_a: 1 new, changed or removed epoch file(s)"
    # Not ingested yet: while its run is queued or running, a later tick asks for nothing more; once it is over and
    # the lake still lacks the files (the run failed), it asks again.
    changes = scan_releases(
        [release], lake_dir(ticker.config.warehouse), {"run_a"}, {}, now_ns=(OLD + 3600) * 10**9, settle_ns=SETTLE_NS
    )
    assert release_sensor_result(changes, 1, {"run_a"}, frozenset({"run_a"})) == ([], [])
    [again], _ = release_sensor_result(changes, 1, {"run_a"})
    assert (again.partition_key, again.run_key) == ("run_a", "run_a@1")


def test_the_sensor_and_schedule_run_by_default():
    from pipelines.definitions import defs

    repo = defs().get_repository_def()
    assert repo.get_sensor_def("release_files_sensor").default_status == dg.DefaultSensorStatus.RUNNING
    assert repo.get_sensor_def("models_and_exports_automation").default_status == dg.DefaultSensorStatus.RUNNING
    assert repo.get_schedule_def("nightly_refresh").default_status == dg.DefaultScheduleStatus.RUNNING
    graph = repo.asset_graph
    assert graph.get(dg.AssetKey("fact_epochs")).automation_condition is not None
    assert graph.get(dg.AssetKey(["lake", "epochs"])).automation_condition is None  # the sensor drives ingest
