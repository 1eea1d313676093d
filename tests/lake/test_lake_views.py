"""The lake.* views: the warehouse's own columns, then the extra keys' in name order, whatever order the lake's files
hold them in; made again only when the lake's files change."""

import duckdb
import polars as pl

from pipelines.lake.paths import partition_file, register_run
from pipelines.warehouse_db import LAKE_VIEWS, create_lake_views


class Recording:
    """A connection that keeps the views each call of create_lake_views makes."""

    def __init__(self, con):
        self.con, self.made = con, []

    def execute(self, sql, *args):
        if sql.startswith("create or replace view"):
            self.made.append(sql.split()[4])
        return self.con.execute(sql, *args)


def write_trajectories(lake, run_id: str, **extras) -> None:
    """A run's trajectories partition of one row, its extra columns in the order given."""
    register_run(lake, run_id)
    path = partition_file(lake, "trajectories", run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    pl.DataFrame(
        {
            "run_id": [run_id],
            "epoch": [0],
            "source_path": [f"{run_id}/epoch_000_results.json"],
            "traj_index": [0],
            "trajectory_id": ["t"],
            "reward": [0.5],
            "advantage": [0.0],
            **extras,
        },
    ).write_parquet(path)


def test_views_list_extra_columns_in_name_order_and_are_made_again_only_when_the_lake_changes(tmp_path):
    lake = tmp_path / "lake"
    write_trajectories(lake, "run_a", zeta=[1], alpha=["x"])
    write_trajectories(lake, "run_b", mid=[True], alpha=["y"])
    con = Recording(duckdb.connect(str(tmp_path / "build.duckdb")))

    create_lake_views(con, lake)
    assert sorted(con.made) == sorted(f"lake.{view}" for view in LAKE_VIEWS)
    columns = [name for name, *_ in con.execute("describe lake.trajectories").fetchall()]
    # in the files: zeta, alpha (run_a), then mid (run_b)
    assert columns[7:] == ["alpha", "mid", "zeta"]
    assert con.execute("select run_id, alpha, mid, zeta from lake.trajectories order by run_id").fetchall() == [
        ("run_a", "x", None, 1),
        ("run_b", "y", True, None),
    ]

    con.made.clear()
    create_lake_views(con, lake)
    assert con.made == []  # nothing changed: every view kept

    write_trajectories(lake, "run_c", beta=[2.5])
    create_lake_views(con, lake)
    assert con.made == ["lake.trajectories"]
    assert [name for name, *_ in con.execute("describe lake.trajectories").fetchall()][7:] == [
        "alpha",
        "beta",
        "mid",
        "zeta",
    ]


def test_a_rewritten_partition_is_read_with_its_new_columns_and_alone_of_the_files(tmp_path, monkeypatch):
    from pipelines import warehouse_db

    lake = tmp_path / "lake"
    for run in ("run_a", "run_b", "run_c"):
        write_trajectories(lake, run, alpha=["x"])
    write_trajectories(lake, "run_d", beta=[1.5])
    con = duckdb.connect(str(tmp_path / "build.duckdb"))
    read = []
    schemas_of = warehouse_db._read_schemas
    monkeypatch.setattr(warehouse_db, "_read_schemas", lambda con, files: read.extend(files) or schemas_of(con, files))
    create_lake_views(con, lake)
    assert len(read) == 4  # each trajectories partition once (no other table has a partition here)

    # run_b's partition rewritten with a column the others lack, and run_a's with another type for alpha
    partition_file(lake, "trajectories", "run_b").unlink()
    partition_file(lake, "trajectories", "run_a").unlink()
    write_trajectories(lake, "run_b", alpha=["y"], gamma=[7])
    write_trajectories(lake, "run_a", alpha=[3])
    read.clear()
    create_lake_views(con, lake)
    assert sorted(read) == sorted(str(partition_file(lake, "trajectories", run)) for run in ("run_a", "run_b"))
    rows = con.execute("select run_id, alpha, beta, gamma from lake.trajectories order by run_id").fetchall()
    assert rows == [
        ("run_a", "3", None, None),
        ("run_b", "y", None, 7),
        ("run_c", "x", None, None),
        ("run_d", None, 1.5, None),
    ]
