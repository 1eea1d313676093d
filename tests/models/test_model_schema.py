"""Each model's schema.yml against the table the model builds: every column described, with its type, and its
declared data tests passing on a clean build and failing on rows that break them."""

import dagster as dg
import duckdb
import pytest
from helpers import write_epoch_file

from pipelines.defs.models.assets import MODELS
from pipelines.defs.models.checks import declared_checks, evaluate_checks, violations
from pipelines.defs.resources import WarehouseConfig

# One whole build, which the module's tests read on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("model_schema")]


@pytest.fixture(scope="module")
def clean_build(tmp_path_factory) -> WarehouseConfig:
    """Two runs of documented keys only (no extras), in both layouts; built once for the module's tests."""
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("schema")
    for epoch in range(3):
        write_epoch_file(root / "release" / "run_a", epoch)
        write_epoch_file(root / "release" / "run_b_4fp", epoch, layout="folder")
    assert main(["build", "--warehouse", str(root / "wh"), "--workers", "1", "--release", str(root / "release")]) == 0
    return WarehouseConfig(warehouse_dir=str(root / "wh"), releases=[str(root / "release")])


def test_every_column_of_every_model_is_declared_with_its_type(clean_build):
    with duckdb.connect(str(clean_build.warehouse / "warehouse.duckdb"), read_only=True) as con:
        for model in MODELS.values():
            built = [(name, kind.lower()) for name, kind, *_ in con.execute(f"describe {model.name}").fetchall()]
            declared = [(column.name, column.data_type) for column in model.columns]
            assert declared == built, model.name
            assert all(column.description.strip() for column in model.columns)


def test_every_model_tests_its_grain_and_the_tests_pass_on_a_clean_build(clean_build):
    for model in MODELS.values():
        names = {check.name for check in declared_checks(model)}
        # ingest_errors: one row per problem, no key identifies a row. fact_trajectories: its grain's uniqueness is
        # epoch_trajectory_counts' trajectory_arrays_consistent check (per-run counts, not a group-by over all rows).
        if model.name not in ("ingest_errors", "fact_trajectories"):
            assert any(name.startswith("unique_") for name in names), model.name
        assert any(name.startswith("not_null_") for name in names), model.name
        results = evaluate_checks(model.name, clean_build, declared_checks(model), selected=names)
        assert {r.check_name for r in results} == names
        assert all(r.passed for r in results), [(r.check_name, r.description) for r in results if not r.passed]


def test_unique_and_not_null_find_the_rows_that_break_them():
    con = duckdb.connect()
    con.execute("create table t as select * from (values ('a', 0), ('a', 1), ('a', 1), (null, 2)) as t(run_id, epoch)")
    duplicate = violations(con, "t", "unique", ("run_id", "epoch"))
    assert (duplicate.passed, duplicate.severity, duplicate.metadata["count"].value) == (
        False,
        dg.AssetCheckSeverity.ERROR,
        1,
    )
    assert duplicate.metadata["examples"].value == [{"run_id": "a", "epoch": 1, "n_rows": 2}]
    assert violations(con, "t", "unique", ("epoch",)).metadata["count"].value == 1
    assert violations(con, "t", "unique", ("run_id",)).metadata["count"].value == 1  # 'a' three times; null once
    missing = violations(con, "t", "not_null", ("run_id",))
    assert (missing.passed, missing.metadata["examples"].value) == (False, [{"run_id": None, "epoch": 2}])
    assert violations(con, "t", "not_null", ("epoch",)).passed
