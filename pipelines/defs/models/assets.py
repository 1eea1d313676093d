"""Turns every SQL model under sql/ into an asset whose dependencies come from the SQL itself."""


import hashlib
import json

import dagster as dg

from pipelines.defs.models.checks import check_specs, evaluate_checks
from pipelines.defs.resources import WarehouseConfig
from pipelines.models import SQL_DIR, SqlModel, load_models, run_model, set_parameters
from pipelines.warehouse_db import (
    LAKE_VIEWS,
    create_lake_views,
    lake_dir,
    lake_fingerprint,
    model_fingerprint,
    open_build_db,
    publish_if_changed,
    published_path,
    record_model,
)

DUCKDB_POOL = "duckdb_writer"
MODELS = load_models(SQL_DIR, frozenset(LAKE_VIEWS))


def table_metadata(con, table: str) -> dict:
    columns = con.execute(f"describe {table}").fetchall()
    return {
        "dagster/row_count": con.execute(f"select count(*) from {table}").fetchone()[0],
        "dagster/column_schema": dg.TableSchema(columns=[dg.TableColumn(name, str(kind)) for name, kind, *_ in columns]),
        "dagster/table_name": table,
    }


def refresh_model(model: SqlModel, warehouse: WarehouseConfig) -> tuple[str, bool, dict]:
    """Rebuilds the model's table unless its SQL, parameters and inputs are unchanged since the last build."""
    params = warehouse.metric_parameters()
    with open_build_db(warehouse.warehouse, memory_limit=warehouse.duckdb_memory_limit) as con:
        upstream = [model_fingerprint(con, dep) or "missing" for dep in model.model_deps]
        if model.lake_deps:
            upstream.append(lake_fingerprint(lake_dir(warehouse.warehouse), model.lake_deps))
        fingerprint = model.fingerprint(params, upstream)
        exists = con.execute(
            "select count(*) from duckdb_tables() where schema_name = 'main' and table_name = ?", [model.name]
        ).fetchone()[0]
        unchanged = bool(exists) and model_fingerprint(con, model.name) == fingerprint
        if not unchanged:
            if model.lake_deps:
                create_lake_views(con, lake_dir(warehouse.warehouse))
            set_parameters(con, params)
            run_model(con, model)
            record_model(con, model.name, fingerprint)
        return fingerprint, unchanged, table_metadata(con, model.name)


def build_model_asset(model: SqlModel) -> dg.AssetsDefinition:
    deps = [dg.AssetKey(dep) for dep in model.model_deps] + [dg.AssetKey(["lake", t]) for t in model.lake_deps]

    @dg.asset(
        name=model.name,
        deps=deps,
        description=model.description or None,
        group_name="models",
        kinds={"duckdb", "sql"},
        tags={"layer": model.layer},
        code_version=hashlib.sha256(model.sql.encode()).hexdigest()[:12],
        pool=DUCKDB_POOL,
        metadata={"sql_file": str(model.path.relative_to(SQL_DIR.parent))},
        check_specs=check_specs(model.name),
    )
    def _model(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
        fingerprint, unchanged, metadata = refresh_model(model, warehouse)
        rows = metadata["dagster/row_count"]
        context.log.info(f"{rows:,} rows" + (" (inputs unchanged, table kept)" if unchanged else " (rebuilt)"))
        return dg.MaterializeResult(
            metadata={**metadata, "grpo/rebuilt": not unchanged},
            data_version=dg.DataVersion(fingerprint),
            check_results=evaluate_checks(model.name, warehouse),  # a kept table re-emits its stored results
        )

    return _model


model_assets = [build_model_asset(model) for model in MODELS.values()]


@dg.asset(
    deps=[dg.AssetKey(name) for name in MODELS],
    group_name="exports",
    kinds={"duckdb"},
    pool=DUCKDB_POOL,
)
def warehouse_duckdb(context: dg.AssetExecutionContext, warehouse: WarehouseConfig) -> dg.MaterializeResult:
    """The published warehouse.duckdb: every table, swapped in atomically for readers."""
    with open_build_db(warehouse.warehouse, read_only=True,
                       memory_limit=warehouse.duckdb_memory_limit) as con:
        state = dict(con.execute("select model, fingerprint from _model_state order by model").fetchall())
    fingerprint = hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]
    target = published_path(warehouse.warehouse)
    published = publish_if_changed(warehouse.warehouse, fingerprint)
    if published:
        context.log.info(f"published {target}")
    else:
        context.log.info("no table changed since the last publication; warehouse.duckdb kept")
    return dg.MaterializeResult(
        metadata={"path": dg.MetadataValue.path(str(target)), "tables": len(state), "grpo/published": published},
        data_version=dg.DataVersion(fingerprint),
    )
