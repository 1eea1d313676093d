"""The rule every incremental model (schema.yml: `materialized: incremental`, `unique_key: run_id`) is refreshed by:
each of its rows of a run is computed from that run's rows of the tables it reads (and their rows of no run), and
from the tables without a run_id read whole. Checked for every model declared incremental, none listed here."""

import json
import random
from contextlib import contextmanager

import duckdb
import pytest
import yaml
from helpers import epoch_document, write_epoch_file

from pipelines.defs.models.assets import MODELS
from pipelines.defs.resources import WarehouseConfig
from pipelines.models import SQL_DIR, load_models, run_model, set_parameters

# One whole build, which the module's tests read on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("per_run_rule")]

INCREMENTAL = sorted(name for name, model in MODELS.items() if model.incremental_key)
KEY = "run_id"
WHOLE = "__whole"  # the suffix the lake views are renamed with, so that a view of the same name can filter them
SETTINGS = {"final_window": 3, "rolling_window": 3, "breakdown_window": 2}
REGISTRY = """run_id,ablation,arm,group_size
alpha_2fp,alpha,,4
alpha_4fp,alpha,,8
beta_s1,beta,wide,4
beta_s2,beta,wide,4
beta_s3,beta,narrow,4
beta_s4,beta,narrow,4
"""


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def document(epoch: int, rng: random.Random, n: int = 8, **extras) -> dict:
    """An epoch document whose rewards differ from run to run and epoch to epoch (rng), advantages normalised."""
    rewards = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
    mean = sum(rewards) / n
    return epoch_document(epoch, n, **extras) | {
        "rewards": rewards,
        "advantages": [reward - mean for reward in rewards],
        "mean_reward": mean,
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A warehouse of two ablations (one of seeds in two arms), with a gap, a damaged file, a duplicate epoch in the
    other layout, a NaN reward, per-trajectory extras and a file of no run; its lake views renamed (WHOLE) and seen
    again under their names, unfiltered."""
    from pipelines.cli import main

    root = tmp_path_factory.mktemp("per_run")
    release, rng = root / "release", random.Random(7)
    for run in ("alpha_2fp", "alpha_4fp", "beta_s1", "beta_s2", "beta_s3", "beta_s4"):
        for epoch in range(6):
            extras = {"target_model": [f"m{i % 3}" for i in range(8)], "is_fp_control": [i < 2 for i in range(8)]}
            if run != "alpha_4fp" or epoch != 3:
                write_epoch_file(release / run, epoch, document(epoch, rng, **(extras if "alpha" in run else {})))
    write_epoch_file(release / "alpha_2fp", 2, document(2, rng), layout="folder")  # the same epoch again
    write_epoch_file(release / "beta_s2", 4, '{"epoch": 4, "rewards": [0.5,')
    nan_reward = json.dumps(document(5, rng)).replace('"rewards": [', '"rewards": [NaN, ', 1)
    write_epoch_file(release / "beta_s3", 5, nan_reward.replace('"trajectory_ids": [', '"trajectory_ids": ["x", ', 1))
    (release / "notes.txt").write_text("not a run")
    (root / "registry.csv").write_text(REGISTRY)
    argv = [
        "build",
        "--release",
        str(release),
        "--warehouse",
        str(root / "wh"),
        "--registry",
        str(root / "registry.csv"),
    ]
    assert main(argv + [arg for name, value in SETTINGS.items() for arg in ("--param", f"{name}={value}")]) == 0
    config = WarehouseConfig(warehouse_dir=str(root / "wh"), registries=[str(root / "registry.csv")], **SETTINGS)
    with config.build_db() as con:
        for (view,) in con.execute("select view_name from duckdb_views() where schema_name = 'lake'").fetchall():
            con.execute(f"alter view lake.{quoted(view)} rename to {quoted(view + WHOLE)}")
            con.execute(f"create view lake.{quoted(view)} as select * from lake.{quoted(view + WHOLE)}")
    return config


def has_key(con, relation: str) -> bool:
    return KEY in [row[0] for row in con.execute(f"describe {relation}").fetchall()]


@contextmanager
def seeing(con, model, run: str | None):
    """While in the block, the model's SQL sees the tables it reads that have a run_id as their rows of the run and
    of no run (None: all their rows); the other tables whole."""
    rows = "true" if run is None else f"{KEY} = {literal(run)} or {KEY} is null"
    catalog = con.execute("select current_database()").fetchone()[0]
    shadowed = []
    for dep in model.model_deps:
        table = f"{quoted(catalog)}.main.{quoted(dep)}"
        if has_key(con, table):
            con.execute(f"create or replace temp view {quoted(dep)} as select * from {table} where {rows}")
            shadowed.append(dep)
    for dep in model.lake_deps:
        whole = f"lake.{quoted(dep + WHOLE)}"
        if has_key(con, whole):
            con.execute(f"create or replace view lake.{quoted(dep)} as select * from {whole} where {rows}")
    try:
        yield
    finally:
        for dep in shadowed:
            con.execute(f"drop view temp.main.{quoted(dep)}")
        for dep in model.lake_deps:
            whole = f"lake.{quoted(dep + WHOLE)}"
            if has_key(con, whole):
                con.execute(f"create or replace view lake.{quoted(dep)} as select * from {whole}")


def rows_by_run(con, sql: str) -> dict[str, list[tuple]]:
    """The query's rows that have a run, as text, by run (sorted: a refresh appends the rows it computes again)."""
    found: dict[str, list[tuple]] = {}
    for row in con.execute(f"select {KEY}::varchar, * from ({sql}) where {KEY} is not null").fetchall():
        found.setdefault(row[0], []).append(tuple(map(str, row[1:])))
    return {run: sorted(rows) for run, rows in found.items()}


def per_run_differences(con, model, runs: list[str]) -> dict[str, tuple[list, list]]:
    """The runs whose rows of the model differ when computed from every row of what it reads and when computed
    from that run's rows alone (seeing): each with both, in that order."""
    sql = model.sql.rstrip().rstrip(";")
    with seeing(con, model, None):
        everything = rows_by_run(con, sql)
    differences = {}
    for run in runs:
        with seeing(con, model, run):
            alone = rows_by_run(con, sql)
        if alone.keys() - {run} or alone.get(run, []) != everything.get(run, []):
            differences[run] = (everything.get(run, []), alone)
    return differences


def test_every_model_declared_incremental_is_checked():
    declared = [
        entry["name"]
        for schema in SQL_DIR.glob("*/schema.yml")
        for entry in yaml.safe_load(schema.read_text())["models"]
        if (entry.get("config") or {}).get("materialized") == "incremental"
    ]
    assert sorted(declared) == INCREMENTAL and len(INCREMENTAL) > 1


@pytest.mark.slow
@pytest.mark.parametrize("ci_method", ["reml", "iid"])
@pytest.mark.parametrize("name", INCREMENTAL)
def test_each_row_of_a_run_is_computed_from_that_runs_rows(built, name, ci_method):
    model = MODELS[name]
    with built.build_db() as con:
        set_parameters(con, built.metric_parameters() | {"ci_method": ci_method})
        runs = [run for (run,) in con.execute(f"select {KEY} from dim_runs order by 1").fetchall()]
        assert len(runs) == 6
        assert per_run_differences(con, model, runs) == {}


def test_a_model_reading_other_runs_rows_is_found(tmp_path):
    (tmp_path / "marts").mkdir()
    (tmp_path / "marts" / "scores.sql").write_text(
        "select * from (values ('a', 1.0), ('a', 2.0), ('b', 4.0)) as t(run_id, score)\n"
    )
    (tmp_path / "marts" / "own.sql").write_text("select run_id, sum(score) as total from scores group by run_id\n")
    (tmp_path / "marts" / "share.sql").write_text(
        "select run_id, sum(score) / (select sum(score) from scores) as share from scores group by run_id\n"
    )
    incremental = "    config: {materialized: incremental, incremental_strategy: delete+insert, unique_key: run_id}\n"
    (tmp_path / "marts" / "schema.yml").write_text(
        f"models:\n  - name: own\n{incremental}  - name: share\n{incremental}"
    )
    models = load_models(tmp_path)
    with duckdb.connect() as con:
        con.execute("create schema lake")
        run_model(con, models["scores"])
        assert per_run_differences(con, models["own"], ["a", "b"]) == {}
        differences = per_run_differences(con, models["share"], ["a", "b"])
    # a's share of every score is 3/7; computed from a's rows alone it is 1
    assert differences["a"] == ([("a", str(3 / 7))], {"a": [("a", "1.0")]})
