"""`dg dev` from the repo root materializes the whole graph through the webserver, as the UI's button does."""

import json

import duckdb
import pytest
from ui_server import BROKEN_FILE, RUN_A, RUN_B, epoch_document

pytestmark = pytest.mark.slow


def query(warehouse, sql: str) -> list[tuple]:
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_instance_uses_the_project_settings(dagster_ui):
    instance = dagster_ui.graphql(
        "{ shouldShowNux instance { runQueuingSupported runQueueConfig { maxConcurrentRuns }"
        " poolConfig { poolGranularity defaultPoolLimit } } }"
    )
    assert instance["shouldShowNux"] is False
    assert instance["instance"]["runQueuingSupported"] is True
    assert instance["instance"]["runQueueConfig"]["maxConcurrentRuns"] == 2
    # duckdb_writer is the only pool, so the default limit is its limit: one DuckDB writer at a time.
    assert instance["instance"]["poolConfig"] == {"poolGranularity": "op", "defaultPoolLimit": 1}


def test_groups_are_ingest_models_exports(dagster_ui):
    nodes = dagster_ui.graphql("{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    groups = {node["groupName"] for node in nodes}
    assert {"ingest", "models"} <= groups <= {"ingest", "models", "exports"}
    lake = {tuple(n["assetKey"]["path"]) for n in nodes if n["groupName"] == "ingest"}
    assert ("lake", "epochs") in lake and ("lake", "runs") in lake


def test_materialize_all_builds_the_warehouse(dagster_ui, materialized):
    warehouse = dagster_ui.warehouse
    # By hand from the fixture: run a has epochs 0..2 of 4 trajectories (rewards 0, .25, .5, .75),
    # run b epochs 0..1 of 8 trajectories (rewards 0, 1/8, ..., 7/8); run a's epoch 3 file is truncated.
    assert query(
        warehouse, "select run_id, count(*), min(epoch), max(epoch) from fact_epochs group by 1 order by 1"
    ) == [
        (RUN_A, 3, 0, 2),
        (RUN_B, 2, 0, 1),
    ]
    rows = query(warehouse, "select run_id, count(*), sum(reward) from fact_trajectories group by 1 order by 1")
    assert [(r[0], r[1]) for r in rows] == [(RUN_A, 12), (RUN_B, 16)]
    assert rows[0][2] == pytest.approx(3 * 1.5) and rows[1][2] == pytest.approx(2 * 3.5)
    assert query(warehouse, "select run_id, fp_per_group from dim_runs order by 1") == [(RUN_A, None), (RUN_B, 4)]
    errors = query(warehouse, "select run_id, source_path from ingest_errors where severity = 'error'")
    assert [(run, path.rsplit("/", 1)[-1]) for run, path in errors] == [(RUN_A, BROKEN_FILE)]


def test_second_materialization_while_a_reader_is_open(dagster_ui, materialized):
    # Fix the truncated file, so that this materialization really rewrites tables and republishes the file.
    (dagster_ui.release / RUN_A / BROKEN_FILE).write_text(json.dumps(epoch_document(3, 4)))
    path = dagster_ui.warehouse / "warehouse.duckdb"
    # A `grpo-warehouse sql` session: a read-only connection held open across the whole materialization.
    with duckdb.connect(str(path), read_only=True) as reader:
        assert reader.execute("select count(*) from fact_epochs").fetchone() == (3 + 2,)
        dagster_ui.assert_succeeded(dagster_ui.materialize_all())  # launched as the UI's button does
        # The reader keeps the snapshot it opened; the new file is swapped in beside it.
        assert reader.execute("select count(*) from fact_epochs").fetchone() == (3 + 2,)
    assert query(dagster_ui.warehouse, "select run_id, count(*) from fact_epochs group by 1 order by 1") == [
        (RUN_A, 4),
        (RUN_B, 2),
    ]
    assert query(dagster_ui.warehouse, "select count(*) from ingest_errors where severity = 'error'") == [(0,)]
