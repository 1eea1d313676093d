"""An incremental model rebuilt a batch of runs at a time (batch_rows) equals the same model rebuilt in one query."""

import dataclasses
from pathlib import Path

import duckdb
import pytest
from mart_fixture import EPOCHS, PARAMS, RUNS, create_staging

from pipelines.models import SqlModel, key_batches, load_models, run_model, run_model_in_batches, set_parameters

PER_RUN = SqlModel(
    name="per_run",
    layer="marts",
    path=Path("per_run.sql"),
    sql="select run_id, count(*) as n, sum(x) as total from t group by run_id order by run_id",
    description="",
    model_deps=("t",),
    lake_deps=(),
    incremental_key="run_id",
    batch_rows=3,
)


def table_rows(con, table: str) -> list[tuple]:
    return sorted(con.execute(f"from {table}").fetchall(), key=repr)


def test_keys_are_batched_by_their_rows_in_key_order_with_keys_found_only_in_the_tables():
    con = duckdb.connect()
    # rows per run: a 2, b 1, c 3, d 1; "c" and "d" are not among the keys given (the lake's runs, say)
    con.execute(
        "create table t as from (values ('a', 1), ('a', 2), ('b', 3), ('c', 4), ('c', 5), ('c', 6), ('d', 7))"
        " as v(run_id, x)"
    )
    # a batch takes keys until the next would pass 3 rows: a+b = 3, c = 3, d = 1
    assert key_batches(con, PER_RUN, ["b", "a"]) == [["a", "b"], ["c"], ["d"]]
    # no batch_rows, or no more rows than it: one batch of the keys given
    assert key_batches(con, dataclasses.replace(PER_RUN, batch_rows=None), ["b", "a"]) == [["a", "b"]]
    assert key_batches(con, dataclasses.replace(PER_RUN, batch_rows=7), ["b", "a"]) == [["a", "b"]]


def test_rows_of_every_key_and_of_none_are_computed():
    con = duckdb.connect()
    con.execute(
        "create table t as from (values ('a', 1), ('a', 2), ('b', 3), ('c', 4), (null, 5), (null, 6)) as v(run_id, x)"
    )
    batches = key_batches(con, PER_RUN, ["a", "b", "c"])
    assert len(batches) == 2
    assert run_model_in_batches(con, PER_RUN, batches) == 4
    # counted by hand: a 2 rows summing 3, b 1 row 3, c 1 row 4, the rows without a run 2 rows 11
    assert table_rows(con, "per_run") == sorted([("a", 2, 3), ("b", 1, 3), ("c", 1, 4), (None, 2, 11)], key=repr)


@pytest.mark.parametrize("name", ["group_metrics", "epoch_metrics", "reward_breakdowns", "run_summary"])
def test_a_model_rebuilt_in_batches_of_runs_equals_it_rebuilt_whole(name):
    con = duckdb.connect()
    create_staging(con, EPOCHS, RUNS)
    set_parameters(con, PARAMS)
    models = load_models()
    for model in models.values():  # what it reads, in dependency order
        if model.layer == "marts" and model.name != name:
            run_model(con, model)
        if model.name == name:
            break
    model = dataclasses.replace(models[name], batch_rows=1)  # a run per batch
    run_model(con, model)
    con.execute(f"create table whole as from {name}")
    batches = key_batches(con, model, ["run_a", "run_b", "run_c"])
    assert batches == [["run_a"], ["run_b"], ["run_c"]]
    assert run_model_in_batches(con, model, batches) == con.execute("select count(*) from whole").fetchone()[0]
    assert con.execute(f"describe {name}").fetchall() == con.execute("describe whole").fetchall()
    assert con.execute(f"select count(*) from (from {name} except all from whole)").fetchone()[0] == 0
    assert con.execute(f"select count(*) from (from whole except all from {name})").fetchone()[0] == 0
