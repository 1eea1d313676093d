"""Run names and warehouse paths are data, never patterns: any name a folder can have, under any folder, is stored and
queried under its exact run id, its rows neither lost, doubled nor mixed with another run's."""

import os

import duckdb
import pytest
from helpers import epoch_document, write_epoch_file
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pipelines.lake.paths import lake_runs, remove_run, run_key
from pipelines.lake.runs import ingest_runs, select_runs
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import create_lake_views, duckdb_path, duckdb_path_problem

NAME_MAX = 255  # bytes in one path component, on the usual filesystems


def _fits(name: str) -> bool:
    return name not in (".", "..") and not name.startswith(".") and len(os.fsencode(name)) <= NAME_MAX


# Any character a folder name can hold (no "/" nor NUL), with the troublesome ones drawn often.
_characters = st.one_of(
    st.sampled_from(list("*?[]{}=%'\"\\ \n\t-_,;:!~$&()^") + ["é", "ß", "中", "🙂", "A", "a"]),
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"),
)
run_names = st.one_of(
    st.text(_characters, min_size=1, max_size=40),
    st.builds(lambda head, n: (head * n)[:NAME_MAX], st.sampled_from(["r", "é", "中"]), st.integers(60, 260)),
).filter(_fits)
# A folder above the warehouse: `key=value` (a hive partition to a reader that looks for one) and glob characters.
hostile_folders = st.one_of(
    st.sampled_from(["exp=grpo", "date=2026-11-30", "w[1]", "a?b", "all*", "q'uote", "sp ace", "new\nline"]),
    st.text(_characters.filter(lambda c: c != "\\"), min_size=1, max_size=12),
).filter(_fits)


def _write_release(release, runs: dict[str, list[int]]) -> None:
    """Each run folder with one epoch file per entry, holding that many trajectories."""
    for name, sizes in runs.items():
        for epoch, n in enumerate(sizes):
            layout = "file" if epoch % 2 else "folder"
            write_epoch_file(release / name, epoch, epoch_document(epoch, n=n), layout=layout)


def _lake_counts(lake) -> dict[str, tuple[int, int]]:
    with duckdb.connect() as con:
        create_lake_views(con, lake)
        epochs = dict(con.execute("select run_id, count(*) from lake.epochs group by 1").fetchall())
        trajectories = dict(con.execute("select run_id, count(*) from lake.trajectories group by 1").fetchall())
        columns = [name for name, *_ in con.execute("describe lake.trajectories").fetchall()]
    assert not {"exp", "date", "run_id=", "a"} & set(columns)  # no column from a folder name
    return {run_id: (epochs.get(run_id, 0), trajectories.get(run_id, 0)) for run_id in epochs.keys() | trajectories}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.dictionaries(run_names, st.lists(st.integers(0, 5), min_size=1, max_size=3), min_size=1, max_size=4),
    above=st.lists(hostile_folders, min_size=1, max_size=2),
)
@example(runs={"Run": [2], "run": [3], "run_*": [1], "run_?": [4], "[r]un": [1], "r": [5]}, above=["exp=grpo", "a?b"])
@example(runs={"run_id=x": [2], "é" * 127: [1], "é" * 126 + "e": [3], "-lead": [1]}, above=["date=1", "w[1]"])
def test_per_run_rows_equal_the_files_whatever_the_names(tmp_path_factory, runs, above):
    base = tmp_path_factory.mktemp("hostile")
    release = base.joinpath(*above, "release")
    lake = base.joinpath(*above, "wh", "lake")
    _write_release(release, runs)

    folders, _, problems = find_run_folders([release])
    assert problems == [] and set(folders) == set(runs)
    ingest_runs(list(folders.values()), lake, 1 << 20, workers=1)

    expected = {name: (len(sizes), sum(sizes)) for name, sizes in runs.items()}
    assert _lake_counts(lake) == expected
    assert set(lake_runs(lake)) == set(runs)
    assert select_runs(folders.values(), lake, 1 << 20).stale == []

    # A new epoch file for one run: its stored rows are read back (by their exact path) and merged with the new ones.
    grown = sorted(runs)[-1]
    write_epoch_file(release / grown, len(runs[grown]), epoch_document(len(runs[grown]), n=2))
    ingest_runs(list(folders.values()), lake, 1 << 20, workers=1)
    expected[grown] = (expected[grown][0] + 1, expected[grown][1] + 2)
    assert _lake_counts(lake) == expected

    # One run leaves: its rows alone go.
    gone = sorted(runs)[0]
    remove_run(lake, gone)
    expected.pop(gone)
    assert _lake_counts(lake) == expected


def test_run_keys_are_short_safe_and_tell_case_apart():
    names = ["Run", "run", "RUN", "run=1", "r*n", "r?n", "[r]", "é" * 127, "-x", "x" * 255]
    keys = [run_key(name) for name in names]
    assert len(set(keys)) == len(names)
    assert len({key.lower() for key in keys}) == len(names)  # distinct on a case-insensitive disk too
    for key in keys:
        assert len(key) <= 65 and set(key) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-"), key


def test_duckdb_reads_a_path_with_glob_characters_literally(tmp_path):
    """`a?b` is also a pattern matching `aXb`: read as given, the neighbour's rows would be added."""
    import polars as pl

    for name, value in (("a?b", 1), ("aXb", 2), ("w[1]", 3), ("w1", 4), ("c*d", 5), ("cd", 6)):
        (tmp_path / name).mkdir()
        pl.DataFrame({"x": [value]}).write_parquet(tmp_path / name / "d.parquet")
    with duckdb.connect() as con:
        for name, value in (("a?b", 1), ("w[1]", 3), ("c*d", 5)):
            path = duckdb_path(tmp_path / name / "d.parquet")
            assert con.execute("select x from read_parquet(?)", [path]).fetchall() == [(value,)], name


@pytest.mark.parametrize(
    ("name", "usable"),
    [
        ("exp=grpo", True),
        ("w[1]", True),
        ("a*b", True),
        ("q'uote", True),
        ("a#b", True),
        ("a?b", False),
        ("back\\slash", False),
    ],
)
def test_duckdb_keeps_a_database_under_a_folder_unless_it_says_why_not(tmp_path, name, usable):
    folder = tmp_path / name
    folder.mkdir()
    assert (duckdb_path_problem(folder) is None) is usable
    if usable:  # the check is DuckDB's own behaviour: a database there is written and read back
        with duckdb.connect(str(folder / "x.duckdb")) as con:
            con.execute("create table t as select 42 as x")
            con.execute("checkpoint")
        with duckdb.connect(str(folder / "x.duckdb"), read_only=True) as con:
            assert con.execute("select x from t").fetchall() == [(42,)]


def test_a_run_folder_named_in_bytes_that_are_not_utf8_is_reported_and_the_others_load(tmp_path):
    release = tmp_path / "rel"
    write_epoch_file(release / os.fsdecode(b"bad\xff"), 0)
    write_epoch_file(release / "good", 0, epoch_document(0, n=3))
    (release / "good" / os.fsdecode(b"note\xfe.txt")).write_text("x")

    runs, entries, problems = find_run_folders([release])
    assert list(runs) == ["good"] and problems == []
    [entry] = entries
    assert (entry.source_path, entry.error_kind, entry.is_problem) == ("rel/bad\\xff", "bad_name", True)
    [result] = ingest_runs(list(runs.values()), tmp_path / "lake", 1 << 20, workers=1)
    assert (result.epochs, result.trajectories) == (1, 3)
    with duckdb.connect() as con:
        create_lake_views(con, tmp_path / "lake")
        assert con.execute("select source_path, status from lake.files order by 1").fetchall() == [
            ("good/epoch_000_results.json", "loaded"),
            ("good/note\\xfe.txt", "skipped"),
        ]


HOSTILE_RUNS = {
    "run*": 2,
    "run?": 3,
    "Run?": 1,
    "a=b": 2,
    "new\nline": 1,
    "tab\there": 2,
    "dots...": 3,
    "é" * 127: 1,
    "-x": 2,
    "[r]": 1,
}


@pytest.mark.slow
def test_a_build_of_hostile_names_under_a_hostile_path_counts_every_run_apart(tmp_path, build, query):
    """Through Dagster too: a name Dagster refuses as a partition key (a newline, a tab, `...`) is stored and
    queried under its exact run id."""
    base = tmp_path / "exp=grpo" / "w[1]*"
    release = base / "rel"
    for name, epochs in HOSTILE_RUNS.items():
        for epoch in range(epochs):
            write_epoch_file(release / name, epoch, epoch_document(epoch, n=epoch + 2))
    wh = base / "date=2026-11-30" / "wh"
    assert build([release], wh) == 0
    expected = {name: (epochs, sum(epoch + 2 for epoch in range(epochs))) for name, epochs in HOSTILE_RUNS.items()}
    rows = query(
        wh,
        "select e.run_id, count(distinct e.epoch), count(*) from fact_epochs e "
        "join fact_trajectories t using (run_id, epoch) group by 1",
    )
    assert {run_id: (epochs, trajectories) for run_id, epochs, trajectories in rows} == expected
    assert sorted(r[0] for r in query(wh, "select run_id from dim_runs")) == sorted(HOSTILE_RUNS)
    assert build([release], wh) == 0  # nothing to do the second time, and nothing lost
    assert query(wh, "select count(*) from fact_trajectories") == [(sum(t for _, t in expected.values()),)]


def test_the_sensor_asks_for_valid_partition_keys_whatever_the_names(tmp_path):
    from pipelines.defs.ingest.partitions import partition_key
    from pipelines.defs.ingest.sensors import ReleaseChanges, release_sensor_result

    names = ["plain", "new\nline", "dots...", "tab\there"]
    changes = ReleaseChanges(names, [], {name: {"x": (1, 1)} for name in names}, {}, {})
    requests, [add] = release_sensor_result(changes, 1, set())
    keys = sorted(partition_key(name) for name in names)
    assert sorted(add.partition_keys) == keys and "plain" in keys and len(set(keys)) == 4
    assert sorted(r.partition_key for r in requests if r.partition_key) == keys
    for key in keys:
        assert not any(part in key for part in ("...", "\n", "\t"))
