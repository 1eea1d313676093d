"""Readers, builds and writers at the same time: nobody blocks a reader, writers take turns, nothing is corrupted."""

import multiprocessing
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import duckdb
import pytest
from filelock import FileLock

from pipelines.lake.paths import manifest_file
from pipelines.lake.runs import ingest_run_folder
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import open_build_db

pytestmark = pytest.mark.slow  # builds, readers and writers in child processes

READER = textwrap.dedent("""
    import sys, duckdb
    con = duckdb.connect(sys.argv[1], read_only=True)
    count = "select count(*), sum(n_trajectories) from fact_epochs"
    print(*con.execute(count).fetchone(), flush=True)
    sys.stdin.readline()  # the test refreshes the warehouse meanwhile
    print(*con.execute(count).fetchone(), flush=True)
    print(con.execute("select count(*) from fact_trajectories t join dim_runs d using (run_id)").fetchone()[0],
          flush=True)
""")


def cli(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_a_reader_keeps_its_snapshot_during_a_refresh_and_a_new_reader_sees_the_new_one(
    tmp_path, write_epoch, build, query
):
    release, wh = tmp_path / "release", tmp_path / "wh"
    for epoch in range(3):
        write_epoch(release / "run_a", epoch)
    assert build([release], wh) == 0

    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(wh / "warehouse.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout.readline().split() == ["3", "12"]
        write_epoch(release / "run_a", 3)
        write_epoch(release / "run_b", 0)
        assert build([release], wh) == 0  # not blocked by the open read-only connection
        assert query(wh, "select count(*), sum(n_trajectories) from fact_epochs") == [(5, 20)]
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().split() == ["3", "12"]  # the old file, intact, until it disconnects
        assert reader.stdout.readline().split() == ["12"]
    finally:
        reader.stdin.close()
        assert reader.wait(timeout=60) == 0


def test_a_second_build_waits_for_the_first_or_fails_with_a_clear_message(tmp_path, write_epoch, query):
    release, wh = tmp_path / "release", tmp_path / "wh"
    write_epoch(release / "run_a", 0)
    wh.mkdir()
    held = FileLock(wh / ".build.lock")
    held.acquire()  # stands in for a build in progress in another process
    try:
        impatient = cli("build", "--release", str(release), "--warehouse", str(wh), "--wait", "0")
        output, _ = impatient.communicate(timeout=120)
        assert impatient.returncode == 2
        assert f"another build of {wh} is still running" in output.splitlines()[-1]

        patient = cli("build", "--release", str(release), "--warehouse", str(wh), "--wait", "600", "--workers", "1")
        waiting = patient.stdout.readline()
        while "waiting" not in waiting and waiting:
            waiting = patient.stdout.readline()
        assert f"another build of {wh} is running; waiting" in waiting
        assert not (wh / "warehouse.duckdb").exists()  # it waited instead of building
    finally:
        held.release()
    patient.communicate(timeout=300)
    assert patient.returncode == 0
    assert query(wh, "select count(*) from fact_epochs") == [(1,)]


def _write_through_build_db(args) -> None:
    warehouse, writer, rounds = args
    for round_ in range(rounds):
        with open_build_db(Path(warehouse)) as con:
            con.execute("create table if not exists writes (writer int, round int)")
            con.execute(f"create or replace table scratch_{writer} as select range as x from range({round_ + 1})")
            con.execute("insert into writes values (?, ?)", [writer, round_])


def _pool(workers: int) -> ProcessPoolExecutor:
    """Spawned worker processes; a worker that dies fails the test (BrokenProcessPool) where a Pool would hang."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def test_writers_in_several_processes_take_turns_on_the_build_database(tmp_path):
    # What the Dagster UI's multiprocess executor does: model steps in separate processes, one build database.
    with _pool(3) as pool:
        list(pool.map(_write_through_build_db, [(str(tmp_path), writer, 15) for writer in range(3)]))
    with duckdb.connect(str(tmp_path / ".build" / "build.duckdb"), read_only=True) as con:
        assert con.execute("select writer, count(*) from writes group by 1 order by 1").fetchall() == [
            (0, 15),
            (1, 15),
            (2, 15),
        ]
        assert con.execute("select count(*) from scratch_2").fetchone() == (15,)


def _ingest(args):
    release, lake, run_id = args
    runs, _, _ = find_run_folders([Path(release)])
    return ingest_run_folder(runs[run_id], Path(lake), 2**20).files_parsed


def test_ingest_of_runs_in_parallel_processes_including_the_same_run_twice(tmp_path, write_epoch):
    # Two Dagster runs materializing partitions at once, one of them twice (a sensor run and a manual one).
    release, lake = tmp_path / "release", tmp_path / "lake"
    for epoch in range(40):
        write_epoch(release / "run_a", epoch)
        write_epoch(release / "run_b", epoch, layout="folder")
    jobs = [(str(release), str(lake), run) for run in ("run_a", "run_b", "run_a", "run_b")]
    with _pool(4) as pool:
        parsed = list(pool.map(_ingest, jobs))
    # The per-run lock makes the second ingest of a run wait, then find nothing left to parse.
    assert sorted(parsed) == [0, 0, 40, 40]
    for run in ("run_a", "run_b"):
        assert manifest_file(lake, run).exists()
    with duckdb.connect() as con:
        rows = con.execute(
            f"select run_id, count(*), count(distinct epoch) from '{lake}/epochs/*/data.parquet' group by 1 order by 1"
        ).fetchall()
    assert rows == [("run_a", 40, 40), ("run_b", 40, 40)]
