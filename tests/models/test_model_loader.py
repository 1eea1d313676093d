"""The SQL model loader on the real sql/ folder and on broken model files."""

import duckdb
import pytest

from pipelines.models import ModelError, header_comment, load_models, run_model, set_parameters
from pipelines.stats.sql_functions import FUNCTIONS
from pipelines.warehouse_db import LAKE_VIEWS

MARTS = [
    "epoch_metrics",
    "group_metrics",
    "run_horizons",
    "run_summary",
    "snapshots",
    "ablation_contrasts",
    "contrast_pairs",
    "reward_breakdowns",
    "matched_window_values",
    "matched_series",
    "epoch_trajectory_counts",
]


def test_every_mart_is_a_described_model_with_dependencies_from_its_sql():
    models = load_models(lake_tables=frozenset(LAKE_VIEWS))
    for name in MARTS:
        assert models[name].layer == "marts"
        assert len(models[name].description) > 40
    assert set(models["epoch_metrics"].model_deps) == {"fact_epochs", "fact_trajectories", "group_metrics"}
    assert set(models["run_horizons"].model_deps) == {"epoch_metrics", "dim_runs"}
    assert set(models["matched_series"].model_deps) == {"epoch_metrics", "group_metrics", "run_horizons"}
    assert set(models["run_summary"].model_deps) == {"epoch_metrics", "fact_epochs", "run_horizons", "matched_series"}
    assert set(models["ablation_contrasts"].model_deps) == {
        "run_summary",
        "matched_window_values",
        "matched_series",
        "dim_runs",
        "contrast_pairs",
    }
    assert set(models["contrast_pairs"].model_deps) == {"run_summary", "dim_runs"}
    assert set(models["matched_window_values"].model_deps) == {"run_summary", "epoch_metrics"}
    assert models["snapshots"].model_deps == ("run_summary",)
    order = list(models)
    for model in models.values():
        assert all(order.index(dep) < order.index(model.name) for dep in model.model_deps)


def test_a_model_registers_the_python_functions_its_sql_calls_and_no_other(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "fits.sql").write_text(
        "-- run_interval(...) here is a comment, 'seeds_per_arm(1)' below a string\n"
        "with power as (select SEEDS_PER_ARM(1.0, 1.0, 0.95) as seeds)\n"
        "select seeds, 'run_interval(x)' as words from power\n"
    )
    (tmp_path / "marts" / "plain.sql").write_text("select 1 as arm_interval\n")
    models = load_models(tmp_path)
    assert models["fits"].python_functions == ("seeds_per_arm",)
    assert models["plain"].python_functions == ()

    def registered(con) -> set[str]:
        found = con.execute("select function_name from duckdb_functions() where function_name in ?", [list(FUNCTIONS)])
        return {name for (name,) in found.fetchall()}

    con = duckdb.connect()
    set_parameters(con, {}, models["plain"].python_functions)
    assert registered(con) == set()
    for _ in range(2):  # again on the same connection: already there
        set_parameters(con, {}, models["fits"].python_functions)
    assert registered(con) == {"seeds_per_arm"}
    run_model(con, models["fits"])
    # a difference of one standard deviation at 80% power and 5%: 17 an arm, as power tables give it
    assert con.execute("select seeds, words from fits").fetchall() == [(17, "run_interval(x)")]
    set_parameters(con, {})  # by default, every function
    assert registered(con) == set(FUNCTIONS)


def test_a_model_reading_a_missing_table_fails_naming_its_file(tmp_path):
    (tmp_path / "marts").mkdir()
    bad = tmp_path / "marts" / "broken.sql"
    bad.write_text("-- reads a table nobody builds\nselect * from no_such_table\n")
    with pytest.raises(ModelError, match=r"broken\.sql.*no_such_table"):
        load_models(tmp_path)


def test_a_model_failing_at_run_time_names_its_file(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "base.sql").write_text("select 1 as x\n")
    (tmp_path / "marts" / "uses_base.sql").write_text("select missing_column from base\n")
    models = load_models(tmp_path)
    con = duckdb.connect()
    run_model(con, models["base"])
    with pytest.raises(ModelError, match=r"uses_base\.sql.*missing_column"):
        run_model(con, models["uses_base"])


def test_header_comment_is_the_description_with_parameters_named():
    sql = "-- Mean over the last getvariable('final_window')\n-- loaded epochs.\n\nselect 1 -- not part of it\n"
    assert header_comment(sql) == "Mean over the last `final_window` loaded epochs."
    assert header_comment("select 1") == ""


def test_schema_yml_declares_columns_tests_and_the_incremental_key(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "scores.sql").write_text("-- One row per run.\nselect 'a' as run_id, 1.0 as score\n")
    (tmp_path / "marts" / "schema.yml").write_text("""
version: 2
models:
  - name: scores
    config: {materialized: incremental, incremental_strategy: delete+insert, unique_key: run_id, batch_rows: 500}
    meta: {dagster: {columns_from: [lake.runs]}}
    data_tests:
      - dbt_utils.unique_combination_of_columns:
          combination_of_columns: [run_id, score]
    columns:
      - name: run_id
        data_type: varchar
        description: The run.
        data_tests: [unique, not_null]
      - name: score
        data_type: double
        description: Its score.
""")
    model = load_models(tmp_path)["scores"]
    assert (model.incremental_key, model.batch_rows) == ("run_id", 500)
    assert [(c.name, c.data_type, c.description, c.tests) for c in model.columns] == [
        ("run_id", "varchar", "The run.", ("unique", "not_null")),
        ("score", "double", "Its score.", ()),
    ]
    assert model.unique_combinations == (("run_id", "score"),)
    assert model.columns_from == ("lake.runs",)


@pytest.mark.parametrize(
    "declaration, refusal",
    [
        ("  - name: nowhere\n", r"`nowhere` has no SQL file"),
        ("  - name: scores\n    columns:\n      - name: run_id\n", r"column `run_id` needs a description"),
        (
            "  - name: scores\n    columns:\n      - {name: run_id, description: x, data_tests: [accepted_values]}\n",
            r"column `run_id`.*among unique, not_null",
        ),
        ("  - name: scores\n    data_tests: [unique]\n", r"data_tests are dbt_utils.unique_combination_of_columns"),
        ("  - name: scores\n    config: {batch_rows: 1000}\n", r"batch_rows is .* for an incremental model only"),
    ],
)
def test_a_schema_yml_the_loader_cannot_honour_is_refused_naming_it(tmp_path, declaration, refusal):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "scores.sql").write_text("select 'a' as run_id\n")
    (tmp_path / "marts" / "schema.yml").write_text("models:\n" + declaration)
    with pytest.raises(ModelError, match=r"schema\.yml.*" + refusal):
        load_models(tmp_path)
