"""The published warehouse.duckdb as users open it: the model tables alone, in a storage version that older DuckDB
clients read, whole after the warehouse folder is moved; the exports and the lake readable by pandas and pyarrow."""

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import polars.selectors as cs
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from pipelines.defs.resources import WarehouseConfig
from pipelines.models import SQL_DIR
from pipelines.settings import ENV_STORAGE_VERSION
from pipelines.warehouse_db import LAKE_VIEWS, open_build_db, parquet_source, view_files

# A Python with an older duckdb, pandas and pyarrow, in a virtualenv of its own (.ci/run makes one).
OLD_CLIENT_ENV = "GRPO_TEST_OLD_DUCKDB_PYTHON"

# Run by the older client: each query's result as an Arrow IPC file, as a notebook would fetch it.
OLD_CLIENT = textwrap.dedent("""
    import json, sys
    import duckdb, pyarrow as pa
    database, queries, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    con = duckdb.connect(database, read_only=True)
    for name, sql in queries.items():
        result = con.execute(sql)
        table = result.fetch_arrow_table() if hasattr(result, "fetch_arrow_table") else result.to_arrow_table()
        with pa.ipc.new_file(f"{out}/{name}.arrow", table.schema) as writer:
            writer.write_table(table)
    with open(f"{out}/version.txt", "w") as version:
        version.write(duckdb.__version__)
""")


def model_tables() -> set[str]:
    """The tables the models make: one per SQL file."""
    return {path.stem for path in SQL_DIR.glob("*/*.sql")}


def published(wh: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(wh / "warehouse.duckdb"), read_only=True)


def storage_version(con: duckdb.DuckDBPyConnection) -> str:
    return con.execute(
        "select tags['storage_version'] from duckdb_databases() where database_name = current_database()"
    ).fetchone()[0]


def relations(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(schema, name) of every table and view in the file."""
    return con.execute(
        "select schema_name, table_name from duckdb_tables() where database_name = current_database()"
        " union all select schema_name, view_name from duckdb_views()"
        " where database_name = current_database() and not internal order by all"
    ).fetchall()


def parquet_files(wh: Path) -> dict[str, list[Path]]:
    """The exports' Parquet files one by one, and each lake table's files (a table with none left out)."""
    files = {f"export_{path.stem}": [path] for path in sorted((wh / "exports").glob("*.parquet"))}
    files.update({f"lake_{table}": view_files(wh / "lake", table) for table in LAKE_VIEWS})
    return {name: paths for name, paths in files.items() if paths}


def in_utc(frame: pl.DataFrame) -> pl.DataFrame:
    """Times with a time zone in UTC: clients name the session's zone differently ("UTC", "Etc/UTC")."""
    return frame.with_columns(cs.datetime(time_zone="*").dt.convert_time_zone("UTC"))


def test_the_published_file_holds_the_model_tables_alone(sample_warehouse):
    _, wh = sample_warehouse
    with published(wh) as con:
        assert relations(con) == [("main", table) for table in sorted(model_tables())]
        assert storage_version(con) == "v1.0.0+"  # the default: DuckDB 1.0 and every later version read it


@pytest.mark.slow
def test_a_moved_warehouse_opens_whole_and_the_storage_version_follows_the_configuration(
    tmp_path, write_epoch, build, monkeypatch
):
    release = tmp_path / "release"
    for run in ("alpha_2fp", "beta_4fp"):
        for epoch in range(2):
            write_epoch(release / run, epoch)
    monkeypatch.delenv(ENV_STORAGE_VERSION, raising=False)
    assert build([release], tmp_path / "wh") == 0
    moved = shutil.move(tmp_path / "wh", tmp_path / "elsewhere")
    with published(moved) as con:
        assert storage_version(con) == "v1.0.0+"
        contents = {
            name: con.execute(f"select * from {schema}.{name} order by all").fetchall()
            for schema, name in relations(con)
        }
    assert sorted(run for run, *_ in contents["fact_epochs"]) == ["alpha_2fp"] * 2 + ["beta_4fp"] * 2

    # Another storage version: the build database is made anew in it, and the same tables are published again.
    monkeypatch.setenv(ENV_STORAGE_VERSION, "v1.4.0")
    assert build([release], moved) == 0
    with published(moved) as con:
        assert storage_version(con) == "v1.4.0+"
        assert {
            name: con.execute(f"select * from {schema}.{name} order by all").fetchall()
            for schema, name in relations(con)
        } == contents


def test_the_storage_version_is_checked_when_configured_and_sets_the_build_database_s(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="'1.4' is not a DuckDB version"):
        WarehouseConfig(duckdb_storage_version="1.4")
    monkeypatch.setenv(ENV_STORAGE_VERSION, "v1.2.0")
    assert WarehouseConfig.from_env().duckdb_storage_version == "v1.2.0"
    with open_build_db(tmp_path, storage_version="v1.2.0") as con:
        con.execute("create table kept as select 1 as x")
        assert storage_version(con) == "v1.2.0+"
    with open_build_db(tmp_path, storage_version="v1.2.0") as con:
        assert con.execute("select x from kept").fetchall() == [(1,)]
    with open_build_db(tmp_path, storage_version="v1.4.0") as con:  # made anew: its tables are computed again
        assert storage_version(con) == "v1.4.0+"
        assert con.execute("select count(*) from duckdb_tables() where table_name = 'kept'").fetchone() == (0,)


@pytest.fixture(scope="module")
def old_duckdb() -> str:
    python = os.environ.get(OLD_CLIENT_ENV)
    if not python:
        if os.environ.get("CI") == "true":
            pytest.fail(f"${OLD_CLIENT_ENV} is not set: .ci/run installs an older duckdb for this test")
        pytest.skip(
            f"${OLD_CLIENT_ENV} is not set (a Python with an older duckdb, pandas and pyarrow; .ci/run makes one)"
        )
    return python


@pytest.mark.slow
def test_an_older_duckdb_client_reads_what_the_projects_own_reads(old_duckdb, sample_warehouse, tmp_path):
    _, wh = sample_warehouse
    queries = {table: f"select * from {table} order by all" for table in sorted(model_tables())}
    queries["trajectories_with_runs"] = (
        "select r.ablation, r.label, r.group_size, t.* from fact_trajectories t join dim_runs r using (run_id)"
        " order by t.run_id, t.epoch, t.traj_index"
    )
    for name, files in parquet_files(wh).items():
        queries[name] = f"select * from {parquet_source(files)} order by all"
    assert {"export_run_summary", "lake_epochs", "lake_trajectories"} <= set(queries)

    ran = subprocess.run(
        [old_duckdb, "-c", OLD_CLIENT, str(wh / "warehouse.duckdb"), json.dumps(queries), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    version = (tmp_path / "version.txt").read_text()
    assert tuple(map(int, version.split(".")[:2])) < tuple(map(int, duckdb.__version__.split(".")[:2])), version
    with published(wh) as con:
        for name, sql in queries.items():
            assert_frame_equal(
                in_utc(pl.read_ipc(tmp_path / f"{name}.arrow")), in_utc(con.sql(sql).pl()), check_exact=True
            )


def test_pandas_and_pyarrow_read_the_exports_and_the_lake_as_duckdb_does(sample_warehouse):
    _, wh = sample_warehouse
    files = parquet_files(wh)
    assert {"export_epoch_metrics", "export_run_summary", "lake_epochs", "lake_runs"} <= set(files)
    with published(wh) as con:
        for name, paths in files.items():
            expected = in_utc(con.sql(f"select * from {parquet_source(paths)}").pl())
            by_pyarrow = pl.concat(
                [pl.from_arrow(pq.read_table(path, partitioning=None)) for path in paths], how="diagonal_relaxed"
            )
            assert_frame_equal(in_utc(by_pyarrow.select(expected.columns)), expected, check_exact=True)
            # pyarrow-backed columns: a NumPy float column cannot tell a null from a NaN.
            by_pandas = pd.concat(
                [pd.read_parquet(path, partitioning=None, dtype_backend="pyarrow") for path in paths], ignore_index=True
            )
            assert sorted(by_pandas.columns) == sorted(expected.columns), name
            assert_frame_equal(
                in_utc(pl.from_pandas(by_pandas[expected.columns])), expected, check_exact=True, check_dtypes=False
            )
        # An export holds its table's rows (in an order of its own).
        for table in ("epoch_metrics", "run_summary", "snapshots", "ablation_contrasts"):
            assert_frame_equal(
                pl.from_arrow(pq.read_table(wh / "exports" / f"{table}.parquet")),
                con.sql(f"select * from {table}").pl(),
                check_exact=True,
                check_row_order=False,
            )
