"""The asset checks of pipelines/defs/models/checks.py: quiet on clean data, firing on data that violates them."""

import dagster as dg
import duckdb
import pytest
from mart_fixture import EPOCHS, NAN, RUNS, build_marts, create_staging, epoch

from pipelines.defs.models import checks
from pipelines.defs.resources import WarehouseConfig
from pipelines.warehouse_db import open_build_db

CLEAN_RUNS = [("run_b", "abl", 2), ("run_c", "solo", 2)]  # no gap, unlike run_a
CLEAN_EPOCHS = [doc for doc in EPOCHS if doc["run_id"] != "run_a"]


def built(docs, runs=RUNS) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_staging(con, docs, runs)
    build_marts(con)
    return con


def all_results(con) -> dict[str, dg.AssetCheckResult]:
    return {
        "duplicates": checks.duplicate_epochs(con),
        "kl": checks.nonzero_kl(con),
        "arrays": checks.inconsistent_trajectory_arrays(con),
        "reported": checks.reported_mean_mismatch(con, 1e-6),
        "advantages": checks.unnormalised_groups(con),
        "gaps": checks.epoch_gaps(con),
    }


def test_every_check_passes_on_clean_data():
    results = all_results(built(CLEAN_EPOCHS, CLEAN_RUNS))
    assert {name: r.passed for name, r in results.items()} == dict.fromkeys(results, True)


@pytest.mark.parametrize("nulls", [0, 1, checks.EXAMPLES, checks.EXAMPLES + 1, 3 * checks.EXAMPLES])
def test_a_check_counts_every_offending_row_and_lists_the_first_ones(nulls):
    con = duckdb.connect()
    # ids 0..nulls+4, the first `nulls` of them without a name
    con.execute(
        "create table t as select i as id, case when i >= ? then 'x' end as name from range(? + 5) as r(i)",
        [nulls, nulls],
    )
    result = checks.violations(con, "t", "not_null", ("name",))
    assert (result.passed, result.metadata["count"].value) == (nulls == 0, nulls)
    listed = [row["id"] for row in result.metadata["examples"].value]
    assert len(listed) == len(set(listed)) == min(nulls, checks.EXAMPLES)
    assert set(listed) <= set(range(nulls))


def test_epoch_gaps_warn_and_name_the_missing_epochs():
    result = checks.epoch_gaps(built(EPOCHS))  # run_a has epochs 0, 1, 3
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.metadata["count"].value == 1
    [example] = result.metadata["examples"].value
    assert (example["run_id"], example["missing_epochs"], example["missing_ranges"]) == ("run_a", 1, ["2-2"])


def test_duplicate_epoch_is_an_error():
    con = built(CLEAN_EPOCHS, CLEAN_RUNS)
    con.execute("insert into fact_epochs select * from fact_epochs where run_id = 'run_b' and epoch = 1")
    result = checks.duplicate_epochs(con)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    [example] = result.metadata["examples"].value
    assert (example["run_id"], example["epoch"], example["n_rows"]) == ("run_b", 1, 2)


def test_nonzero_or_nan_kl_warns():
    docs = [
        *CLEAN_EPOCHS,
        epoch("run_c", 1, [0.0, 1.0], [-1.0, 1.0], kl=0.02),
        epoch("run_c", 2, [0.0, 1.0], [-1.0, 1.0], kl=NAN),
    ]
    result = checks.nonzero_kl(built(docs, CLEAN_RUNS))
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert [(e["epoch"], e["kl_sample_train"]) for e in result.metadata["examples"].value] == [(1, 0.02), (2, "nan")]


def test_trajectory_count_mismatch_is_an_error():
    docs = [*CLEAN_EPOCHS, epoch("run_c", 1, [0.0, 1.0], [-1.0, 1.0], n=3)]  # claims 3, has 2 rows
    result = checks.inconsistent_trajectory_arrays(built(docs, CLEAN_RUNS))
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    [example] = result.metadata["examples"].value
    assert (example["epoch"], example["n_trajectories"], example["n_trajectory_rows"]) == (1, 3, 2)


def test_a_position_held_twice_is_an_error_even_when_the_count_matches():
    con = duckdb.connect()
    create_staging(con, CLEAN_EPOCHS, CLEAN_RUNS)
    # run_b's epoch 0 at positions 0, 1, 1, 3: 4 rows for n_trajectories = 4, from 0 to 3, but position 2 empty.
    con.execute("update fact_trajectories set traj_index = 1 where run_id = 'run_b' and epoch = 0 and traj_index = 2")
    build_marts(con)
    result = checks.inconsistent_trajectory_arrays(con)
    assert not result.passed
    [example] = result.metadata["examples"].value
    assert (
        example["run_id"],
        example["epoch"],
        example["n_trajectory_rows"],
        example["first_index"],
        example["last_index"],
    ) == ("run_b", 0, 4, 0, 3)


def test_reported_mean_mismatch_warns_and_an_all_nan_epoch_is_consistent():
    docs = [
        *CLEAN_EPOCHS,
        epoch("run_c", 1, [0.0, 1.0], [-1.0, 1.0], reported=0.6),  # the finite mean is .5
        epoch("run_c", 2, [NAN, NAN], [0.0, 0.0]),
    ]  # reports NaN, recomputes null: consistent
    result = checks.reported_mean_mismatch(built(docs, CLEAN_RUNS), 1e-6)
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    [example] = result.metadata["examples"].value
    assert example["epoch"] == 1 and example["difference"] == pytest.approx(0.1)


def test_unnormalised_groups_are_listed_with_the_reason():
    runs = [("g", "abl", 2), ("h", "abl", 3)]
    docs = [
        epoch("g", 0, [0.0, 1.0, 0.5, 0.5], [1.0, -1.0, 0.0, 0.0]),  # group 0 reversed
        epoch("g", 1, [0.0, 1.0, 0.5, 0.5], [0.5, 1.5, 0.3, 0.0]),  # group 0 mean 1, group 1 flat but not 0
        epoch("g", 2, [0.0, 1.0, 0.5, 0.5], [-1.0, 1.0, 0.0, 0.0]),  # fine
        epoch("g", 3, [0.0, 1.0, NAN, 0.0], [-1.0, 1.0, 0.0, NAN]),  # group 1: a finite reward without advantage
        # mean 0 but not affine: (0, .5, 1) -> (-1, .2, .8), correlation ~0.97
        epoch("h", 0, [0.0, 0.5, 1.0], [-1.0, 0.2, 0.8]),
    ]
    result = checks.unnormalised_groups(built(docs, runs))
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    found = {
        (e["run_id"], e["epoch"], e["group_index"]): e["advantage_problem"] for e in result.metadata["examples"].value
    }
    assert set(found) == {("g", 0, 0), ("g", 1, 0), ("g", 1, 1), ("g", 3, 1), ("h", 0, 0)}
    assert "increasing affine" in found["g", 0, 0] and "increasing affine" in found["h", 0, 0]
    assert "average to 0" in found["g", 1, 0]
    assert "rewards all equal" in found["g", 1, 1]
    assert "non-finite advantage" in found["g", 3, 1]


def test_model_checks_read_the_build_database_and_only_duplicates_block(tmp_path):
    with open_build_db(tmp_path) as con:
        create_staging(con, EPOCHS, RUNS)
        build_marts(con)
    warehouse = WarehouseConfig(warehouse_dir=str(tmp_path))
    [duplicates, kl] = checks.evaluate_checks("fact_epochs", warehouse)
    assert (duplicates.check_name, duplicates.passed, kl.check_name, kl.passed) == (
        "no_duplicate_epochs",
        True,
        "kl_sample_train_is_zero",
        True,
    )
    [gaps] = checks.evaluate_checks("run_summary", warehouse)
    assert not gaps.passed and gaps.severity == dg.AssetCheckSeverity.WARN
    assert checks.evaluate_checks("snapshots", warehouse) == []
    blocking = {spec.name for model in checks.MODEL_CHECKS for spec in checks.check_specs(model) if spec.blocking}
    assert blocking == {"no_duplicate_epochs"}


def create_ingest_errors(con, rows: list[tuple]) -> None:
    con.execute(
        "create table ingest_errors (source_path varchar, run_id varchar, epoch bigint, error_kind varchar,"
        " message varchar, severity varchar, action varchar)"
    )
    if rows:
        con.executemany("insert into ingest_errors values (?, ?, ?, ?, ?, ?, ?)", rows)


def test_unloaded_input_warns_naming_the_quarantined_files_and_ignores_warnings():
    con = duckdb.connect()
    loaded_with_warning = (
        "rel/run_a/epoch_001_results.json",
        "run_a",
        1,
        "duplicate_epoch",
        "epoch 1 is also in x",
        "warning",
        "not loaded: duplicate",
    )
    create_ingest_errors(con, [loaded_with_warning])
    assert checks.unloaded_input(con).passed
    con.executemany(
        "insert into ingest_errors values (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                "run_b/epoch_003_results.json",
                "run_b",
                3,
                "bad_json",
                "truncated at byte 40",
                "error",
                "quarantined: not loaded",
            ),
            (None, None, None, "release_problem", "release /gone does not exist", "error", "skipped"),
        ],
    )
    result = checks.unloaded_input(con)
    assert (result.passed, result.severity, result.metadata["count"].value) == (False, dg.AssetCheckSeverity.WARN, 2)
    assert result.description == (
        "2 input file(s) or entries not loaded: release /gone does not exist, run_b/epoch_003_results.json"
    )
    assert [row["error_kind"] for row in result.metadata["examples"].value] == ["release_problem", "bad_json"]


def test_a_check_that_cannot_run_fails_instead_of_raising(tmp_path):
    duckdb.connect(str(tmp_path / "empty.duckdb")).close()
    (tmp_path / ".build").mkdir()
    (tmp_path / "empty.duckdb").rename(tmp_path / ".build" / "build.duckdb")  # no tables at all
    [result] = checks.evaluate_checks("group_metrics", WarehouseConfig(warehouse_dir=str(tmp_path)))
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR
    assert "could not run" in result.description and "group_metrics" in result.description


def test_a_no_change_rebuild_re_emits_stored_results_without_running_the_sql(tmp_path, monkeypatch):
    with open_build_db(tmp_path) as con:
        create_staging(con, EPOCHS, RUNS)  # run_a misses epoch 2: no_epoch_gaps fails
        build_marts(con)
        con.execute(
            "create table unloaded_epochs (run_id varchar, epoch bigint, reason varchar, source_path varchar,"
            " message varchar)"
        )
        create_ingest_errors(con, [])
        con.execute(
            "insert into bookkeeping.model_state select table_name, 'fp-' || table_name, now()"
            " from duckdb_tables() where schema_name = 'main'"
        )
    executed = []
    examples = checks._examples
    monkeypatch.setattr(
        checks, "_examples", lambda con, sql, params=None: executed.append(sql) or examples(con, sql, params)
    )
    warehouse = WarehouseConfig(warehouse_dir=str(tmp_path))

    def evaluate_all() -> dict[str, dg.AssetCheckResult]:
        return {r.check_name: r for model in checks.MODEL_CHECKS for r in checks.evaluate_checks(model, warehouse)}

    def summary(results):
        return {
            name: (r.passed, r.severity, r.description, {k: v.value for k, v in r.metadata.items()})
            for name, r in results.items()
        }

    first = evaluate_all()
    assert len(executed) == sum(map(len, checks.MODEL_CHECKS.values()))  # one query per check
    assert first["no_epoch_gaps"].metadata["examples"].value[0]["missing_ranges"] == ["2-2"]
    executed.clear()
    second = evaluate_all()
    assert executed == []
    assert summary(second) == summary(first)
    assert second["no_epoch_gaps"].metadata["count"].value == 1 and not second["no_epoch_gaps"].passed

    # fact_epochs rebuilt: its two checks, the trajectory check and the runs-loading check (which read it) run
    # again, nothing else
    with open_build_db(tmp_path) as con:
        con.execute("update bookkeeping.model_state set fingerprint = 'fp-2' where model = 'fact_epochs'")
    evaluate_all()
    assert len(executed) == 4
    executed.clear()
    # a changed check parameter runs that check again
    checks.evaluate_checks("epoch_metrics", WarehouseConfig(warehouse_dir=str(tmp_path), reward_tolerance=0.5))
    assert len(executed) == 1


def test_after_runs_are_computed_again_a_per_run_check_looks_at_their_rows_when_the_rest_passed(tmp_path):
    from pipelines.defs.models.assets import MODELS

    [unique] = [c for c in checks.declared_checks(MODELS["group_metrics"]) if c.name.startswith("unique_")]
    assert unique.per_run and unique.name == "unique_run_id_epoch_group_index"
    warehouse = WarehouseConfig(warehouse_dir=str(tmp_path))

    def table(fingerprint: str, rows: list[tuple[str, int]]) -> None:
        with open_build_db(tmp_path) as con:
            con.execute("create or replace table group_metrics (run_id varchar, epoch bigint, group_index bigint)")
            con.execute(
                "insert into group_metrics select r, e, 0 from (values " + ", ".join(map(str, rows)) + ") t(r, e)"
            )
            con.execute(
                "insert or replace into bookkeeping.model_state values ('group_metrics', ?, now())", [fingerprint]
            )

    def duplicates(since=None) -> list[str]:
        [result] = checks.evaluate_checks("group_metrics", warehouse, (unique,), {unique.name}, since=since)
        assert result.passed == (result.metadata["count"].value == 0)
        return [row["run_id"] for row in result.metadata["examples"].value]

    table("f1", [("a", 0), ("a", 1), ("b", 0)])
    assert duplicates() == []  # the whole table, stored as passed
    # run b computed again with a duplicate; run a's rows changed behind the step's back, which a per-run check of
    # the rewritten rows does not look at: it looks at b's alone
    table("f2", [("a", 0), ("a", 0), ("b", 0), ("b", 0)])
    assert duplicates(checks.Rewritten("f1", "run_id", ["b"])) == ["b"]
    # the table failed the check before (stored for f2: b's duplicate): after b is computed again, every row is looked
    # at, a's duplicate too
    table("f3", [("a", 0), ("a", 0), ("b", 0)])
    assert duplicates(checks.Rewritten("f2", "run_id", ["b"])) == ["a"]
    # rebuilt whole (no rewritten runs): every row
    table("f4", [("a", 0), ("a", 0), ("b", 0), ("b", 0)])
    assert duplicates() == ["a", "b"]


def test_each_check_runs_the_query_its_stored_result_is_keyed_by(monkeypatch):
    """A check's stored result is keyed by the tables its query (ModelCheck.sql) reads: evaluating it runs that
    query and no other, so a table it reads is never left out of the key."""
    from pipelines.defs.models.assets import MODELS

    con = built(EPOCHS)
    con.execute("create table unloaded_epochs (run_id varchar, epoch bigint, reason varchar, source_path varchar)")
    create_ingest_errors(con, [])
    executed = []
    examples = checks._examples
    monkeypatch.setattr(
        checks, "_examples", lambda con, sql, params=None: executed.append(sql) or examples(con, sql, params)
    )
    declared = checks.declared_checks(MODELS["epoch_metrics"])
    for check in [check for model in checks.MODEL_CHECKS.values() for check in model] + list(declared):
        executed.clear()
        check.evaluate(con, WarehouseConfig())
        assert executed == [check.sql], check.name
    assert checks.MODEL_CHECKS["unloaded_epochs"][0].reads == ("dim_runs", "fact_epochs", "unloaded_epochs")
    assert {check.reads for check in declared} == {("epoch_metrics",)}
