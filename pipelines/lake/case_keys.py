"""Extra keys that differ only in case (`lr`, `LR`): SQL names ignore case, so the lake views give each spelling a
column of its own, named with its case, and say so in the lake's errors.

The lake's Parquet keeps every key as it is spelled. DuckDB would take two spellings in one file for one name (the
second renamed `lr_1`), and in two files for one column: files holding a spelled-twice key are read by position.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from pipelines.lake.inventory import ERROR_COLUMNS, error_row
from pipelines.lake.parquet import column_names
from pipelines.lake_store import LakePath, file_stamp, in_bucket, object_stamps
from pipelines.models import sql_identifier

# DuckDB folds only ASCII letters in names: `É` and `é` are two names to it.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
# The warehouse tables of the lake views whose columns include extra keys.
_TABLES = {"epochs": "fact_epochs", "trajectories": "fact_trajectories", "transcripts": "transcript_records"}


def _folded(name: str) -> str:
    return name.translate(_ASCII_LOWER)


def _case_column(key: str) -> str:
    """The column of a key spelled more than one way: the key and where its capitals are (`LR__upper_1_2`,
    `lr__lower`), which differs between any two spellings and from any other key's column."""
    capitals = [str(place) for place, letter in enumerate(key, 1) if "A" <= letter <= "Z"]
    return f"{key}__upper_{'_'.join(capitals)}" if capitals else f"{key}__lower"


def case_columns(extras: set[str]) -> dict[str, str]:
    """The column of each extra key that another differs from only in case, by key; the other keys keep their names,
    except one named as such a column (a key `lr__lower` beside `lr` and `LR`), which is given one too."""
    spellings: dict[str, set[str]] = {}
    for key in extras:
        spellings.setdefault(_folded(key), set()).add(key)
    renamed = {key for keys in spellings.values() if len(keys) > 1 for key in keys}
    while taken := {_folded(key) for key in extras - renamed} & {_folded(_case_column(key)) for key in renamed}:
        renamed |= {key for key in extras - renamed if _folded(key) in taken}
    return {key: _case_column(key) for key in sorted(renamed)}


def split_by_case(
    con: duckdb.DuckDBPyConnection, cache: str, view: str, schema: dict, groups: Sequence[list]
) -> tuple[list[list], list[tuple[list, list[str]]], dict[str, str]]:
    """The groups of files (each of one set of columns in one order) whose columns keep their names, the others
    with their columns' names in order, and the view's renamed keys (case_columns). cache: a table of the build
    database keeping each file's column names by its stamp."""
    if view not in _TABLES:  # no extra keys
        return list(groups), [], {}
    spelled = _column_names(con, cache, view, [group[0] for group in groups])
    names = {id(group): spelled[str(group[0])] for group in groups}
    extras = {name for group_names in names.values() for name in group_names if name not in schema}
    renamed = case_columns(extras)
    plain = [group for group in groups if not renamed.keys() & set(names[id(group)])]
    by_position = [
        (group, [renamed.get(name, name) for name in names[id(group)]])
        for group in groups
        if renamed.keys() & set(names[id(group)])
    ]
    return plain, by_position, renamed


def _column_names(con: duckdb.DuckDBPyConnection, cache: str, view: str, files: list[LakePath]) -> dict[str, list[str]]:
    """Each file's column names as spelled, by path: read from the footers of the files new or rewritten since the
    view was last made (a few requests each in a bucket), the others' kept in cache by their stamps."""
    con.execute(f"create table if not exists {cache} (view varchar, file varchar, stamp varchar, names varchar[])")
    # In a bucket, one listing of the table's prefix rather than a request per file.
    listed = object_stamps(files[0].parent.parent) if files and in_bucket(files[0]) else None
    stamps = {str(file): file_stamp(file) if listed is None else listed.get(str(file)) for file in files}
    kept = {
        (file, stamp): names
        for file, stamp, names in con.execute(
            f"select file, stamp, names from {cache} where view = ?", [view]
        ).fetchall()
    }
    spelled = {str(file): kept.get((str(file), stamps[str(file)])) or column_names(file) for file in files}
    con.execute(f"delete from {cache} where view = ?", [view])
    con.execute(
        f"insert into {cache} select ?, unnest(?), unnest(?), unnest(?)",
        [view, list(spelled), [stamps[file] for file in spelled], list(spelled.values())],
    )
    return spelled


def by_position(source: str, columns: list[str]) -> str:
    """A source's columns, in order, under the given names: DuckDB's own for two spellings of a key in one file
    would be `lr` and `lr_1`."""
    return f"(select {', '.join(f'#{n} as {sql_identifier(c)}' for n, c in enumerate(columns, 1))} from {source})"


def case_notes(view: str, renamed: dict[str, str]) -> list[dict]:
    """A warning per set of keys that differ only in case, and per key named as one of their columns, saying which
    column holds each."""
    keys: dict[str, list[str]] = {}
    for key in renamed:
        keys.setdefault(_folded(key), []).append(key)
    notes = []
    for spellings in keys.values():
        listed = ", ".join(f"`{key}` as `{renamed[key]}`" for key in spellings)
        why = (
            "differ only in case, which SQL names ignore" if len(spellings) > 1 else "is named as another key's column"
        )
        message = f"extra key(s) {', '.join(f'`{key}`' for key in spellings)} {why}: {_TABLES[view]} has {listed}"
        notes.append(error_row(None, None, None, "case_keys", "warning", message, "loaded"))
    return notes


def record_case_notes(con: duckdb.DuckDBPyConnection, table: str, view: str, renamed: dict[str, str]) -> None:
    """Keeps a view's case_notes in a table of the build database, which the errors view reads."""
    columns = ", ".join(f"{name} varchar" if name != "epoch" else "epoch bigint" for name in ERROR_COLUMNS)
    con.execute(f"create table if not exists {table} (view varchar, {columns})")
    con.execute(f"delete from {table} where view = ?", [view])
    for note in case_notes(view, renamed) if renamed else []:
        con.execute(
            f"insert into {table} by name select ? as view, {', '.join(f'? as {n}' for n in note)}",
            [view, *note.values()],
        )


def case_notes_select(table: str) -> str:
    return f"select * exclude (view) from {table}"
