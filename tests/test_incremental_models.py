"""Incremental models (an `-- incremental: run_id` header line): after a change to some runs only their rows are
computed again, and every table then holds what a build from scratch of the same release holds."""

import os
import re
import shutil

import duckdb
import pytest

from conftest import epoch_document
from pipelines.defs.models.assets import MODELS, refresh_model
from pipelines.defs.resources import WarehouseConfig
from pipelines.models import ModelError, load_models, run_model, run_model_rows

INCREMENTAL = sorted(name for name, model in MODELS.items() if model.incremental_key)
# fact_trajectories and the incremental models that read it: rebuilt whole when its columns change
READING_TRAJECTORIES = ("fact_trajectories", "group_metrics", "reward_breakdowns", "epoch_trajectory_counts",
                        "epoch_metrics")


def tables(warehouse) -> dict[str, list[tuple]]:
    """Every model's rows, as text, in a fixed order (an incremental refresh appends the rows it computes again)."""
    with duckdb.connect(str(warehouse / "warehouse.duckdb"), read_only=True) as con:
        return {name: sorted(tuple(map(str, row)) for row in con.execute(f"select * from {name}").fetchall())
                for name in MODELS}


def refreshes(output: str) -> dict[str, str]:
    """What the build's log says it did to each incremental model: kept, rebuilt or so many runs computed again."""
    done = {}
    for name in INCREMENTAL:
        match = re.search(rf"^\s+{name}\s+[\d,]+ rows \((.+)\)$", output, re.MULTILINE)
        done[name] = match.group(1) if match else None
    return done


def targeted(epoch: int, n: int = 4, **extras) -> dict:
    """An epoch of a multi-target run: per-trajectory target models and false-positive control flags."""
    return epoch_document(epoch, n, target_model=[f"m{i % 2}" for i in range(n)],
                          is_fp_control=[i == 0 for i in range(n)], **extras)


@pytest.fixture
def release(tmp_path, write_epoch):
    """Three runs of three epochs: run_a multi-target, run_b in the folder layout, run_c plain."""
    root = tmp_path / "release"
    for epoch in range(3):
        write_epoch(root / "run_a", epoch, targeted(epoch))
        write_epoch(root / "run_b", epoch, layout="folder")
        write_epoch(root / "run_c", epoch)
    return root


def build_and_compare(tmp_path, build, capsys, release) -> dict[str, str]:
    """Builds the kept warehouse, checks every table against a build from scratch, and says what was done."""
    capsys.readouterr()
    assert build([release], tmp_path / "wh") == 0
    done = refreshes(capsys.readouterr().out)
    fresh = tmp_path / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    assert build([release], fresh) == 0
    assert tables(tmp_path / "wh") == tables(fresh)
    return done


def test_the_incremental_models_are_the_run_local_ones():
    assert INCREMENTAL == ["bootstrap_means", "epoch_copies", "epoch_metrics", "epoch_trajectory_counts",
                           "fact_epochs", "fact_trajectories", "group_metrics", "reward_breakdowns"]
    # Not run_summary: its compute-matched horizon depends on the other runs of the ablation.
    assert MODELS["run_summary"].incremental_key is None


def test_changed_runs_are_computed_again_and_the_tables_equal_a_build_from_scratch(
        tmp_path, build, capsys, release, write_epoch):
    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"rebuilt"}

    write_epoch(release / "run_a", 3, targeted(3))  # a new epoch
    shutil.rmtree(release / "run_b" / "epoch_001")  # an epoch gone
    changed = write_epoch(release / "run_c", 1, epoch_document(1, n=3))  # an epoch rewritten, one trajectory fewer
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    done = build_and_compare(tmp_path, build, capsys, release)
    # run_a's matched window ends at the ablation's horizon, epoch 2 (the others' last epoch): its new epoch 3 leaves
    # its window, and so its bootstrap resamples, as they were.
    assert done == {name: "3 run_id(s) computed again" for name in INCREMENTAL} | {
        "bootstrap_means": "2 run_id(s) computed again"}

    write_epoch(release / "run_b", 1, layout="folder")  # one run only
    done = build_and_compare(tmp_path, build, capsys, release)
    assert done == {name: "1 run_id(s) computed again" for name in INCREMENTAL}

    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"inputs unchanged, table kept"}


def test_new_columns_and_new_runs_rebuild_what_they_reach(tmp_path, build, capsys, release, write_epoch):
    build_and_compare(tmp_path, build, capsys, release)

    # A per-trajectory key no run had: fact_trajectories gains a column, so it and what reads it are rebuilt whole
    # (an incremental model's recorded inputs include the columns of the incremental models it reads).
    write_epoch(release / "run_c", 3, epoch_document(3, judge_score=[0.5, 0.25, 1.0, 0.0]))
    done = build_and_compare(tmp_path, build, capsys, release)
    assert done["epoch_copies"] == done["fact_epochs"] == "1 run_id(s) computed again"
    assert {done[name] for name in READING_TRAJECTORIES} == {"rebuilt"}

    # A run the warehouse has not seen: lake.runs and dim_runs gain its row, and each other run's rows are the same.
    # Only two epochs long, it moves the ablation's matched horizon to epoch 1, and so every run's matched window.
    for epoch in range(2):
        write_epoch(release / "run_d", epoch, targeted(epoch))
    assert build_and_compare(tmp_path, build, capsys, release) == {
        name: "1 run_id(s) computed again" for name in INCREMENTAL} | {"bootstrap_means": "4 run_id(s) computed again"}

    # A run gone: its rows leave every table.
    shutil.rmtree(release / "run_b")
    assert set(build_and_compare(tmp_path, build, capsys, release).values()) == {"1 run_id(s) computed again"}

    # The lake's columns are those of its runs' files in path order: without run_a, judge_score (run_c) comes before
    # target_model (run_d), so the tables that hold them are rebuilt whole, in the new order.
    shutil.rmtree(release / "run_a")
    done = build_and_compare(tmp_path, build, capsys, release)
    assert {done[name] for name in READING_TRAJECTORIES} == {"rebuilt"}


def test_a_parameter_change_rebuilds_an_incremental_model_whole(tmp_path, build, release):
    assert build([release], tmp_path / "wh") == 0
    config = WarehouseConfig(releases=[str(release)], warehouse_dir=str(tmp_path / "wh"), bootstrap_reps=10)
    _, done, metadata = refresh_model(MODELS["bootstrap_means"], config)
    assert (done, metadata["dagster/row_count"]) == ("rebuilt", 3 * 10)  # 10 replicates of each of the 3 runs
    assert refresh_model(MODELS["bootstrap_means"], config)[1] == "kept"


def test_an_unknown_incremental_key_is_refused_naming_the_file(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "by_epoch.sql").write_text("-- Per epoch.\n-- incremental: epoch\nselect 1 as epoch\n")
    with pytest.raises(ModelError, match=r"by_epoch\.sql.*incremental: epoch"):
        load_models(tmp_path)
    (tmp_path / "marts" / "by_epoch.sql").write_text("-- Per run.\n-- incremental: run_id\nselect 'a' as run_id\n")
    model = load_models(tmp_path)["by_epoch"]
    assert (model.incremental_key, model.description) == ("run_id", "Per run.")


def test_the_runs_computed_again_see_only_their_rows_of_the_tables_they_read(tmp_path):
    """run_model_rows shows the model its inputs' rows of the chosen runs alone, also through a materialized CTE
    (which stops a filter on the query's result), and leaves the tables as they were once it is done."""
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "scores.sql").write_text("select 'a' as run_id, 1.0::double as score\n")
    (tmp_path / "marts" / "totals.sql").write_text(
        "-- incremental: run_id\n"
        "with seen as materialized (select * from scores)\n"
        "select run_id, sum(score) as total, (select count(*) from seen) as rows_seen from seen group by run_id\n")
    models = load_models(tmp_path)
    con = duckdb.connect(str(tmp_path / "build.duckdb"))
    con.execute("create table scores as select * from (values ('a', 1.0::double), ('a', 2.0), ('b', 4.0), ('c', 8.0)) "
                "as t(run_id, score)")
    run_model(con, models["totals"])
    assert sorted(con.execute("select * from totals").fetchall()) == [("a", 3.0, 4), ("b", 4.0, 4), ("c", 8.0, 4)]

    con.execute("update scores set score = 16.0 where run_id = 'b'")
    assert run_model_rows(con, models["totals"], ["b"])
    # b's total from b's row alone (4 rows seen before, 1 now); a and c kept as they were
    assert sorted(con.execute("select * from totals").fetchall()) == [("a", 3.0, 4), ("b", 16.0, 1), ("c", 8.0, 4)]
    assert con.execute("select count(*) from scores").fetchone()[0] == 4
    assert con.execute("select count(*) from duckdb_views() where temporary and not internal").fetchone()[0] == 0
