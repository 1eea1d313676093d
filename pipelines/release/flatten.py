"""Flattens a run's decoded epoch documents into two polars frames: one row per epoch, one per trajectory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import compress, repeat
from operator import is_, itemgetter

import msgspec
import numpy as np
import orjson
import polars as pl

from pipelines.release.decode import (
    DOCUMENTED_KEYS,
    DOCUMENTED_SCALARS,
    MAX_PER_TRAJECTORY_DEPTH,
    NUMBER_TYPES,
    SCALAR_TYPES,
    EpochDoc,
    keys_outside_lists,
    may_hold_an_integer_beyond_64_bits,
    may_hold_lone_surrogate,
    nested_json_text,
    nesting_depth,
)
from pipelines.release.discover import EpochFile
from pipelines.release.shape import INT64_RANGE, Shape, typed_shape

EPOCH_COLUMNS = {
    "run_id": pl.String,
    "epoch": pl.Int64,
    **{key: pl.Float64 for key in DOCUMENTED_SCALARS},
    "snapshot_id": pl.String,
    "n_trajectories": pl.Int64,
    "source_path": pl.String,
    "source_layout": pl.String,
    "source_mtime": pl.Datetime("us", "UTC"),
}
TRAJECTORY_COLUMNS = {
    "run_id": pl.String,
    "epoch": pl.Int64,
    "source_path": pl.String,
    "traj_index": pl.Int64,
    "trajectory_id": pl.String,
    "reward": pl.Float64,
    "advantage": pl.Float64,
}
_PYTHON_TO_POLARS = {bool: pl.Boolean, int: pl.Int64, float: pl.Float64, str: pl.String}

# Extra columns kept as JSON text, per table: {column: the value types found, e.g. ["int", "str"]}. Plain columns
# (one type, stored natively) are not listed; the lake keeps this beside the Parquet so that later files can be
# merged into a run without re-reading its documents.
ColumnKinds = dict[str, list[str]]


class JsonText(str):
    """An extra value that is already JSON text (a nested object or a short list), not a string value."""


def _type_name(value) -> str:
    return "nested" if isinstance(value, (JsonText, dict, list)) else type(value).__name__


def extra_column_name(key: str, reserved: dict) -> str:
    """An extra key's column name; keys that collide with the warehouse's own columns get an `extra_` prefix, and
    so does the empty key (`extra_`), which no SQL client can name.

    SQL names ignore case, and `extra_loss` must not collide with a prefixed `loss`: a key is prefixed when it
    is a reserved name (or empty) once every leading `extra_` is removed, which keeps the mapping one-to-one.
    """
    base = key.lower()
    while base.startswith("extra_"):
        base = base[len("extra_") :]
    return f"extra_{key}" if base in reserved or base in ("group_index", "") else key


def typed_series(name: str, values: Sequence) -> tuple[pl.Series, list[str] | None]:
    """A column for one extra key, and the value types found when the column has to be kept as JSON text.

    Integers beside floats widen to Float64 (lossless for counts) when every one fits in 64 bits. Nested values,
    integers beyond 64 bits (alone or beside floats) and any other mix of types are kept as JSON text, value by
    value, so `"1"` and `1` stay distinguishable and nothing is silently cast.
    """
    found = set(map(type, values))  # one pass in C: columns run to millions of values
    kinds = found - {type(None)}
    if kinds and kinds <= {dict, list} and (series := nested_series(name, values)) is not None:
        return series, None
    if kinds == {int} or kinds == {int, float}:
        # The integers alone, picked out in C (a Python loop would cost a column of millions dearly).
        integers = values if found == {int} else list(compress(values, map(is_, map(type, values), repeat(int))))
        if INT64_RANGE[0] <= min(integers) and max(integers) <= INT64_RANGE[1]:
            return pl.Series(name, values, dtype=pl.Float64 if float in kinds else pl.Int64, strict=True), None
    elif len(kinds) == 1 and kinds <= _PYTHON_TO_POLARS.keys():
        return pl.Series(name, values, dtype=_PYTHON_TO_POLARS[next(iter(kinds))], strict=True), None
    if not kinds:
        return pl.Series(name, values, dtype=pl.String), None
    encoded = [None if v is None else v if isinstance(v, JsonText) else json.dumps(v, allow_nan=True) for v in values]
    return pl.Series(name, encoded, dtype=pl.String), sorted({_type_name(v) for v in values if v is not None})


def nested_series(name: str, values: Sequence) -> pl.Series | None:
    """A STRUCT or LIST column holding exactly these objects or lists (None among them), or None when their shapes
    differ: polars' inference would otherwise drop a key some object lacks, or cast 2.5 beside 1 to an integer.
    Exactly: the same keys in the same order, values of the same types, so that the column's values are the
    documents' and a merge that types them again (combine) gives what a first ingest gives."""
    try:
        series = pl.Series(name, values, strict=True)
        # An object with no key or a list of nothing but empty lists has no Parquet type (Struct({}), List(Null)).
        if series.dtype == pl.Object or any(kind in str(series.dtype) for kind in ("Struct({})", "Null")):
            return None
        if not all(map(_same_value, values, series.to_list())):
            return None
    except (TypeError, ValueError, OverflowError, RecursionError, pl.exceptions.PolarsError):
        return None  # RecursionError: nested deeper than the type's repr or the comparison can go
    return series


def _same_value(given, stored) -> bool:
    """Whether a stored nested value is the one given: the same keys in the same order, the same types, NaN for NaN."""
    if type(given) is dict:
        return (
            type(stored) is dict
            and list(given) == list(stored)
            and all(_same_value(value, stored[key]) for key, value in given.items())
        )
    if type(given) is list:
        return type(stored) is list and len(given) == len(stored) and all(map(_same_value, given, stored))
    if type(given) is float and given != given:
        return type(stored) is float and stored != stored
    return type(given) is type(stored) and given == stored


def column_order(columns, schema: dict) -> list[str]:
    """A table's columns in the lake's order: the table's own (schema) first, then the extra keys' in name order,
    whatever order the documents or the files brought them in."""
    present = set(columns)
    return [name for name in schema if name in present] + sorted(present - set(schema))


def python_values(series: pl.Series, types: list[str] | None) -> list:
    """The Python values of a stored extra column, as typed_series was given them."""
    if types is None:
        return series.to_list()
    values = []
    for text in series.to_list():
        if text is None:
            values.append(None)
            continue
        value = json.loads(text)
        values.append(JsonText(text) if isinstance(value, (dict, list)) else value)
    return values


def drift_notes(kinds: ColumnKinds) -> list[str]:
    """One note per extra column whose values are of several types."""
    return [
        f"extra key `{column}` has values of several types ({', '.join(types)}); every value kept as JSON text"
        for column, types in sorted(kinds.items())
        if len(types) > 1
    ]


def combine(parts: Sequence[tuple[pl.DataFrame, ColumnKinds]], schema: dict) -> tuple[pl.DataFrame, ColumnKinds]:
    """Stacks frames of one table (a run's stored rows and its newly flattened ones) without a silent cast.

    An extra column stored one way in one part and another way in another (Int64 beside String, say) is typed
    again over all its values, exactly as if every document had been flattened together.
    """
    parts = [(frame, kinds) for frame, kinds in parts if frame.width > 0]
    if not parts:
        return pl.DataFrame(), {}
    seen: dict[str, set] = {}
    for frame, kinds in parts:
        for column, dtype in frame.schema.items():
            if column not in schema:
                seen.setdefault(column, set()).add((dtype, tuple(kinds.get(column, ()))))
    numeric = {(pl.Int64, ()), (pl.Float64, ())}
    retype = sorted(column for column, ways in seen.items() if len(ways) > 1 and not ways <= numeric)
    kinds = {column: types for _, part_kinds in parts for column, types in part_kinds.items() if column not in retype}
    frames = [frame.drop(retype, strict=False) if retype else frame for frame, _ in parts]
    # One part (a run's first ingest) is taken as it is: a concat costs a plan even of one frame.
    combined = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    for column in retype:
        values: list = []
        for frame, part_kinds in parts:
            if column in frame.columns:
                values += python_values(frame[column], part_kinds.get(column))
            else:
                values += [None] * frame.height
        series, types = typed_series(column, values)
        combined = combined.with_columns(series)
        if types is not None:
            kinds[column] = types
    return combined, dict(sorted(kinds.items()))


def _per_trajectory(run_id: str, epoch_cols: dict[str, list]) -> dict[str, pl.Series]:
    """The trajectory table's per-document columns, each document's value repeated once per trajectory."""
    counts = np.asarray(epoch_cols["n_trajectories"], dtype=np.int64)
    document = np.repeat(np.arange(len(counts)), counts)
    starts = np.cumsum(counts) - counts
    return {
        "run_id": pl.Series([run_id], dtype=pl.String).gather(np.zeros(len(document), dtype=np.int64)),
        "epoch": pl.Series(epoch_cols["epoch"], dtype=pl.Int64).gather(document),
        "source_path": pl.Series(epoch_cols["source_path"], dtype=pl.String).gather(document),
        "traj_index": pl.Series(np.arange(len(document), dtype=np.int64) - starts[document]),
    }


def _storable(values: list) -> bool:
    """Whether a per-trajectory extra can be stored as decode_parsed takes it: scalars, or objects and lists no deeper
    than MAX_PER_TRAJECTORY_DEPTH."""
    return set(map(type, values)) <= SCALAR_TYPES or nesting_depth(values) <= MAX_PER_TRAJECTORY_DEPTH


def mtime_column(mtime_ns: list[int]) -> pl.Series:
    """File mtimes (ns) as a UTC timestamp column: whole microseconds, as Parquet holds them; in bulk, not a
    datetime object per file. Nanoseconds since 1970 pass 64 bits after 2262 (a file system may hold a later
    mtime): they are divided as 128-bit integers."""
    return (pl.Series(mtime_ns, dtype=pl.Int128) // 1000).cast(pl.Int64).cast(pl.Datetime("us", "UTC"))


def _as_floats(values: list) -> list | None:
    """A column of numbers as decode_epoch gives them (integers as floats), or None if it holds anything else."""
    kinds = set(map(type, values))
    if int not in kinds:
        return values if kinds <= NUMBER_TYPES else None
    if not kinds <= NUMBER_TYPES:
        return None
    try:
        return [None if v is None else float(v) for v in values]
    except OverflowError:
        return None


class RunColumns:
    """A run's flattened columns, filled document by document; frames() turns them into the two tables.

    add() takes a decoded EpochDoc. The fast path takes a document of the run's shape, the keys and value types of
    the document that set it (the first one, or one where a key appears mid-run; usually one writer wrote every
    epoch of a run): add_bytes() decodes its bytes with the shape's typed decoder, which checks every value in C;
    add_parsed() takes its parsed JSON, checked as decode_epoch would check it, and sets the shape when the
    document has another. The epoch rows both keep as tuples become columns in bulk. A document they decline
    goes through decode_parsed and add().
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.epoch_cols: dict[str, list] = {name: [] for name in EPOCH_COLUMNS if name != "source_mtime"}
        self.mtime_ns: list[int] = []
        self.traj_cols: dict[str, list] = {"trajectory_id": [], "reward": [], "advantage": []}
        self.scalar_extras: dict[str, list] = {}
        self.array_extras: dict[str, list] = {}
        self.n_epochs = self.n_traj = 0  # n_epochs: documents whose epoch row is in the columns
        self._shape: Shape | None = None
        self._rows: list[tuple] = []  # epoch rows of documents add_parsed took, not yet in the columns
        self._lists: tuple[list, ...] = ()  # the lists add_parsed extends, made when it takes its first document

    def _file(self, file: EpochFile, n: int) -> None:
        cols = self.epoch_cols
        cols["run_id"].append(self.run_id)
        cols["n_trajectories"].append(n)
        cols["source_path"].append(file.source_path)
        cols["source_layout"].append(file.layout)
        self.mtime_ns.append(file.mtime_ns)

    def _scalar_column(self, name: str) -> list:
        column = self.scalar_extras.get(name)
        if column is None:  # not setdefault: its default list would be built for every document
            column = self.scalar_extras[name] = [None] * self.n_epochs
        return column

    def _array_column(self, name: str) -> list:
        column = self.array_extras.get(name)
        if column is None:  # not setdefault: a run's worth of padding per document made this quadratic
            column = self.array_extras[name] = [None] * self.n_traj
        return column

    def _pad(self) -> None:
        for column in self.scalar_extras.values():
            if len(column) < self.n_epochs:
                column.extend([None] * (self.n_epochs - len(column)))
        self._pad_arrays()

    def _pad_arrays(self) -> None:
        """Per-trajectory extras of other documents, absent from the last one, get nulls for its trajectories."""
        for column in self.array_extras.values():
            if len(column) < self.n_traj:
                column.extend([None] * (self.n_traj - len(column)))

    def _flush(self) -> None:
        """Moves the epoch rows add_parsed kept into the columns, one column at a time."""
        rows, shape = self._rows, self._shape
        if not rows:
            return
        for (kind, name), values in zip(shape.row_columns, zip(*rows, strict=True), strict=True):
            if kind == "epoch":
                self.epoch_cols[name].extend(values)
            else:
                self._scalar_column(name).extend(values)
        self.n_epochs += len(rows)
        self._rows = []
        self._pad()

    def add(self, file: EpochFile, doc: EpochDoc) -> None:
        self._flush()
        n = doc.n_trajectories
        self._file(file, n)
        cols = self.epoch_cols
        cols["epoch"].append(doc.epoch)
        for key in DOCUMENTED_SCALARS:
            cols[key].append(doc.scalars[key])
        cols["snapshot_id"].append(doc.snapshot_id)
        for key, value in doc.scalar_extras.items():
            self._scalar_column(extra_column_name(key, EPOCH_COLUMNS)).append(value)
        for key, value in doc.json_extras.items():
            self._scalar_column(extra_column_name(key, EPOCH_COLUMNS)).append(JsonText(value))
        self.n_epochs += 1
        # run_id, epoch, source_path and traj_index are repeated per document by frames(), in bulk.
        self.traj_cols["trajectory_id"].extend(doc.trajectory_ids)
        self.traj_cols["reward"].extend(doc.rewards)
        self.traj_cols["advantage"].extend(doc.advantages)
        for key, values in doc.array_extras.items():
            self._array_column(extra_column_name(key, TRAJECTORY_COLUMNS)).extend(values)
        self.n_traj += n
        self._pad()

    def _shape_of(self, doc: dict) -> Shape | None:
        """The shape the fast path takes, from a document that needs no warning; None if it cannot take it."""
        if any(key not in doc for key in DOCUMENTED_KEYS):
            return None
        if type(doc["epoch"]) is not int or not isinstance(doc["snapshot_id"], (str, type(None))):
            return None
        if any(type(doc[key]) not in NUMBER_TYPES for key in DOCUMENTED_SCALARS):
            return None
        if any(type(doc[key]) is not list for key in ("trajectory_ids", "rewards", "advantages")):
            return None
        n = len(doc["trajectory_ids"])
        if n == 0:
            return None
        row_keys = ["epoch", *DOCUMENTED_SCALARS, "snapshot_id"]
        row_columns = [("epoch", key) for key in row_keys]
        nested, list_keys, list_columns, short = [], ["trajectory_ids", "rewards", "advantages"], [], []
        for key, value in doc.items():
            if key in DOCUMENTED_KEYS:
                continue
            kind = type(value)
            if kind in SCALAR_TYPES:
                row_keys.append(key)
                row_columns.append(("extra", extra_column_name(key, EPOCH_COLUMNS)))
            elif kind is list and len(value) == n:
                list_keys.append(key)
                list_columns.append(extra_column_name(key, TRAJECTORY_COLUMNS))
            else:
                nested.append(key)
                if kind is list:
                    short.append(key)
        # Nested extras after the scalar ones, as add() makes their columns.
        row_keys += nested
        row_columns += [("extra", extra_column_name(key, EPOCH_COLUMNS)) for key in nested]
        return Shape(
            tuple(doc),
            tuple(map(type, doc.values())),
            itemgetter(*row_keys),
            tuple(row_columns),
            len(nested),
            itemgetter(*list_keys),
            tuple(list_columns),
            tuple(short),
            typed_shape(doc, row_keys, list_keys, nested, short),
        )

    def add_parsed(self, file: EpochFile, doc) -> bool:
        """Adds the parsed JSON of one document if it has the run's shape, or can give the run its shape; False
        (nothing added) if not."""
        if type(doc) is not dict:
            return False
        shape = self._shape
        if shape is not None and tuple(doc) == shape.keys and tuple(map(type, doc.values())) == shape.types:
            return self._take_parsed(doc, file)
        return self._take_in_new_shape(doc, file)

    def _take_in_new_shape(self, doc: dict, file: EpochFile) -> bool:
        """Takes a document of another shape than the run's (the first document, or one with a key that appears
        mid-run) and makes its shape the run's, and its typed decoder add_bytes'. Nothing changes if it cannot be
        taken: a document that is not taken (a wrong epoch, say) must not set the shape, since the typed decoder,
        blind to key order, would give its order to the columns of the next documents."""
        new = self._shape_of(doc)
        if new is None:
            return False
        self._flush()  # the rows kept so far are moved into the columns by the shape they were taken in
        old = self._shape, self._lists
        self._shape, self._lists = new, ()
        if self._take_parsed(doc, file):
            return True
        self._shape, self._lists = old
        return False

    def _take_parsed(self, doc: dict, file: EpochFile) -> bool:
        """Takes a parsed document of the run's shape once its values pass decode_epoch's checks (numbers become
        floats as it makes them, an integer too large for a float refused); False (nothing added) if one fails."""
        shape = self._shape
        ids, rewards, advantages, *extras = shape.lists(doc)
        if not set(map(type, ids)) <= {str} or not all(map(_storable, extras)):
            return False
        rewards, advantages = _as_floats(rewards), _as_floats(advantages)
        row = shape.row(doc)
        end = 1 + len(DOCUMENTED_SCALARS)  # the row is the epoch, the documented numbers, then the rest
        scalars = _as_floats(list(row[1:end]))
        if rewards is None or advantages is None or scalars is None:
            return False
        return self._take(
            file,
            doc["epoch"],
            (row[0], *scalars, *row[end:]),
            (ids, rewards, advantages, *extras),
            [doc[key] for key in shape.short_lists],
        )

    def add_bytes(self, file: EpochFile, data: bytes) -> bool:
        """Adds a document straight from its bytes when the run's typed decoder takes it; False (nothing added) if
        not, or if it cannot tell: a key that may be repeated (colons beyond the keys decoded), an escape that may
        be a lone surrogate. The caller then parses it as usual."""
        typed = self._shape.typed if self._shape is not None else None
        if typed is None or may_hold_lone_surrogate(data):
            return False
        try:
            values = msgspec.structs.astuple(typed.decoder.decode(data))
        except (msgspec.DecodeError, RecursionError):  # malformed, a value of another type, nested too deeply
            return False
        row = typed.row(values)
        n_keys = typed.n_keys
        if typed.nested:
            row = list(row)
            for index, kind in typed.nested:
                if may_hold_an_integer_beyond_64_bits(bytes(row[index])):  # orjson would read it as a float
                    return False
                try:
                    value = row[index] = orjson.loads(memoryview(row[index]))
                except (orjson.JSONDecodeError, RecursionError):
                    return False
                if type(value) is not kind:
                    return False
                n_keys += keys_outside_lists(value)
        if data.count(b":") > n_keys:  # a key may be repeated: the parser's exact check decides
            return False
        return self._take(file, typed.epoch(values), tuple(row), typed.lists(values), [row[i] for i in typed.short])

    def _take(self, file: EpochFile, epoch, row: tuple, lists: tuple, short_lists: list) -> bool:
        """Adds one document of the run's shape: its epoch row and its lists; False (nothing added) when its epoch
        is not its file's, it has no trajectory (its lists are then extras of the epoch), its lists differ in
        length, or a short list has a value per trajectory."""
        shape = self._shape
        if epoch != file.epoch_in_name:
            return False
        n = len(lists[0])
        if n == 0 or len(set(map(len, lists))) != 1 or any(len(values) == n for values in short_lists):
            return False
        if shape.n_nested:
            try:
                nested = [JsonText(nested_json_text(value)) for value in row[-shape.n_nested :]]
            except (RecursionError, ValueError):  # nested too deeply to encode: decode_parsed says why
                return False
            row = (*row[: -shape.n_nested], *nested)
        if not self._lists:  # made now, not with the shape: columns appear in the order documents bring them
            extras = [self._array_column(name) for name in shape.list_columns]
            self._lists = (
                self.traj_cols["trajectory_id"],
                self.traj_cols["reward"],
                self.traj_cols["advantage"],
                *extras,
            )
        self._file(file, n)
        self._rows.append(row)
        for column, values in zip(self._lists, lists, strict=True):
            column.extend(values)
        self.n_traj += n
        self._pad_arrays()  # its epoch row joins the columns, and is padded, when the rows are flushed
        return True

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, ColumnKinds]]:
        """The run's epoch and trajectory frames, and per table the extra columns kept as JSON text."""
        self._flush()
        kinds: dict[str, ColumnKinds] = {"epochs": {}, "trajectories": {}}

        def frame(table: str, base: dict[str, list | pl.Series], schema: dict, extras: dict[str, list]):
            columns = [
                base[name].alias(name)
                if isinstance(base[name], pl.Series)
                else pl.Series(name, base[name], dtype=dtype, strict=False)
                for name, dtype in schema.items()
            ]
            for name, values in extras.items():
                series, types = typed_series(name, values)
                columns.append(series)
                if types is not None:
                    kinds[table][name] = types
            return pl.DataFrame(columns)

        epoch_base = {**self.epoch_cols, "source_mtime": mtime_column(self.mtime_ns)}
        trajectory_base = {**self.traj_cols, **_per_trajectory(self.run_id, self.epoch_cols)}
        return (
            frame("epochs", epoch_base, EPOCH_COLUMNS, self.scalar_extras),
            frame("trajectories", trajectory_base, TRAJECTORY_COLUMNS, self.array_extras),
            kinds,
        )


def flatten(
    run_id: str, documents: Sequence[tuple[EpochFile, EpochDoc]]
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, ColumnKinds]]:
    """The run's epoch and trajectory frames, and per table the extra columns kept as JSON text.

    Extra keys absent from some documents are null there, so a key first seen late still gets its column.
    """
    columns = RunColumns(run_id)
    for file, doc in documents:
        columns.add(file, doc)
    return columns.frames()
