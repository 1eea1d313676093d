"""A per-trajectory extra of objects or lists has one value per trajectory row: typed when its shape is one, JSON text
otherwise, and readable across runs whatever each run made of it."""

import json

import duckdb
import polars as pl
import pytest
from helpers import epoch_document, write_epoch_file

from pipelines.lake.ingest import ingest_run
from pipelines.release.discover import RunFolder, list_run
from pipelines.release.flatten import typed_series
from pipelines.warehouse_db import create_lake_views


def _details(epoch: int, n: int = 3) -> list[dict]:
    return [{"judge": f"j{epoch}{i}", "scores": [i, i + epoch]} for i in range(n)]


def _lake(tmp_path, runs: dict[str, list[dict]]) -> duckdb.DuckDBPyConnection:
    release, lake = tmp_path / "rel", tmp_path / "lake"
    for run_id, documents in runs.items():
        for document in documents:
            write_epoch_file(release / run_id, document["epoch"], document)
        ingest_run(list_run(RunFolder(run_id, "rel", release, release / run_id)), lake, 10**7)
    con = duckdb.connect()
    create_lake_views(con, lake)
    return con


def test_an_array_of_objects_lands_per_trajectory_beside_its_reward(tmp_path):
    documents = [epoch_document(epoch, n=3, traj_details=_details(epoch)) for epoch in range(2)]
    con = _lake(tmp_path, {"run": documents})

    assert con.execute("select typeof(traj_details) from lake.trajectories limit 1").fetchone() == (
        "STRUCT(judge VARCHAR, scores BIGINT[])",
    )
    rows = con.execute(
        "select epoch, traj_index, reward, traj_details.judge, traj_details.scores[2]"
        " from lake.trajectories order by epoch, traj_index"
    ).fetchall()
    # epoch_document's rewards are i / 4; the second score is i + epoch.
    assert rows == [
        (0, 0, 0.0, "j00", 0),
        (0, 1, 0.25, "j01", 1),
        (0, 2, 0.5, "j02", 2),
        (1, 0, 0.0, "j10", 1),
        (1, 1, 0.25, "j11", 2),
        (1, 2, 0.5, "j12", 3),
    ]
    assert "traj_details" not in [name for name, *_ in con.execute("describe lake.epochs").fetchall()]


def test_objects_of_several_shapes_are_kept_per_trajectory_as_json_text(tmp_path):
    documents = [
        epoch_document(0, n=2, traj_details=[{"judge": "a"}, {"judge": "b", "error": True}]),
        epoch_document(1, n=2, traj_details=[[1, 2], None]),
    ]
    con = _lake(tmp_path, {"run": documents})

    rows = con.execute(
        "select epoch, traj_index, traj_details, traj_details->>'judge' from lake.trajectories"
        " order by epoch, traj_index"
    ).fetchall()
    assert rows == [
        (0, 0, '{"judge": "a"}', "a"),
        (0, 1, '{"judge": "b", "error": true}', "b"),
        (1, 0, "[1, 2]", None),
        (1, 1, None, None),
    ]


def test_runs_that_typed_an_extra_differently_read_as_json_text_together(tmp_path):
    con = _lake(
        tmp_path,
        {
            "run_a": [epoch_document(0, n=2, traj_details=_details(0, n=2))],  # one shape: a STRUCT
            "run_b": [epoch_document(0, n=2, traj_details=[{"judge": 7}, [1]])],  # two shapes: JSON text
            "run_c": [epoch_document(0, n=2, traj_details=[[1], [2, 3]])],  # a LIST
        },
    )
    rows = con.execute(
        "select run_id, traj_index, traj_details->>'judge', json_extract(traj_details, '$[1]')"
        " from lake.trajectories order by run_id, traj_index"
    ).fetchall()
    assert rows == [
        ("run_a", 0, "j00", None),
        ("run_a", 1, "j01", None),
        ("run_b", 0, "7", None),
        ("run_b", 1, None, None),
        ("run_c", 0, None, None),
        ("run_c", 1, None, "3"),
    ]
    assert json.loads(
        con.execute("select traj_details from lake.trajectories where run_id = 'run_a' and traj_index = 1").fetchone()[
            0
        ]
    ) == {"judge": "j01", "scores": [1, 1]}


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([{"a": 1, "b": [1.5]}, None, {"a": 2, "b": []}], pl.Struct({"a": pl.Int64, "b": pl.List(pl.Float64)})),
        ([[1, 2], [], None], pl.List(pl.Int64)),
        # Shapes polars would make one type of by dropping or casting a value: JSON text instead.
        ([{"a": 1}, {"b": 2}], pl.String),
        ([[1], [2.5]], pl.String),
        ([[True], [1]], pl.String),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], pl.String),
        ([{}, {}], pl.String),
        ([{"a": 1}, 2], pl.String),
    ],
)
def test_nested_values_are_typed_only_when_every_value_survives(values, dtype):
    series, kinds = typed_series("x", values)
    assert series.dtype == dtype
    if dtype == pl.String:
        assert kinds is not None and "nested" in kinds
        assert [None if text is None else json.loads(text) for text in series.to_list()] == values
    else:
        assert kinds is None and series.to_list() == values


def test_an_extra_nested_past_the_bound_is_quarantined_and_the_other_epochs_load(tmp_path):
    deep = [[1]]
    for _ in range(70):
        deep = [deep]
    documents = [epoch_document(0, n=1, traj_details=[deep]), epoch_document(1, n=1, traj_details=[{"a": 1}])]
    con = _lake(tmp_path, {"run": documents})
    assert con.execute("select epoch, traj_details.a from lake.trajectories").fetchall() == [(1, 1)]
    [(kind, message)] = con.execute("select error_kind, message from lake.errors").fetchall()
    assert kind == "invalid_json" and "nested more than 64 levels deep" in message
