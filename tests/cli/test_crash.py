"""kill -9 during a build, a write or a publication: the published warehouse stays intact, the next build completes."""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
from filelock import FileLock
from helpers import epoch_document

from pipelines.lake.paths import manifest_file, partition_file
from pipelines.warehouse_db import publish

pytestmark = pytest.mark.slow  # builds and writers killed in child processes

RUNS = ("run_a", "run_b", "run_c")
SNAPSHOT = (
    "select (select count(*) from fact_epochs), (select sum(loss) from fact_epochs), "
    "(select count(*) from fact_trajectories), (select count(*) from dim_runs), "
    "(select count(*) from file_inventory)"
)


def write_epochs(write_epoch, release: Path, epochs: range) -> None:
    for run in RUNS:
        for epoch in epochs:
            write_epoch(release / run, epoch, epoch_document(epoch, n=32))


def expected_snapshot(n_epochs: int) -> tuple:
    """What the warehouse holds for RUNS with epochs 0..n_epochs-1, worked out from epoch_document."""
    loss = sum(0.5 + e for e in range(n_epochs))  # epoch_document's loss is 0.5 + epoch
    return (len(RUNS) * n_epochs, len(RUNS) * loss, len(RUNS) * n_epochs * 32, len(RUNS), len(RUNS) * n_epochs)


def snapshot(warehouse: Path) -> tuple:
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(SNAPSHOT).fetchone()


def build_and_kill(release: Path, warehouse: Path, marker: str, until=None) -> str:
    """Starts `grpo-warehouse build`, kill -9s it once a line containing marker is printed and until() holds."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "build",
            "--release",
            str(release),
            "--warehouse",
            str(warehouse),
            "--workers",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = []
    for line in process.stdout:
        output.append(line)
        if marker in line:
            while until is not None and not until() and process.poll() is None:
                time.sleep(0.002)
            process.kill()
            break
    process.wait(timeout=120)
    assert process.returncode == -9, "".join(output)  # it was killed, not finished
    return "".join(output)


def assert_manifests_match_the_lake(lake: Path) -> None:
    """A manifest never claims a loaded file whose rows are not in the run's epochs partition."""
    for manifest_path in (lake / "manifests").glob("*.json"):
        manifest = json.loads(manifest_path.read_text())
        loaded = {p for p, o in manifest["files"].items() if o["status"].startswith("loaded")}
        run_id = manifest["run_id"]
        in_lake = set(pl.read_parquet(partition_file(lake, "epochs", run_id))["source_path"]) if loaded else set()
        assert loaded <= in_lake, run_id


def test_a_build_killed_during_ingest_and_during_models_then_rerun(tmp_path, write_epoch, build):
    release, wh = tmp_path / "release", tmp_path / "wh"
    write_epochs(write_epoch, release, range(0, 20))
    assert build([release], wh) == 0
    old, new = expected_snapshot(20), expected_snapshot(120)
    assert snapshot(wh) == pytest.approx(old)

    write_epochs(write_epoch, release, range(20, 120))
    # During ingest: the first of three runs is in the lake, the others are not yet.
    build_and_kill(release, wh, "[1/3] run_")
    assert snapshot(wh) == pytest.approx(old)  # readable, and still the last published build
    assert_manifests_match_the_lake(wh / "lake")
    # During the models: once the first rebuilt model has reached the build database (the build database,
    # or its WAL, changed), and long before the publication that follows the last model and the exports.
    build_db = wh / ".build" / "build.duckdb"
    before = build_db.stat().st_mtime_ns
    # run_a is in the lake already: this build ingests the other two runs only.
    build_and_kill(
        release,
        wh,
        "[2/2] run_",
        until=lambda: build_db.with_suffix(".duckdb.wal").exists() or build_db.stat().st_mtime_ns != before,
    )
    assert snapshot(wh) in (pytest.approx(old), pytest.approx(new))  # one complete snapshot or the other
    assert_manifests_match_the_lake(wh / "lake")

    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "build",
            "--release",
            str(release),
            "--warehouse",
            str(wh),
            "--workers",
            "1",
            "--wait",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    # --wait 0: the dead build's locks were released by the kernel, so this one did not have to wait.
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert snapshot(wh) == pytest.approx(new)
    assert list(wh.glob(".warehouse.duckdb.*.tmp")) == []


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pipelines.warehouse_db import open_build_db
    with open_build_db(sys.argv[1]) as con:
        con.execute("create table after_crash as select range as x from range(1000)")
        print("committed", flush=True)
        time.sleep(600)  # killed here: the table is committed in the WAL, never checkpointed into the file
""")


def test_a_writer_killed_after_committing_leaves_a_wal_that_the_next_publish_folds_in(tmp_path):
    wh = tmp_path / "wh"
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(wh)], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "committed"
    writer.kill()
    writer.wait(timeout=60)
    assert (wh / ".build" / "build.duckdb.wal").exists()

    lock = FileLock(wh / ".build" / "db.lock")
    lock.acquire(timeout=30)  # free again: the kernel dropped the dead process's flock
    lock.release()
    publish(wh)
    with duckdb.connect(str(wh / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*), sum(x) from after_crash").fetchone() == (1000, 999 * 1000 // 2)


PUBLISH_LOOP = textwrap.dedent("""
    import sys
    from pipelines.warehouse_db import publish
    while True:
        publish(sys.argv[1])
        print("published", flush=True)
""")


def test_a_publish_killed_midway_leaves_the_published_file_intact(tmp_path):
    wh = tmp_path / "wh"
    build_db = wh / ".build" / "build.duckdb"
    build_db.parent.mkdir(parents=True)
    with duckdb.connect(str(build_db)) as con:
        con.execute("create table facts as select range as x, range * 0.5 as y from range(200000)")
    publish(wh)
    stale = wh / ".warehouse.duckdb.999999.tmp"  # as a publish killed during its copy leaves behind
    stale.write_bytes(b"half a database")

    # Publish over and over, and kill the publisher at whatever point it has reached.
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISH_LOOP, str(wh)], stdout=subprocess.PIPE, text=True)
    for _ in range(3):
        assert publisher.stdout.readline().strip() == "published"
    publisher.kill()
    publisher.wait(timeout=60)

    with duckdb.connect(str(wh / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*), sum(x) from facts").fetchone() == (200000, 199999 * 200000 // 2)
    assert not stale.exists()  # cleaned by the publications since
    publish(wh)
    assert list(wh.glob(".warehouse.duckdb.*.tmp")) == []
    with duckdb.connect(str(wh / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from facts").fetchone() == (200000,)


def test_the_manifest_is_written_last(tmp_path, write_epoch, monkeypatch):
    """A crash between the Parquet writes and the manifest only means the files are parsed again."""
    import pipelines.lake.ingest
    from pipelines.lake.runs import ingest_run_folder
    from pipelines.release.releases import find_run_folders

    release, lake = tmp_path / "release", tmp_path / "lake"
    for epoch in range(2):
        write_epoch(release / "run_a", epoch)

    def crash(text, path):
        raise SystemExit("killed before the manifest")

    monkeypatch.setattr(pipelines.lake.ingest, "write_text_atomically", crash)
    runs, _, _ = find_run_folders([release])
    with pytest.raises(SystemExit):
        ingest_run_folder(runs["run_a"], lake, 2**20)
    assert partition_file(lake, "epochs", "run_a").exists() and not manifest_file(lake, "run_a").exists()
    monkeypatch.undo()
    result = ingest_run_folder(runs["run_a"], lake, 2**20)
    assert (result.files_parsed, result.epochs) == (2, 2)
