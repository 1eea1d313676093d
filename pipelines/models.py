"""SQL models: one `select` per file under sql/, its table named after the file, its inputs read from the SQL itself."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import duckdb
import yaml

from pipelines.parameters import PARAMETERS
from pipelines.stats import sql_functions

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
# The macros every model may call, created on the connection with the parameters, beside the Python functions of
# sql_functions (the interval statistics).
FUNCTIONS_SQL = (SQL_DIR / "functions.sql").read_text()
LAKE_SCHEMA = "lake"
_LEADING_COMMENT = re.compile(r"\A\s*((?:--[^\n]*\n\s*)+)")
_PARAMETER_READ = re.compile(r"getvariable\('(\w+)'\)")
# Each folder of models declares them in a dbt-style schema.yml beside the SQL: their columns, their data tests,
# and, for an incremental model, the key its rows are refreshed by (`materialized: incremental`,
# `incremental_strategy: delete+insert`, `unique_key: run_id`): each row belongs to one run and is computed from that
# run's rows of the tables it reads (and from tables without a run_id, read whole), so after a change to some runs
# only their rows are deleted and computed again (run_model_rows; defs/models/assets.py decides which).
SCHEMA_FILE = "schema.yml"
INCREMENTAL_KEYS = ("run_id",)
# An incremental model may also declare `batch_rows: N`: rebuilt whole, its table is computed a batch of keys at a time,
# each batch about N rows of the tables it reads that have its key (run_model_in_batches). For a model whose group-bys
# over every trajectory spill to disk at the memory limit, where a batch's fit in memory.
COLUMN_TESTS = ("unique", "not_null")
COMBINATION_TEST = "dbt_utils.unique_combination_of_columns"
# PyYAML's safe loader in C (libyaml) where it was built with it: a tenth of the pure-Python one's time on the
# schema.yml files, which every process loading the code location reads.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ModelError(Exception):
    """A model that cannot be loaded or run; the message names its file."""


@dataclass(frozen=True)
class ModelColumn:
    """A column as the model's schema.yml declares it."""

    name: str
    data_type: str
    description: str
    tests: tuple[str, ...] = ()  # "unique", "not_null"


@dataclass(frozen=True)
class SqlModel:
    name: str
    layer: str  # the folder under sql/: "staging" or "marts"
    path: Path
    sql: str
    description: str  # the file's header comment
    model_deps: tuple[str, ...]  # other models it reads
    lake_deps: tuple[str, ...]  # lake views it reads (lake.<table>)
    incremental_key: str | None = None  # schema.yml's unique_key of an incremental model
    batch_rows: int | None = None  # schema.yml's batch_rows of an incremental model: see run_model_in_batches
    columns: tuple[ModelColumn, ...] = ()  # schema.yml's columns, in the table's order
    unique_combinations: tuple[tuple[str, ...], ...] = ()  # schema.yml's unique_combination_of_columns tests
    # schema.yml's meta.dagster.columns_from: the tables ("lake.runs", "epoch_copies") whose columns of the same name
    # it passes through unchanged, for the catalog's column lineage
    columns_from: tuple[str, ...] = ()
    parameters: tuple[str, ...] = ()  # the parameters its SQL reads (getvariable), and those the macros read
    # the Python functions of sql_functions its SQL calls, and those the macros call: registered on its connection
    python_functions: tuple[str, ...] = ()

    def code_version(self, code: str) -> str:
        """Its code version: its SQL, the macros, and code, the code version of what runs it (code_versions)."""
        return digest(code, self.sql, FUNCTIONS_SQL)

    def fingerprint(self, params: dict, upstream: list[str], code: str) -> str:
        """What its table is made from: its code version, the parameters it reads, its inputs' fingerprints."""
        read = {name: params.get(name) for name in self.parameters}
        return digest(self.code_version(code), read, sorted(upstream))


def digest(*parts) -> str:
    """A short digest of JSON-able parts (dict keys sorted), for the fingerprints that decide what is rebuilt."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True, default=str).encode()).hexdigest()[:16]


def parameters_read(sql: str, where: str, declared: Collection[str] = PARAMETERS) -> set[str]:
    """The names the SQL reads with getvariable('<name>'), from DuckDB's tokens (comments and strings are not calls).
    Raises ModelError, naming where, for a name that is not a declared parameter (DuckDB would read NULL) or a
    getvariable of anything but a name in quotes."""
    tokens = _tokens(sql)
    names = set()
    for index, (text, kind) in enumerate(tokens):
        if kind != duckdb.token_type.identifier or text.lower() != "getvariable":
            continue
        call = tokens[index + 1 : index + 4]
        if [text for text, _ in call[::2]] != ["(", ")"] or call[1][1] != duckdb.token_type.string_const:
            raise ModelError(
                f"{where}: getvariable takes a parameter's name in quotes, such as getvariable('ci_level')"
            )
        names.add(call[1][0][1:-1].replace("''", "'"))
    if unknown := sorted(names - set(declared)):
        raise ModelError(
            f"{where}: reads getvariable('{unknown[0]}'), which is not a parameter (pipelines/parameters.py declares "
            f"them: {', '.join(declared)})"
        )
    return names


def _tokens(sql: str) -> list[tuple[str, duckdb.token_type]]:
    """The SQL's tokens as DuckDB reads them: (text, kind)."""
    # DuckDB's token positions are of the UTF-8 bytes
    text = sql.encode()
    starts = [*duckdb.tokenize(sql), (len(text), None)]
    return [(text[start:end].decode().strip(), kind) for (start, kind), (end, _) in pairwise(starts)]


def header_comment(sql: str) -> str:
    match = _LEADING_COMMENT.match(sql)
    if not match:
        return ""
    lines = [line.strip().removeprefix("--").strip() for line in match.group(1).splitlines()]
    text = " ".join(line for line in lines if line).strip()
    # The header is the asset's description in the UI: name a parameter, not the SQL that reads it.
    return _PARAMETER_READ.sub(r"`\1`", text)


def referenced_tables(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> set[tuple[str, str]]:
    """(schema, table) of every table the query reads, from DuckDB's own parse tree; CTE names excluded.

    con: an in-memory connection to parse with (one is made when not given: tens of milliseconds each)."""
    return sql_reads(sql, con)[0]


def sql_reads(sql: str, con: duckdb.DuckDBPyConnection | None = None) -> tuple[set[tuple[str, str]], set[str]]:
    """What the query reads, from DuckDB's own parse tree: (schema, table) of every table (CTE names excluded), and
    the name of every function it calls.

    con: an in-memory connection to parse with (one is made when not given: tens of milliseconds each)."""
    with nullcontext(con) if con is not None else duckdb.connect() as con:
        tree = json.loads(con.execute("select json_serialize_sql(?)", [sql]).fetchone()[0])
    if tree.get("error"):
        raise ValueError(tree.get("error_message", "cannot parse"))
    tables: set[tuple[str, str]] = set()
    ctes: set[str] = set()
    functions: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and node.get("table_name"):
                tables.add((node.get("schema_name") or "", node["table_name"]))
            if node.get("class") == "FUNCTION" and node.get("function_name"):
                functions.add(node["function_name"])
            cte_map = node.get("cte_map")
            if isinstance(cte_map, dict):
                ctes.update(entry.get("key", "") for entry in cte_map.get("map", []))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(tree)
    return {(schema, table) for schema, table in tables if schema or table not in ctes}, functions


def load_models(
    sql_dir: Path = SQL_DIR, lake_tables: frozenset[str] = frozenset(), declared: Collection[str] = PARAMETERS
) -> dict[str, SqlModel]:
    """Every model under sql_dir, keyed by name, in an order where each model follows what it reads; a model
    reading a parameter not among the declared ones is refused (ModelError)."""
    paths = sorted(Path(sql_dir).glob("*/*.sql"))
    names = {p.stem for p in paths}
    duplicates = sorted(n for n in names if sum(p.stem == n for p in paths) > 1)
    if duplicates:
        raise ModelError(f"two model files define the same table: {', '.join(duplicates)}")
    declarations = _declarations({p.parent for p in paths}, names)
    read_by_macros = parameters_read(FUNCTIONS_SQL, str(SQL_DIR / "functions.sql"), declared)
    called_by_macros = {text for text, _ in _tokens(FUNCTIONS_SQL)} & set(sql_functions.FUNCTIONS)
    models: dict[str, SqlModel] = {}
    sources = {path: path.read_text() for path in paths}
    parsed = {}
    with duckdb.connect() as parser:
        for path, sql in sources.items():
            try:
                parsed[path] = sql_reads(sql, parser)
            except ValueError as exc:
                raise ModelError(f"{path}: the SQL does not parse: {exc}") from None
    for path, (tables, called) in parsed.items():
        sql = sources[path]
        model_deps, lake_deps = set(), set()
        for schema, table in tables:
            if schema == LAKE_SCHEMA and (not lake_tables or table in lake_tables):
                lake_deps.add(table)
            elif not schema and table in names and table != path.stem:
                model_deps.add(table)
            else:
                qualified = f"{schema}.{table}" if schema else table
                raise ModelError(
                    f"{path}: reads table `{qualified}`, which is neither a model in {sql_dir} "
                    f"nor a lake table ({', '.join(f'{LAKE_SCHEMA}.{t}' for t in sorted(lake_tables)) or 'lake.*'})"
                )
        models[path.stem] = SqlModel(
            path.stem,
            path.parent.name,
            path,
            sql,
            header_comment(sql),
            tuple(sorted(model_deps)),
            tuple(sorted(lake_deps)),
            **declarations.get(path.stem, {}),
            parameters=tuple(sorted(parameters_read(sql, str(path), declared) | read_by_macros)),
            python_functions=tuple(sorted(called & set(sql_functions.FUNCTIONS) | called_by_macros)),
        )
    return _in_dependency_order(models)


def _declarations(folders: set[Path], names: set[str]) -> dict[str, dict]:
    """SqlModel fields of each model declared in a schema.yml of the given folders, checked."""
    found: dict[str, dict] = {}
    for schema in sorted(folder / SCHEMA_FILE for folder in folders if (folder / SCHEMA_FILE).is_file()):
        try:
            entries = (yaml.load(schema.read_text(), Loader=_YAML_LOADER) or {}).get("models") or []
        except yaml.YAMLError as exc:
            raise ModelError(f"{schema}: not valid YAML: {exc}") from None
        for entry in entries:
            name = entry.get("name")
            if name not in names or name in found:
                raise ModelError(f"{schema}: model `{name}` has no SQL file beside it, or is declared twice")
            found[name] = _declaration(schema, entry)
    return found


def _declaration(schema: Path, entry: dict) -> dict:
    where = f"{schema}: model `{entry['name']}`"
    config = entry.get("config") or {}
    key = None
    if config.get("materialized") == "incremental":
        key = config.get("unique_key")
        if key not in INCREMENTAL_KEYS or config.get("incremental_strategy") != "delete+insert":
            raise ModelError(
                f"{where}: an incremental model is refreshed by `incremental_strategy: delete+insert` on "
                f"`unique_key: {' | '.join(INCREMENTAL_KEYS)}`, not {key!r}"
            )
    batch_rows = config.get("batch_rows")
    if batch_rows is not None and not (key and isinstance(batch_rows, int) and batch_rows > 0):
        raise ModelError(f"{where}: batch_rows is a positive number of rows, for an incremental model only")
    columns = []
    for column in entry.get("columns") or []:
        tests = tuple(column.get("data_tests") or ())
        if set(tests) - set(COLUMN_TESTS) or not column.get("description"):
            raise ModelError(
                f"{where}: column `{column.get('name')}` needs a description, and its data_tests "
                f"are among {', '.join(COLUMN_TESTS)}"
            )
        columns.append(ModelColumn(column["name"], str(column.get("data_type", "")), column["description"], tests))
    combinations = []
    for test in entry.get("data_tests") or []:
        if not (isinstance(test, dict) and set(test) == {COMBINATION_TEST}):
            raise ModelError(f"{where}: a model's data_tests are {COMBINATION_TEST} only, not {test!r}")
        combinations.append(tuple(test[COMBINATION_TEST]["combination_of_columns"]))
    columns_from = tuple(((entry.get("meta") or {}).get("dagster") or {}).get("columns_from") or ())
    return {
        "incremental_key": key,
        "batch_rows": batch_rows,
        "columns": tuple(columns),
        "unique_combinations": tuple(combinations),
        "columns_from": columns_from,
    }


def _in_dependency_order(models: dict[str, SqlModel]) -> dict[str, SqlModel]:
    ordered: dict[str, SqlModel] = {}
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise ModelError(f"{models[name].path}: models read each other in a cycle through `{name}`")
        visiting.add(name)
        for dep in models[name].model_deps:
            visit(dep)
        visiting.discard(name)
        ordered[name] = models[name]

    for name in sorted(models):
        visit(name)
    return ordered


def set_parameters(
    con: duckdb.DuckDBPyConnection, params: dict, python_functions: Collection[str] = tuple(sql_functions.FUNCTIONS)
) -> None:
    """Makes the metric parameters visible to the SQL as `getvariable('name')`, and its macros and the given Python
    functions (default all) callable."""
    for name, value in params.items():
        con.execute(f"set variable {name} = ?", [value])
    con.execute(FUNCTIONS_SQL)
    if python_functions:
        sql_functions.register_functions(con, python_functions)


def run_model(con: duckdb.DuckDBPyConnection, model: SqlModel) -> int:
    """Creates or replaces the model's table; returns its row count."""
    try:
        con.execute(f"create or replace table {model.name} as\n{model.sql}")
    except duckdb.Error as exc:
        raise ModelError(f"{model.path}: {exc}") from None
    return con.execute(f"select count(*) from {model.name}").fetchone()[0]


def columns(con: duckdb.DuckDBPyConnection, relation: str) -> list[tuple[str, str]]:
    """The (name, type) of each column of a table or query."""
    return [(name, kind) for name, kind, *_ in con.execute(f"describe {relation}").fetchall()]


def model_query(model: SqlModel) -> str:
    """The model's SQL as a query that a `where` on its columns can follow."""
    return f"select * from (\n{model.sql.rstrip().rstrip(';')}\n)"


def run_model_rows(con: duckdb.DuckDBPyConnection, model: SqlModel, keys: list[str]) -> bool:
    """Computes again the rows of the given values of the model's incremental key, in place of the table's; False,
    with the table untouched, when the model's columns now differ from the table's (a new extra key, say): the
    table must then be rebuilt whole.

    The keys are a literal list, so that DuckDB pushes the filter down to the scans of the lake and of the tables
    the model reads. Rows computed again are appended: a table's row order is only that of its `order by` when it
    was rebuilt whole.
    """
    select = model_query(model)
    try:
        if columns(con, f"{select}") != columns(con, model.name):
            return False
        if not keys:
            return True
        chosen = keys_filter(model.incremental_key, keys)
        # The models it reads that have its key, seen by its SQL as their rows of the chosen keys alone: the filter on
        # the query's result is not pushed through a materialized or recursive CTE (epoch_metrics has both).
        with rows_of_keys(con, keyed_tables(con, model), chosen):
            with transaction(con):
                con.execute(f"delete from {model.name} where {chosen}")
                con.execute(f"insert into {model.name} {select} where {chosen}")
    except duckdb.Error as exc:
        raise ModelError(f"{model.path}: {exc}") from None
    return True


def key_batches(con: duckdb.DuckDBPyConnection, model: SqlModel, keys: list[str]) -> list[list[str]]:
    """The keys, and any other key of the tables the model reads, in batches of about the model's batch_rows rows of
    those tables that have its key (its costly group-bys scale with them), in key order; one batch when the model
    declares no batch_rows or those tables hold fewer rows in all."""
    keyed = keyed_tables(con, model) if model.batch_rows else []
    if not keyed:
        return [sorted(keys)]
    key = sql_identifier(model.incremental_key)
    counts = " union all ".join(
        f"select {key}, count(*) as n from {sql_identifier(table)} group by 1" for table in keyed
    )
    rows = dict(con.execute(f"select {key}, sum(n) from ({counts}) group by 1").fetchall())
    if sum(rows.values()) <= model.batch_rows:  # the rows without a key included
        return [sorted(keys)]
    rows.pop(None, None)
    batches: list[list[str]] = [[]]
    filled = 0
    for value in sorted(set(keys) | set(rows)):
        if batches[-1] and filled + rows.get(value, 0) > model.batch_rows:
            batches.append([])
            filled = 0
        batches[-1].append(value)
        filled += rows.get(value, 0)
    return batches


def keyed_tables(con: duckdb.DuckDBPyConnection, model: SqlModel) -> list[str]:
    """The models the model reads that have its incremental key."""
    return [dep for dep in model.model_deps if model.incremental_key in dict(columns(con, dep))]


def run_model_in_batches(con: duckdb.DuckDBPyConnection, model: SqlModel, batches: list[list[str]]) -> int:
    """Creates or replaces an incremental model's table from its rows computed one batch of keys after another (each
    batch as run_model_rows computes changed keys), then its rows without a key; returns its row count.
    A batch's group-bys fit in the memory limit where those of the whole table spill to disk. In one transaction: a
    failure leaves the table as it was."""
    if len(batches) <= 1:
        return run_model(con, model)
    select = model_query(model)
    key = model.incremental_key
    keyed = keyed_tables(con, model)
    try:
        with transaction(con):
            con.execute(f"create or replace table {model.name} as {select} limit 0")
            for chosen in [keys_filter(key, batch) for batch in batches] + [f"{sql_identifier(key)} is null"]:
                with rows_of_keys(con, keyed, chosen):
                    con.execute(f"insert into {model.name} {select} where {chosen}")
    except duckdb.Error as exc:
        raise ModelError(f"{model.path}: {exc}") from None
    return con.execute(f"select count(*) from {model.name}").fetchone()[0]


def keys_filter(key: str, values: list[str]) -> str:
    """A SQL condition holding for the rows whose key is one of the values, as a literal list: DuckDB pushes it down
    to the scans."""
    return f"{sql_identifier(key)} in ({', '.join(sql_string(value) for value in values)})"


@contextmanager
def rows_of_keys(con: duckdb.DuckDBPyConnection, tables: list[str], chosen: str) -> Iterator[None]:
    """The tables seen by the queries run meanwhile as their rows of the chosen keys alone (keys_filter): temporary
    views of the same names, which DuckDB resolves before the tables."""
    catalog = con.execute("select current_database()").fetchone()[0]
    shadowed = []
    try:
        for table in tables:
            con.execute(
                f"create or replace temp view {sql_identifier(table)} as "
                f"select * from {sql_identifier(catalog)}.main.{sql_identifier(table)} where {chosen}"
            )
            shadowed.append(table)
        yield
    finally:
        for table in shadowed:
            con.execute(f"drop view if exists temp.main.{sql_identifier(table)}")


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The writes made meanwhile committed together, in one flush of the write-ahead log, or rolled back on an error."""
    con.execute("begin transaction")
    try:
        yield
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("commit")


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_identifier(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def columns_digest(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """A digest of a table's column names and types."""
    return digest(*columns(con, table))


def key_digests(con: duckdb.DuckDBPyConnection, relation: str, key: str) -> tuple[dict[str, str], str]:
    """A digest of the rows of each value of key in a table or table function, and one of its rows without a key."""
    found = con.execute(
        f"select {key}::varchar, md5(string_agg(row_text, chr(10) order by row_text))"
        f" from (select {key}, t::varchar as row_text from {relation} as t) group by 1"
    ).fetchall()
    return {value: digest for value, digest in found if value is not None}, next(
        (digest for value, digest in found if value is None), ""
    )
