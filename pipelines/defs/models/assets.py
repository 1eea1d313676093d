"""Turns every SQL model under sql/ into an asset whose dependencies come from the SQL itself."""

import warnings
from contextlib import nullcontext
from datetime import timedelta
from typing import NamedTuple

import dagster as dg
import duckdb

from pipelines.code_versions import code_version
from pipelines.defs.models.checks import Rewritten, check_specs, declared_checks, evaluate_checks
from pipelines.defs.resources import WarehouseConfig
from pipelines.errors import failure_line
from pipelines.lake.paths import RUN_TABLES
from pipelines.lake_store import register_lake
from pipelines.models import (
    LAKE_SCHEMA,
    SCHEMA_FILE,
    SQL_DIR,
    SqlModel,
    columns,
    columns_digest,
    digest,
    key_batches,
    key_digests,
    load_models,
    run_model,
    run_model_in_batches,
    run_model_rows,
    set_parameters,
    transaction,
)
from pipelines.warehouse_db import (
    BOOKKEEPING,
    LAKE_VIEWS,
    create_lake_views,
    lake_fingerprint,
    lake_run_stamps,
    model_fingerprint,
    parquet_source,
    publish_if_changed,
    published_path,
    record_inputs,
    record_model,
    recorded_inputs,
    view_files,
)

DUCKDB_POOL = "duckdb_writer"
PUBLISHED_BY_CRON = "0 5 * * *"  # two hours after the nightly refresh starts
MODELS = load_models(SQL_DIR, frozenset(LAKE_VIEWS))
# The code that makes the tables (code_versions): this module and what it imports, the runner, the lake views, the
# checks and the functions the SQL calls among them, and DuckDB's version. A table made by other code is made again.
MODELS_CODE = code_version(__name__)


def column_schema(model: SqlModel, found: list[tuple[str, str]] | None = None) -> dg.TableSchema:
    """The model's columns with their schema.yml descriptions: those of the built table when given, else as declared
    (so the catalog shows them before the first build)."""
    declared = {column.name: column for column in model.columns}
    if found is None:
        found = [(column.name, column.data_type) for column in model.columns]
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name,
                kind.lower(),
                description=declared[name].description,
                constraints=dg.TableColumnConstraints(
                    nullable="not_null" not in declared[name].tests, unique="unique" in declared[name].tests
                ),
            )
            if name in declared
            else dg.TableColumn(name, kind.lower())
            for name, kind in found
        ]
    )


def table_metadata(con, model: SqlModel) -> dict:
    return {
        "dagster/row_count": con.execute(f"select count(*) from {model.name}").fetchone()[0],
        "dagster/column_schema": column_schema(model, columns(con, model.name)),
        "dagster/table_name": model.name,
    }


def _exists(con, table: str) -> bool:
    return bool(
        con.execute(
            "select count(*) from duckdb_tables() where schema_name = 'main' and table_name = ?", [table]
        ).fetchone()[0]
    )


def _incremental_inputs(con, model: SqlModel, params: dict, lake) -> tuple[str, dict[str, str]]:
    """What an incremental model is computed from: a fingerprint of what it reads whole (its SQL, the parameters,
    the recorded inputs of the incremental models it reads, and any table without its key), and a stamp per key
    of the rest: its per-run lake partitions, those incremental models' own stamps, and a digest of each key's
    rows of the other tables it reads (dim_runs, lake.runs): a new run does not change the other runs' rows."""
    key = model.incremental_key
    whole, per_key = [], []
    for dep in model.model_deps:
        if MODELS[dep].incremental_key == key:
            recorded, stamps = recorded_inputs(con, dep)
            whole.append(recorded or "missing")
            per_key.append(stamps)
        elif _exists(con, dep) and key in dict(columns(con, dep)):
            digests, keyless = key_digests(con, dep, key)
            whole.append(keyless)
            per_key.append(digests)
        else:
            whole.append(model_fingerprint(con, dep) or "missing")
    run_tables = [table for table in model.lake_deps if table in RUN_TABLES]
    if run_tables:
        per_key.append(lake_run_stamps(lake, run_tables))
    for table in model.lake_deps:
        if table in RUN_TABLES:
            continue
        files = view_files(lake, table)
        if key in LAKE_VIEWS[table] and files:  # read from the file: redefining the lake views would write the database
            digests, keyless = key_digests(con, parquet_source(files), key)
            whole.append(keyless)
            per_key.append(digests)
        else:
            whole.append(lake_fingerprint(lake, [table]))
    keys = sorted(set().union(*per_key))
    return model.fingerprint(params, whole, MODELS_CODE), {k: "|".join(s.get(k, "") for s in per_key) for k in keys}


def _prepare(con, model: SqlModel, params: dict, lake) -> None:
    """What the model's SQL needs before it runs: the lake views over today's files, the metric parameters it reads,
    the Python functions it calls."""
    if model.lake_deps:
        create_lake_views(con, lake)
    set_parameters(con, {name: params.get(name) for name in model.parameters}, model.python_functions)


def _rebuild(con, model: SqlModel, params: dict, lake) -> None:
    _prepare(con, model, params, lake)
    run_model(con, model)


def _refresh_incremental(con, model: SqlModel, params: dict, lake) -> tuple[str, str, list[str] | None]:
    """Computes again only the rows of the runs whose inputs changed, when nothing read whole changed since the
    table was built (nor its columns); rebuilds it otherwise. The recorded inputs are those of the table's rows.
    Returns the fingerprint, what was done, and the keys whose rows were computed again (None: rebuilt whole)."""
    whole, stamps = _incremental_inputs(con, model, params, lake)
    recorded, old_stamps = recorded_inputs(con, model.name)
    done, changed = "rebuilt", None
    if _exists(con, model.name) and recorded == digest(whole, columns_digest(con, model.name)):
        changed = sorted(key for key in stamps.keys() | old_stamps.keys() if stamps.get(key) != old_stamps.get(key))
        if not changed:
            done = "kept"
        else:
            _prepare(con, model, params, lake)
            if run_model_rows(con, model, changed):
                done = f"{len(changed)} {model.incremental_key}(s) computed again"
    if done == "rebuilt":
        changed = None
        _prepare(con, model, params, lake)
        run_model_in_batches(con, model, key_batches(con, model, list(stamps)))
    shape = columns_digest(con, model.name)
    fingerprint = digest(whole, shape, stamps)
    if done != "kept":  # after the rows: a crash in between only means the same runs are computed again
        with transaction(con):
            record_inputs(con, model.name, digest(whole, shape), stamps)
            record_model(con, model.name, fingerprint)
    return fingerprint, done, changed


class Refreshed(NamedTuple):
    """What refresh_model did to a model's table."""

    fingerprint: str
    done: str  # "kept", "rebuilt", or how many keys were computed again
    metadata: dict
    rewritten: list[str] | None = None  # the keys whose rows were computed again in place; None: kept or rebuilt


def refresh_model(
    model: SqlModel, warehouse: WarehouseConfig, con: duckdb.DuckDBPyConnection | None = None
) -> Refreshed:
    """Brings the model's table up to date: kept when its SQL, parameters and inputs are unchanged since the last
    build, rows of the changed runs computed again for an incremental model, rebuilt otherwise.

    con: a connection to the build database the caller holds (warehouse.build_db()); else one is opened."""
    params = warehouse.metric_parameters()
    lake = warehouse.lake
    rewritten = None
    with nullcontext(con) if con is not None else warehouse.build_db() as con:
        register_lake(con, lake)
        if model.incremental_key:
            fingerprint, done, rewritten = _refresh_incremental(con, model, params, lake)
        else:
            upstream = [model_fingerprint(con, dep) or "missing" for dep in model.model_deps]
            if model.lake_deps:
                upstream.append(lake_fingerprint(lake, model.lake_deps))
            fingerprint = model.fingerprint(params, upstream, MODELS_CODE)
            done = (
                "kept" if _exists(con, model.name) and model_fingerprint(con, model.name) == fingerprint else "rebuilt"
            )
            if done == "rebuilt":
                _rebuild(con, model, params, lake)
                record_model(con, model.name, fingerprint)
        return Refreshed(fingerprint, done, table_metadata(con, model), rewritten if done != "kept" else None)


def column_lineage(model: SqlModel) -> dg.TableColumnLineage:
    """Each column the model passes through unchanged from a table it reads (schema.yml's meta.dagster.columns_from),
    by name."""
    deps: dict[str, list[dg.TableColumnDep]] = {}
    for source in model.columns_from:
        schema, _, table = source.rpartition(".")
        if schema == LAKE_SCHEMA:
            key, names = dg.AssetKey([LAKE_SCHEMA, table]), set(LAKE_VIEWS[table])
        else:
            key, names = dg.AssetKey(table), {column.name for column in MODELS[table].columns}
        for column in model.columns:
            if column.name in names:
                deps.setdefault(column.name, []).append(dg.TableColumnDep(asset_key=key, column_name=column.name))
    return dg.TableColumnLineage(deps_by_column=deps)


def code_references(model: SqlModel) -> dg.CodeReferencesMetadataValue:
    """The model's SQL file and the schema.yml declaring its columns and tests, as the UI's code links."""
    files = [(model.path, "SQL"), (model.path.parent / SCHEMA_FILE, "columns and data tests")]
    # The documented form of code references; its classes are marked beta in 1.13.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return dg.CodeReferencesMetadataValue(
            code_references=[
                dg.LocalFileCodeReference(file_path=str(path), line_number=1, label=label)
                for path, label in files
                if path.is_file()
            ]
        )


def model_spec(model: SqlModel) -> dg.AssetSpec:
    """The model's asset: its name, what it reads (from the SQL), its columns, code version and SQL file."""
    deps = [dg.AssetKey(dep) for dep in model.model_deps] + [dg.AssetKey(["lake", t]) for t in model.lake_deps]
    return dg.AssetSpec(
        model.name,
        deps=deps,
        description=model.description or None,
        group_name="models",
        kinds={"duckdb", "sql"},
        tags={"layer": model.layer},
        code_version=model.code_version(MODELS_CODE),
        metadata={
            "sql_file": str(model.path.relative_to(SQL_DIR.parent)),
            "dagster/column_schema": column_schema(model),
            "dagster/table_name": model.name,
            "dagster/code_references": code_references(model),
            **({"incremental_key": model.incremental_key} if model.incremental_key else {}),
            **({"dagster/column_lineage": column_lineage(model)} if model.columns_from else {}),
        },
    )


class ModelsFailed(Exception):
    """Models whose refresh raised, each named with its error on one line; the others were refreshed."""


MODEL_SPECS = {name: model_spec(model) for name, model in MODELS.items()}
MODEL_CHECKS = {name: declared_checks(model) for name, model in MODELS.items()}


# Every SQL model is an asset of this one definition, as dagster-dbt's @dbt_assets makes a dbt project's models: one
# step runs the selected models in dependency order on one connection to the build database, each reported as its own
# asset with its checks, code version and data version. Subsettable: the UI, a job or the automation sensor selects
# any models and checks (a check alone runs against the table as it stands: the UI's "Execute" on a check).
@dg.multi_asset(
    name="sql_models",
    specs=list(MODEL_SPECS.values()),
    check_specs=[spec for name in MODELS for spec in check_specs(name, MODEL_CHECKS[name])],
    can_subset=True,
    pool=DUCKDB_POOL,
)
def sql_models(context: dg.AssetExecutionContext, warehouse: WarehouseConfig):
    checks: dict[str, set[str]] = {}
    for key in context.selected_asset_check_keys:
        checks.setdefault(key.asset_key.to_user_string(), set()).add(key.name)
    failed: dict[str, str] = {}  # a model's own error, on one line
    skipped: set[str] = set()  # models reading a failed one
    first_error = None  # the cause the UI shows with its traceback
    with warehouse.build_db() as con:
        for name, model in MODELS.items():
            if MODEL_SPECS[name].key not in context.selected_asset_keys:
                if name in checks:
                    yield from evaluate_checks(name, warehouse, MODEL_CHECKS[name], checks[name], con)
                continue
            # As dbt does: a model whose input failed is skipped, the models that do not read it go on.
            if blocked := next((dep for dep in model.model_deps if dep in failed.keys() | skipped), None):
                skipped.add(name)
                context.log.warning(f"{name}: not refreshed, {blocked} failed")
                continue
            try:
                yield _refresh_and_check(context, model, warehouse, con, checks.get(name, set()))
            except Exception as error:  # one model's failure must not stop the models that do not read it
                failed[name] = failure_line(error)
                first_error = first_error or error
                context.log.error(f"{name}: {failed[name]}")
    if failed:
        waiting = f" ({len(skipped)} model(s) reading {'it' if len(failed) == 1 else 'them'} not refreshed)"
        message = "; ".join(f"{name}: {reason}" for name, reason in failed.items()) + (waiting if skipped else "")
        raise ModelsFailed(message) from first_error


def _refresh_and_check(context, model: SqlModel, warehouse: WarehouseConfig, con, checks: set[str]):
    """Refreshes the model's table (refresh_model) and evaluates its selected checks: its materialization."""
    before = model_fingerprint(con, model.name)
    fingerprint, done, metadata, rewritten = refresh_model(model, warehouse, con)
    # A kept table re-emits its stored results; one whose runs were computed again in place has those runs' rows
    # checked (Rewritten) where the rest passed before.
    since = Rewritten(before, model.incremental_key, rewritten) if before and rewritten else None
    results = evaluate_checks(model.name, warehouse, MODEL_CHECKS[model.name], checks, con, since)
    rows = metadata["dagster/row_count"]
    kept = done == "kept"
    context.log.info(f"{model.name}: {rows:,} rows" + (" (inputs unchanged, table kept)" if kept else f" ({done})"))
    return dg.MaterializeResult(
        asset_key=MODEL_SPECS[model.name].key,
        metadata={**metadata, "grpo/rebuilt": not kept, "grpo/refresh": done},
        data_version=dg.DataVersion(fingerprint),
        check_results=results,
    )


@dg.asset(
    deps=[dg.AssetKey(name) for name in MODELS],
    group_name="exports",
    kinds={"duckdb"},
    code_version=MODELS_CODE,
    pool=DUCKDB_POOL,
    # The nightly refresh (03:00 UTC) publishes it, or finds it up to date, every night.
    freshness_policy=dg.FreshnessPolicy.cron(deadline_cron=PUBLISHED_BY_CRON, lower_bound_delta=timedelta(hours=2)),
)
def warehouse_duckdb(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """The published warehouse.duckdb: every model's table, swapped in atomically for readers."""
    with warehouse.build_db(read_only=True) as con:
        state = dict(con.execute(f"select model, fingerprint from {BOOKKEEPING}.model_state order by model").fetchall())
    # The storage version too: the same tables written in another one are another file; and the code that copies them.
    fingerprint = digest(state, warehouse.duckdb_storage_version, MODELS_CODE)
    target = published_path(warehouse.warehouse)
    published = publish_if_changed(warehouse.warehouse, fingerprint, MODELS, warehouse.duckdb_storage_version)
    if published:
        context.log.info(f"published {target}")
    else:
        context.log.info("no table changed since the last publication; warehouse.duckdb kept")
    return dg.MaterializeResult(
        metadata={"path": dg.MetadataValue.path(str(target)), "tables": len(state), "grpo/published": published},
        data_version=dg.DataVersion(fingerprint),
    )
