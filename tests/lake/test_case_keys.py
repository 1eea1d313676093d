"""Extra keys that differ only in case (`lr`, `LR`), in one run or across runs: the lake keeps each as spelled, the
views give each a column of its own named with its case, no value lands in another key's column, and a warning says
which column holds which key."""

import duckdb
import polars as pl
import pytest
from helpers import epoch_document, write_epoch_file
from hypothesis import example, given
from hypothesis import strategies as st

from pipelines.lake import case_keys
from pipelines.lake.case_keys import case_columns
from pipelines.lake.paths import partition_file
from pipelines.lake.runs import ingest_runs
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import create_lake_views


def ingest(release, lake) -> None:
    runs, _, _ = find_run_folders([release])
    ingest_runs(list(runs.values()), lake, 1 << 20, workers=1)


def views(lake, sql: str) -> list[tuple]:
    with duckdb.connect() as con:
        create_lake_views(con, lake)
        return con.execute(sql).fetchall()


def columns(lake, view: str) -> list[str]:
    return [name for name, *_ in views(lake, f"describe lake.{view}")]


@pytest.fixture
def release(tmp_path, write_epoch):
    """run_a spells the key both ways in each epoch; run_b only `lr`, run_c only `LR`; per trajectory, run_a has
    `score` and `Score`."""
    rel = tmp_path / "rel"
    for epoch, (lower, upper) in enumerate([(0.1, 7.0), (0.2, 8.0)]):
        document = epoch_document(epoch, n=2, lr=lower, LR=upper, score=[1, 2], Score=[10, 20])
        write_epoch(rel / "run_a", epoch, document)
    write_epoch(rel / "run_b", 0, epoch_document(0, n=2, lr=0.3))
    write_epoch(rel / "run_c", 0, epoch_document(0, n=2, LR=9.0))
    return rel


def test_each_spelling_has_its_own_column_in_one_run_and_across_runs(tmp_path, release):
    lake = tmp_path / "lake"
    ingest(release, lake)
    # The lake keeps the keys as spelled.
    run_a = pl.read_parquet(partition_file(lake, "epochs", "run_a"))
    assert run_a.select("lr", "LR").rows() == [(0.1, 7.0), (0.2, 8.0)]

    assert [c for c in columns(lake, "epochs") if c.lower().startswith("lr")] == ["LR__upper_1_2", "lr__lower"]
    assert views(lake, 'select run_id, epoch, "LR__upper_1_2", "lr__lower" from lake.epochs order by 1, 2') == [
        ("run_a", 0, 7.0, 0.1),
        ("run_a", 1, 8.0, 0.2),
        ("run_b", 0, None, 0.3),
        ("run_c", 0, 9.0, None),
    ]
    assert views(lake, 'select "score__lower", "Score__upper_1" from lake.trajectories where run_id = \'run_a\'') == [
        (1, 10),
        (2, 20),
        (1, 10),
        (2, 20),
    ]
    notes = views(lake, "select run_id, severity, action, message from lake.errors where error_kind = 'case_keys'")
    assert sorted(notes) == [
        (
            None,
            "warning",
            "loaded",
            "extra key(s) `LR`, `lr` differ only in case, which SQL names ignore: fact_epochs has `LR` as "
            "`LR__upper_1_2`, `lr` as `lr__lower`",
        ),
        (
            None,
            "warning",
            "loaded",
            "extra key(s) `Score`, `score` differ only in case, which SQL names ignore: fact_trajectories has "
            "`Score` as `Score__upper_1`, `score` as `score__lower`",
        ),
    ]


def test_a_key_spelled_one_way_keeps_its_name_until_another_spelling_comes(tmp_path, write_epoch):
    lake, only_lower = tmp_path / "lake", tmp_path / "rel"
    write_epoch(only_lower / "run_b", 0, epoch_document(0, n=2, lr=0.3))
    write_epoch(only_lower / "run_d", 0, epoch_document(0, n=2, Momentum=0.9))
    ingest(only_lower, lake)
    assert views(lake, "select run_id, lr, Momentum from lake.epochs order by 1") == [
        ("run_b", 0.3, None),
        ("run_d", None, 0.9),
    ]
    assert views(lake, "select count(*) from lake.errors where error_kind = 'case_keys'") == [(0,)]

    # A run spelling it `LR` comes: neither spelling keeps the bare name, so that no query of `lr` reads `LR`'s values.
    write_epoch(only_lower / "run_c", 0, epoch_document(0, n=2, LR=9.0))
    ingest(only_lower, lake)
    assert views(lake, 'select run_id, "LR__upper_1_2", "lr__lower" from lake.epochs order by 1') == [
        ("run_b", None, 0.3),
        ("run_c", 9.0, None),
        ("run_d", None, None),
    ]
    with pytest.raises(duckdb.BinderException):
        views(lake, "select lr from lake.epochs")


def test_a_key_named_as_a_case_column_is_renamed_too(tmp_path, write_epoch):
    rel, lake = tmp_path / "rel", tmp_path / "lake"
    write_epoch(rel / "run", 0, epoch_document(0, n=1, lr=1.0, LR=2.0, lr__lower=3.0))  # one file: read by position
    ingest(rel, lake)
    assert views(lake, 'select "LR__upper_1_2", "lr__lower", "lr__lower__lower" from lake.epochs') == [(2.0, 1.0, 3.0)]


def test_the_views_read_the_column_names_of_new_or_rewritten_files_alone(tmp_path, release, monkeypatch):
    lake = tmp_path / "lake"
    ingest(release, lake)
    read, column_names = [], case_keys.column_names
    monkeypatch.setattr(case_keys, "column_names", lambda path: read.append(path) or column_names(path))
    with duckdb.connect(str(tmp_path / "build.duckdb")) as con:
        create_lake_views(con, lake)
        first = len(read)
        assert first == 3 + 2  # one file of each schema: of the epochs, three; of the trajectories, two
        write_epoch_file(release / "run_b", 1, epoch_document(1, n=2, lr=0.4))
        ingest(release, lake)
        read.clear()
        create_lake_views(con, lake)
        # run_b's partitions are rewritten: its files alone are read (its epochs and trajectories, at most)
        assert read and {path.parent.parent.name for path in read} <= {"epochs", "trajectories"}
        assert {path.parent.name for path in read} == {partition_file(lake, "epochs", "run_b").parent.name}
        assert con.execute(
            "select \"lr__lower\" from lake.epochs where run_id = 'run_b' order by epoch"
        ).fetchall() == [
            (0.3,),
            (0.4,),
        ]


# Keys of letters in both cases, underscores, a non-ASCII letter, and pieces of the columns' suffixes.
_pieces = st.sampled_from(["a", "A", "b", "B", "_", "é", "É", "__lower", "__upper_1", "__upper_", "1", "2"])
_keys = st.sets(st.lists(_pieces, min_size=1, max_size=5).map("".join), max_size=8)


def _ascii_folded(name: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in name)  # DuckDB folds ASCII letters only: É is not é


@given(keys=_keys)
@example(keys={"a", "A", "a__lower", "A__upper_1__lower"})
def test_no_two_keys_share_a_column_whatever_their_names(keys):
    renamed = case_columns(keys)
    names = {_ascii_folded(renamed.get(key, key)) for key in keys}
    assert len(names) == len(keys)
    for key in keys - renamed.keys():  # a key kept as named has no other spelling
        assert [other for other in keys if _ascii_folded(other) == _ascii_folded(key)] == [key]
