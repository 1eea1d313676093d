"""The SQL model loader on the real sql/ folder and on broken model files."""

import duckdb
import pytest

from pipelines.models import ModelError, header_comment, load_models, run_model
from pipelines.warehouse_db import LAKE_VIEWS

MARTS = ["epoch_metrics", "group_metrics", "run_summary", "snapshots", "ablation_contrasts", "reward_breakdowns",
         "matched_window_values", "bootstrap_means", "epoch_trajectory_counts"]


def test_every_mart_is_a_described_model_with_dependencies_from_its_sql():
    models = load_models(lake_tables=frozenset(LAKE_VIEWS))
    for name in MARTS:
        assert models[name].layer == "marts"
        assert len(models[name].description) > 40
    assert set(models["epoch_metrics"].model_deps) == {"fact_epochs", "fact_trajectories", "group_metrics"}
    assert set(models["run_summary"].model_deps) == {"epoch_metrics", "fact_epochs", "dim_runs"}
    assert set(models["ablation_contrasts"].model_deps) == {"run_summary", "matched_window_values", "bootstrap_means",
                                                            "dim_runs"}
    assert set(models["matched_window_values"].model_deps) == {"run_summary", "epoch_metrics"}
    assert models["bootstrap_means"].model_deps == ("matched_window_values",)
    assert models["snapshots"].model_deps == ("run_summary",)
    order = list(models)
    for model in models.values():
        assert all(order.index(dep) < order.index(model.name) for dep in model.model_deps)


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
