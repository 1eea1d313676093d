"""The DuckDB side: a private build database that models write to, published to readers by an atomic rename."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl
from filelock import FileLock, Timeout

from pipelines.code_versions import code_version
from pipelines.lake.case_keys import by_position, case_notes_select, record_case_notes, split_by_case
from pipelines.lake.inventory import ERROR_COLUMNS, FILE_COLUMNS
from pipelines.lake.paths import RUN_TABLES, lake_files, lake_runs, table_stamps
from pipelines.lake.transcripts import TRANSCRIPT_COLUMNS
from pipelines.lake.wide import view_columns
from pipelines.lake_store import LakePath, file_stamp, in_bucket, lake_root, real_location
from pipelines.models import sql_identifier, sql_string
from pipelines.parameters import DECLARED
from pipelines.release.flatten import EPOCH_COLUMNS, TRAJECTORY_COLUMNS
from pipelines.release.registry import RUN_COLUMNS
from pipelines.settings import published_path

# DuckDB's own default is 80% of RAM: at 100x the models took 4.5 GiB. Past the limit it spills to .build/tmp.
DEFAULT_MEMORY_LIMIT = DECLARED["duckdb_memory_limit"].default
# The DuckDB storage format of the build database, and so of warehouse.duckdb: a DuckDB reads its own version's
# format and older ones, never newer, so "v1.0.0" opens in DuckDB 1.0 and every later version. A model whose table
# the format cannot hold fails with DuckDB's message naming the version it needs (a VARIANT column: v1.5.0).
DEFAULT_STORAGE_VERSION = DECLARED["duckdb_storage_version"].default
# The build database's record of its own work (model and check fingerprints, the lake views' files), in a schema of
# its own: warehouse.duckdb is published without it.
BOOKKEEPING = "bookkeeping"
# Each lake view: the columns it has when there is no file yet. A per-run table (RUN_TABLES) reads one file per run
# (lake.lake_files); any other, the one file lake/<view>.parquet.
LAKE_VIEWS = {
    "epochs": EPOCH_COLUMNS,
    "trajectories": TRAJECTORY_COLUMNS,
    "errors": ERROR_COLUMNS,
    "files": FILE_COLUMNS,
    "transcripts": TRANSCRIPT_COLUMNS,
    "runs": RUN_COLUMNS,
    "release_errors": ERROR_COLUMNS,
    "release_files": FILE_COLUMNS,
}


# How create_lake_views writes a view's SQL: a view kept by a build of other code is made again.
VIEWS_VERSION = code_version(__name__)
_GLOB_CHARACTERS = frozenset("*?[")


class WarehouseBusy(Exception):
    """Another process holds the build database for longer than we were willing to wait."""


def lake_dir(warehouse: Path) -> Path:
    """The lake's default place, inside the warehouse folder (WarehouseConfig.lake is where it is)."""
    return Path(warehouse) / "lake"


def build_dir(warehouse: Path) -> Path:
    return Path(warehouse) / ".build"


def _empty_select(schema: dict) -> str:
    con = duckdb.connect()
    relation = con.from_arrow(pl.DataFrame(schema=schema).to_arrow())
    types = dict(zip(relation.columns, relation.types, strict=True))
    con.close()
    return "select " + ", ".join(f"cast(null as {t}) as {name}" for name, t in types.items()) + " limit 0"


def view_files(lake: LakePath, view: str) -> list[LakePath]:
    """The Parquet files a lake view reads, by their exact paths."""
    if view in RUN_TABLES:
        return lake_files(lake, view)
    path = lake_root(lake) / f"{view}.parquet"
    return [path] if path.is_file() else []


def duckdb_path(path: Path) -> str:
    """A path as DuckDB reads it literally: DuckDB expands `*`, `?` and `[` in any path it is given, so each is
    written as a one-character class (`[*]`). A warehouse path DuckDB cannot use at all is refused when the
    warehouse is configured (duckdb_path_problem)."""
    text = str(path)
    return "".join(f"[{c}]" if c in _GLOB_CHARACTERS else c for c in text)


def duckdb_path_problem(path: Path) -> str | None:
    """Why DuckDB cannot keep a database under this folder, or None: it takes what follows a `?` in a database's
    path for options (its write-ahead log goes to `a.wal?b/...`), and a backslash for a folder separator."""
    text = str(path)
    if "?" in text:
        return "holds a `?`, after which DuckDB reads a database path as options"
    if "\\" in text:
        return "holds a backslash, which DuckDB reads as a folder separator"
    return None


def parquet_source(files: list[Path], by_name: bool = True) -> str:
    """read_parquet over exactly these files: no pattern, and no column taken from a `key=value` folder above them.
    by_name: the files' columns united by name (a file may lack some); False only for files of one schema
    (schema_groups), whose columns DuckDB then takes from the first file alone instead of reading every file's."""
    listing = ", ".join(sql_string(duckdb_path(f)) for f in files)
    return f"read_parquet([{listing}], hive_partitioning = false, union_by_name = {str(by_name).lower()})"


def _nested(column_type: str) -> bool:
    return "STRUCT" in column_type or column_type.endswith("]") or column_type.startswith("MAP")


def _columns(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, str]:
    return dict(con.execute(f"select column_name, column_type from (describe select * from {source})").fetchall())


def lake_source(con: duckdb.DuckDBPyConnection, files: list[Path], view: str) -> tuple[str, list[str], dict[str, str]]:
    """The files read as one table, its column names, and the extra keys renamed for their case (lake.case_keys):
    each group of files of one schema read as one, the groups united by name (schema_groups; in a bucket, or when a
    file's schema cannot be read, every file's columns united by name in one read_parquet). A column that is a STRUCT
    or LIST in one file and of another type in another (a per-trajectory extra typed in one run, kept as JSON text in
    the next) is read as JSON text from every file: DuckDB's union would cast the text to the STRUCT, or fail to."""
    # Not in a bucket: DuckDB's parquet_schema would look for its own S3 extension there, not the lake's filesystem.
    local = len(files) > 1 and not in_bucket(files[0])
    groups = schema_groups(con, view, files) if local else None
    plain, renamed, keys = split_by_case(
        con, f"{BOOKKEEPING}.lake_file_columns", view, LAKE_VIEWS[view], groups or [[file] for file in files]
    )
    if groups is None and not renamed:
        return *_united_by_name(con, files), keys
    if groups is None:
        sources = [_united_by_name(con, [file for group in plain for file in group])[0]] if plain else []
    else:
        sources = [parquet_source(group, by_name=False) for group in plain]
    sources += [by_position(parquet_source(group, by_name=False), columns) for group, columns in renamed]
    if len(sources) == 1:
        return sources[0], list(_columns(con, sources[0])), keys
    return *_united(con, sources, [_columns(con, source) for source in sources]), keys


def _united(con: duckdb.DuckDBPyConnection, sources: list[str], types: list[dict[str, str]]) -> tuple[str, list[str]]:
    """The sources (of the given columns and types each) united by name, a column nested in one and of another type
    in another read as JSON text from each (lake_source)."""
    names = {name for columns in types for name in columns}
    differing = {
        name
        for name in names
        if len(kinds := {columns[name] for columns in types if name in columns}) > 1 and any(map(_nested, kinds))
    }
    parts = []
    for source, columns in zip(sources, types, strict=True):
        as_json = [
            f"to_json({sql_identifier(name)})::varchar as {sql_identifier(name)}"
            for name in sorted(differing)
            if columns.get(name) not in (None, "VARCHAR")
        ]
        replace = f" replace ({', '.join(as_json)})" if as_json else ""
        parts.append(f"select *{replace} from {source}")
    union = "(" + " union all by name ".join(parts) + ")"
    return union, list(_columns(con, union))


def _united_by_name(con: duckdb.DuckDBPyConnection, files: list[Path]) -> tuple[str, list[str]]:
    """lake_source from one read_parquet of every file united by name, each file's schema read by DuckDB."""
    source = parquet_source(files)
    columns = _columns(con, source)
    nested = [name for name, column_type in columns.items() if _nested(column_type)]
    if not nested:
        return source, list(columns)
    groups: dict[tuple, list[Path]] = {}
    for file in files:
        types = _columns(con, parquet_source([file]))
        groups.setdefault(tuple(types.get(name) for name in nested), []).append(file)
    if len(groups) == 1:
        return source, list(columns)
    sources = [parquet_source(group) for group in groups.values()]
    return _united(con, sources, [_columns(con, source) for source in sources])


# What parquet_schema says of each column of a file, in the file's order: equal for two files of one schema.
_SCHEMA_FIELDS = (
    "column_id, name, type, type_length, repetition_type, num_children, converted_type, scale, precision, field_id,"
    " logical_type, duckdb_type"
)


def schema_groups(con: duckdb.DuckDBPyConnection, view: str, files: list[LakePath]) -> list[list[LakePath]] | None:
    """The files in groups of one Parquet schema each (the same columns of the same types in the same order), in the
    order of their first files; None when a file's schema could not be read.

    A group is read without DuckDB's union by name, which reads every file's schema each time a query names the view
    (at 100x, 500 files for each model reading the lake): DuckDB then reads its first file's. Each file's schema is
    kept in the bookkeeping by its stamp (lake_store.file_stamp), so that only the files new or rewritten since the
    view was last made are read, in one parquet_schema call: a new epoch file rewrites one run's partition of 500."""
    con.execute(
        f"create table if not exists {BOOKKEEPING}.lake_file_schemas"
        " (view varchar, file varchar, stamp varchar, schema varchar)"
    )
    stamps = {str(file): file_stamp(file) for file in files}
    kept = {
        (file, stamp): schema
        for file, stamp, schema in con.execute(
            f"select file, stamp, schema from {BOOKKEEPING}.lake_file_schemas where view = ?", [view]
        ).fetchall()
    }
    schemas = {file: kept.get((file, stamp)) for file, stamp in stamps.items()}
    if missing := [file for file, schema in schemas.items() if schema is None]:
        schemas.update(_read_schemas(con, missing))
    known = {file: schema for file, schema in schemas.items() if schema is not None and stamps[file] is not None}
    con.execute(f"delete from {BOOKKEEPING}.lake_file_schemas where view = ?", [view])
    con.execute(
        f"insert into {BOOKKEEPING}.lake_file_schemas select ?, unnest(?), unnest(?), unnest(?)",
        [view, list(known), [stamps[file] for file in known], list(known.values())],
    )
    if len(known) < len(files):
        return None
    groups: dict[str, list[LakePath]] = {}
    for file in files:
        groups.setdefault(known[str(file)], []).append(file)
    return list(groups.values())


def _read_schemas(con: duckdb.DuckDBPyConnection, files: list[str]) -> dict[str, str]:
    """A digest of each file's Parquet schema (_SCHEMA_FIELDS), by path; a file whose schema could not be read is
    left out."""
    paths = {duckdb_path(file): file for file in files}  # each path as DuckDB reads it literally
    try:
        rows = con.execute(
            f"select file_name, list(({_SCHEMA_FIELDS})::varchar order by column_id, name)::varchar"
            " from parquet_schema(?) group by file_name",
            [list(paths)],
        ).fetchall()
    except duckdb.Error:
        return {}  # a file gone or unreadable since it was listed: the view is made by name, which says which
    found = {}
    for file_name, schema in rows:
        file = file_name if file_name in paths.values() else paths.get(file_name)
        if file is not None:
            found[file] = hashlib.sha256(schema.encode()).hexdigest()
    return found


def create_lake_views(con: duckdb.DuckDBPyConnection, lake: LakePath) -> None:
    """(Re)defines the lake.* views over the Parquet lake; a table with no file yet is an empty view.

    A view is kept when its files are those it was made over (paths, sizes and mtimes): each model that reads the
    lake asks for the views, and making them reads every file's schema (in a bucket, a few requests a file).
    """
    con.execute("create schema if not exists lake")
    con.execute(f"create schema if not exists {BOOKKEEPING}")
    con.execute(f"create table if not exists {BOOKKEEPING}.lake_views (view varchar primary key, fingerprint varchar)")
    made = dict(con.execute(f"select view, fingerprint from {BOOKKEEPING}.lake_views").fetchall())
    notes = f"{BOOKKEEPING}.lake_case_notes"
    present = {
        name
        for (name,) in con.execute(
            "select view_name from duckdb_views() where schema_name = 'lake' and database_name = current_database()"
        ).fetchall()
    }
    for view, schema in LAKE_VIEWS.items():
        fingerprint = f"{VIEWS_VERSION}:{real_location(lake_root(lake))}:{lake_fingerprint(lake, [view])}"
        if made.get(view) == fingerprint and view in present:
            continue
        files, renamed = view_files(lake, view), {}
        if files:
            source, names, renamed = lake_source(con, files, view)
            # In the lake's column order: a union's follows its files, which would make a table's columns depend on
            # which runs the lake holds. At most MAX_EXTRA_COLUMNS extra keys (lake.wide).
            body = f"select {', '.join(sql_identifier(name) for name in view_columns(names, schema))} from {source}"
        else:
            body = _empty_select(schema)
        # The errors view reads the notes of keys renamed for their case when it is queried, whichever view is new.
        if view == "errors":
            body = f"select * from ({body}) union all by name {case_notes_select(notes)}"
        record_case_notes(con, notes, view, renamed)
        con.execute(f"create or replace view lake.{view} as {body}")
        con.execute(f"insert or replace into {BOOKKEEPING}.lake_views values (?, ?)", [view, fingerprint])


def lake_fingerprint(lake: LakePath, tables: Iterable[str] | None = None) -> str:
    """Changes whenever a lake file of the given tables (default: all) is rewritten; cheap, from file metadata only
    (lake_store.file_stamp)."""
    lake = lake_root(lake)
    runs = lake_runs(lake)
    digest = hashlib.sha256()
    for view in sorted(LAKE_VIEWS):
        if tables is not None and view not in tables:
            continue
        if view in RUN_TABLES:
            found = table_stamps(lake, view, runs)
            stamps = {f"{view}/{runs[run]}/data.parquet": stamp for run, stamp in found.items()}
        else:
            stamps = {f"{view}.parquet": file_stamp(lake / f"{view}.parquet")}
        digest.update("".join(f"{name}:{stamp};" for name, stamp in stamps.items() if stamp is not None).encode())
    return digest.hexdigest()[:16]


@dataclass
class _Hold:
    """A build database held by this process (hold_build_db): its connection once opened, closed with the hold."""

    stack: ExitStack
    con: duckdb.DuckDBPyConnection | None = None


# The build databases this process holds (hold_build_db), by file.
_HELD: dict[Path, _Hold] = {}
# What a held database keeps in memory between two uses: its cache of table blocks is let go after each, as closing
# it would, so that the processes a step starts (the figures' pool) do not run beside a full cache.
_IDLE_MEMORY_LIMIT = "16MB"


def _database_file(warehouse: Path) -> Path:
    """The build database's file, links resolved: a publication finds the hold whatever the warehouse's folder is
    called, instead of waiting for the lock the hold has."""
    return build_dir(warehouse).resolve() / "build.duckdb"


@contextmanager
def hold_build_db(warehouse: Path) -> Iterator[None]:
    """Keeps the build database open, and its lock held, from the first open_build_db of it in this process until the
    block ends: each open_build_db meanwhile gets a cursor on the one connection. Opening the file reads its catalog
    and closing it checkpoints, tens of milliseconds each, twice for every step of a build otherwise; another process
    waits for the whole block instead of for one step."""
    path = _database_file(warehouse)
    if path in _HELD:
        yield
        return
    with ExitStack() as stack:
        _HELD[path] = _Hold(stack)
        try:
            yield
        finally:
            del _HELD[path]


@contextmanager
def open_build_db(
    warehouse: Path,
    read_only: bool = False,
    timeout: float = 600,
    memory_limit: str | None = None,
    storage_version: str = DEFAULT_STORAGE_VERSION,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """The build database, held under a cross-process lock so that one writer at a time touches it.

    DuckDB gets memory_limit (a DuckDB size such as "2GB"; default DEFAULT_MEMORY_LIMIT)
    and spills what does not fit to <warehouse>/.build/tmp. Opened for writing, a database written in another storage
    version than storage_version is made anew (see _connect_for_writing). While this process holds the database
    (hold_build_db): a cursor on the held connection, read_only or not.
    """
    hold = _HELD.get(_database_file(warehouse))
    if hold is None:
        with _locked_build_db(warehouse, read_only, timeout, memory_limit, storage_version) as con:
            yield con
        return
    if hold.con is None:
        hold.con = hold.stack.enter_context(_locked_build_db(warehouse, False, timeout, memory_limit, storage_version))
    cursor = hold.con.cursor()
    try:
        yield cursor
    finally:
        cursor.close()
        try:
            hold.con.execute(f"set memory_limit = {sql_string(_IDLE_MEMORY_LIMIT)}")
        except duckdb.Error:
            pass  # blocks still in use: let go after a later use, or with the hold
        hold.con.execute(f"set memory_limit = {sql_string(memory_limit or DEFAULT_MEMORY_LIMIT)}")


@contextmanager
def _locked_build_db(
    warehouse: Path, read_only: bool, timeout: float, memory_limit: str | None, storage_version: str
) -> Iterator[duckdb.DuckDBPyConnection]:
    folder = build_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / "db.lock")
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise WarehouseBusy(
            f"the build database in {folder} stayed locked by another build for {timeout:.0f} s"
        ) from None
    try:
        path = folder / "build.duckdb"
        config = {
            "memory_limit": memory_limit or DEFAULT_MEMORY_LIMIT,
            "temp_directory": str(folder / "tmp"),
            "storage_compatibility_version": storage_version,
        }
        if read_only and path.exists():
            con = duckdb.connect(str(path), read_only=True, config=config)
        else:
            con = _connect_for_writing(path, config)
        try:
            yield con
        finally:
            con.close()
    finally:
        lock.release()


def _connect_for_writing(path: Path, config: dict) -> duckdb.DuckDBPyConnection:
    """The build database with its bookkeeping tables, made anew when it was written in another storage version than
    the configured one: a file's storage version is set when it is created, and every table in it is computed again
    from the lake by the next build."""
    storage_version = config["storage_compatibility_version"]
    existed = path.exists()
    con = duckdb.connect(str(path), config=config)
    if existed and _recorded_storage_version(con) != storage_version:
        con.close()
        for stale in (path, path.with_name(path.name + ".wal")):
            stale.unlink(missing_ok=True)
        con = duckdb.connect(str(path), config=config)
    con.execute(f"create schema if not exists {BOOKKEEPING}")
    con.execute(f"create table if not exists {BOOKKEEPING}.storage_version (version varchar)")
    con.execute(
        f"insert into {BOOKKEEPING}.storage_version select ?"
        f" where not exists (select * from {BOOKKEEPING}.storage_version)",
        [storage_version],
    )
    con.execute(
        f"create table if not exists {BOOKKEEPING}.model_state"
        " (model varchar primary key, fingerprint varchar, built_at timestamptz)"
    )
    # An incremental model's inputs when it was last computed: the fingerprint of what holds every run (its SQL,
    # the parameters, the tables it reads whole) and a stamp per value of its key.
    con.execute(
        f"create table if not exists {BOOKKEEPING}.model_inputs (model varchar primary key, fingerprint varchar)"
    )
    con.execute(f"create table if not exists {BOOKKEEPING}.model_keys (model varchar, key varchar, stamp varchar)")
    return con


def _recorded_storage_version(con: duckdb.DuckDBPyConnection) -> str | None:
    try:
        row = con.execute(f"select version from {BOOKKEEPING}.storage_version").fetchone()
    except duckdb.CatalogException:
        return None  # a database without the record: made by another program, or before it was kept
    return row[0] if row else None


def model_fingerprint(con: duckdb.DuckDBPyConnection, model: str) -> str | None:
    row = con.execute(f"select fingerprint from {BOOKKEEPING}.model_state where model = ?", [model]).fetchone()
    return row[0] if row else None


def model_fingerprints(con: duckdb.DuckDBPyConnection, tables) -> dict[str, str | None]:
    """The recorded fingerprint of each model table (None if it has none, e.g. a database not built by the models)."""
    try:
        known = dict(con.execute(f"select model, fingerprint from {BOOKKEEPING}.model_state").fetchall())
    except duckdb.Error:
        known = {}
    return {table: known.get(table) for table in sorted(tables)}


def record_model(con: duckdb.DuckDBPyConnection, model: str, fingerprint: str) -> None:
    con.execute(f"insert or replace into {BOOKKEEPING}.model_state values (?, ?, now())", [model, fingerprint])


def lake_run_stamps(lake: LakePath, tables: Iterable[str]) -> dict[str, str]:
    """A stamp per run of the given per-run lake tables (of RUN_TABLES), from their partitions' stamps (size and
    mtime, or ETag): it changes whenever a partition of the run is rewritten. Runs with no partition in any of the
    tables are absent."""
    stamps: dict[str, list[str]] = {}
    for table in sorted(tables):
        for run_id, stamp in table_stamps(lake, table).items():
            stamps.setdefault(run_id, []).append(f"{table}:{stamp}")
    return {run: ";".join(parts) for run, parts in stamps.items()}


def recorded_inputs(con: duckdb.DuckDBPyConnection, model: str) -> tuple[str | None, dict[str, str]]:
    """An incremental model's recorded inputs (see record_inputs); (None, {}) when it has none."""
    row = con.execute(f"select fingerprint from {BOOKKEEPING}.model_inputs where model = ?", [model]).fetchone()
    keys = dict(con.execute(f"select key, stamp from {BOOKKEEPING}.model_keys where model = ?", [model]).fetchall())
    return (row[0] if row else None), keys


def record_inputs(con: duckdb.DuckDBPyConnection, model: str, fingerprint: str, stamps: dict[str, str]) -> None:
    keys = pl.DataFrame(  # noqa: F841 (read by name in the insert below, through DuckDB's replacement scan)
        {"model": [model] * len(stamps), "key": list(stamps), "stamp": list(stamps.values())},
        schema={"model": pl.String, "key": pl.String, "stamp": pl.String},
    )
    con.execute(f"delete from {BOOKKEEPING}.model_keys where model = ?", [model])
    con.execute(f"insert into {BOOKKEEPING}.model_keys select * from keys")
    con.execute(f"insert or replace into {BOOKKEEPING}.model_inputs values (?, ?)", [model, fingerprint])


def publish(
    warehouse: Path, tables: Iterable[str] | None = None, storage_version: str = DEFAULT_STORAGE_VERSION
) -> Path:
    """Copies the build database's tables (the given ones, default all) to warehouse.duckdb by atomic rename, so
    readers see either the old or the new one.

    Takes the build lock itself: call it outside open_build_db's block. Readers holding the old file open keep
    reading it (its inode lives until they close it); new connections see the new one.
    """
    folder = build_dir(warehouse)
    target = published_path(warehouse)
    hold = _HELD.get(_database_file(warehouse))
    held = hold.con if hold is not None else None
    with nullcontext() if held is not None else FileLock(folder / "db.lock"):
        # Every publisher holds the lock from copy to rename, so a temporary file found now was left by a
        # publish that was killed: it is garbage.
        for stale in target.parent.glob(f".{target.name}.*.tmp"):
            stale.unlink(missing_ok=True)
        # Opening replays a WAL that a killed build may have left; the checkpoint folds it into the file we copy (a
        # held database stays open, idle, while it is copied).
        with nullcontext(held) if held is not None else duckdb.connect(str(folder / "build.duckdb")) as con:
            con.execute("checkpoint")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        _copy_file(folder / "build.duckdb", tmp)
        _keep_only_tables(tmp, tables, storage_version)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    return target


# Linux's ioctl that makes a file share another's blocks, copied on write (Btrfs, XFS, bcachefs; not ext4).
_FICLONE = 0x40049409


def _copy_file(source: Path, target: Path) -> None:
    """Copies source to target: as a clone sharing its blocks where the file system makes copy-on-write clones (next
    to no time and no disk, whatever the size), else byte for byte (at 100x, 0.5-1 s for 600 MB)."""
    try:
        import fcntl  # POSIX only
    except ImportError:
        fcntl = None
    if fcntl is not None:
        with open(source, "rb") as src, open(target, "wb") as dst:
            try:
                fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
                return
            except OSError:
                pass  # no clones on this file system (or across two): copy
    shutil.copyfile(source, target)


def _keep_only_tables(path: Path, tables: Iterable[str] | None, storage_version: str) -> None:
    """Leaves in a copy of the build database only the tables users query. Gone: the bookkeeping, the build's own,
    and the lake views, which name the lake's files by absolute path, so they would break in a warehouse folder
    moved or copied, and need a client allowed to read files (users read the lake's Parquet files directly).
    Copying the file and dropping the rest costs a fraction of what copying the tables would (they are re-encoded)."""
    with duckdb.connect(str(path), config={"storage_compatibility_version": storage_version}) as con:
        con.execute(f"drop schema if exists {BOOKKEEPING} cascade")
        con.execute("drop schema if exists lake cascade")
        if tables is not None:
            keep = set(tables)
            present = con.execute(
                "select table_name from duckdb_tables()"
                " where database_name = current_database() and schema_name = 'main'"
            ).fetchall()
            for (name,) in present:
                if name not in keep:
                    con.execute(f"drop table main.{sql_identifier(name)}")
        con.execute("checkpoint")


def publish_if_changed(
    warehouse: Path,
    fingerprint: str,
    tables: Iterable[str] | None = None,
    storage_version: str = DEFAULT_STORAGE_VERSION,
) -> bool:
    """Publishes unless warehouse.duckdb already holds the build whose fingerprint is given; True if it published."""
    marker = build_dir(warehouse) / "published.json"
    try:
        previous = json.loads(marker.read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        previous = None  # no marker yet, or one torn by a crash: publish again, which is always safe
    if previous == fingerprint and published_path(warehouse).exists():
        return False
    publish(warehouse, tables, storage_version)
    tmp = marker.with_name(f".{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint}))
    os.replace(tmp, marker)
    return True


def _fsync_dir(folder: Path) -> None:
    """Makes a rename in folder durable (a crash of the machine right after does not undo it)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
