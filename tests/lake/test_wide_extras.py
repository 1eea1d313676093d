"""A run with more extra keys than a table takes: its first MAX_EXTRA_COLUMNS by name become columns, a warning says
which were left out and where the lake keeps them, and DuckDB never reads them."""

import duckdb
import polars as pl
import pytest
from helpers import epoch_document

from pipelines.lake import wide
from pipelines.lake.paths import partition_file
from pipelines.lake.runs import ingest_runs
from pipelines.release.releases import find_run_folders
from pipelines.warehouse_db import create_lake_views


@pytest.fixture
def lake(tmp_path, write_epoch, monkeypatch):
    monkeypatch.setattr(wide, "MAX_EXTRA_COLUMNS", 3)
    keys = {f"k{i}": i + 0.5 for i in range(5)}  # k0 ... k4: the first three by name are columns
    for epoch in range(2):
        write_epoch(tmp_path / "rel" / "run", epoch, epoch_document(epoch, n=2, **keys, per_traj=[1, 2]))
    runs, _, _ = find_run_folders([tmp_path / "rel"])
    ingest_runs(list(runs.values()), tmp_path / "lake", 1 << 20, workers=1)
    return tmp_path / "lake"


def test_the_lake_keeps_every_key_and_the_views_read_the_first_by_name(tmp_path, lake):
    assert {f"k{i}" for i in range(5)} <= set(pl.read_parquet(partition_file(lake, "epochs", "run")).columns)
    with duckdb.connect(str(tmp_path / "build.duckdb")) as con:
        create_lake_views(con, lake)
        columns = [name for name, *_ in con.execute("describe lake.epochs").fetchall()]
        assert columns[-3:] == ["k0", "k1", "k2"] and "k3" not in columns and "k4" not in columns
        assert con.execute("select k2 from lake.epochs").fetchall() == [(2.5,), (2.5,)]
        # per_traj, one value per trajectory, is the trajectories' only extra: under the cap
        assert [name for name, *_ in con.execute("describe lake.trajectories").fetchall()][-1] == "per_traj"


def test_a_warning_names_the_keys_left_out_and_where_they_are(lake):
    errors = pl.read_parquet(partition_file(lake, "errors", "run")).filter(pl.col("error_kind") == "wide_extras")
    assert errors.select("source_path", "severity", "action").rows() == [("run/", "warning", "loaded")]
    assert errors["message"][0] == (
        "5 extra keys: fact_epochs has a column for the first 3 by name (to k2); the other 2 (from k3) are kept in "
        f"the lake, {partition_file(lake, 'epochs', 'run')}"
    )
