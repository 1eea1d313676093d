"""Flattens a run's decoded epoch documents into two polars frames: one row per epoch, one per trajectory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
import polars as pl

from pipelines.release.decode import DOCUMENTED_SCALARS, EpochDoc, Scalar
from pipelines.release.discover import EpochFile

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
_INT64 = (-(2**63), 2**63 - 1)

# Extra columns kept as JSON text, per table: {column: the value types found, e.g. ["int", "str"]}. Plain columns
# (one type, stored natively) are not listed; the lake keeps this beside the Parquet so that later files can be
# merged into a run without re-reading its documents.
ColumnKinds = dict[str, list[str]]


class JsonText(str):
    """An extra value that is already JSON text (a nested object or a short list), not a string value."""


def _type_name(value) -> str:
    return "nested" if isinstance(value, JsonText) else type(value).__name__


def extra_column_name(key: str, reserved: dict) -> str:
    """An extra key's column name; keys that collide with the warehouse's own columns get an `extra_` prefix.

    SQL names ignore case, and `extra_loss` must not collide with a prefixed `loss`: a key is prefixed when it
    is a reserved name once every leading `extra_` is removed, which keeps the mapping one-to-one.
    """
    base = key.lower()
    while base.startswith("extra_"):
        base = base[len("extra_"):]
    return f"extra_{key}" if base in reserved or base == "group_index" else key


def typed_series(name: str, values: Sequence) -> tuple[pl.Series, list[str] | None]:
    """A column for one extra key, and the value types found when the column has to be kept as JSON text.

    Integers beside floats widen to Float64 (lossless for counts). Nested values, integers beyond 64 bits and
    any other mix of types are kept as JSON text, value by value, so `"1"` and `1` stay distinguishable and
    nothing is silently cast.
    """
    kinds = set(map(type, values)) - {type(None)}  # one pass in C: columns run to millions of values
    if kinds == {int, float}:
        kinds = {float}
    if len(kinds) == 1 and JsonText not in kinds:
        kind = next(iter(kinds))
        present = values if None not in values else [v for v in values if v is not None]
        if kind is not int or _INT64[0] <= min(present) and max(present) <= _INT64[1]:
            return pl.Series(name, values, dtype=_PYTHON_TO_POLARS[kind], strict=True), None
    if not kinds:
        return pl.Series(name, values, dtype=pl.String), None
    encoded = [None if v is None else v if isinstance(v, JsonText) else json.dumps(v, allow_nan=True) for v in values]
    return pl.Series(name, encoded, dtype=pl.String), sorted({_type_name(v) for v in values if v is not None})


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


def combine(
    parts: Sequence[tuple[pl.DataFrame, ColumnKinds]], schema: dict
) -> tuple[pl.DataFrame, ColumnKinds]:
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
    frames = [frame.drop(retype, strict=False) for frame, _ in parts]
    combined = pl.concat(frames, how="diagonal_relaxed")
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


def _mtime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


def flatten(
    run_id: str, documents: Sequence[tuple[EpochFile, EpochDoc]]
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, ColumnKinds]]:
    """The run's epoch and trajectory frames, and per table the extra columns kept as JSON text.

    Extra keys absent from some documents are null there, so a key first seen late still gets its column.
    """
    epoch_cols: dict[str, list] = {name: [] for name in EPOCH_COLUMNS}
    traj_cols: dict[str, list] = {name: [] for name in TRAJECTORY_COLUMNS}
    scalar_extras: dict[str, list] = {}
    array_extras: dict[str, list] = {}
    n_epochs = n_traj = 0

    for file, doc in documents:
        n = doc.n_trajectories
        row = {
            "run_id": run_id,
            "epoch": doc.epoch,
            **doc.scalars,
            "snapshot_id": doc.snapshot_id,
            "n_trajectories": n,
            "source_path": file.source_path,
            "source_layout": file.layout,
            "source_mtime": _mtime(file.mtime_ns),
        }
        for name, value in row.items():
            epoch_cols[name].append(value)
        extras = (*doc.scalar_extras.items(), *((k, JsonText(v)) for k, v in doc.json_extras.items()))
        for key, value in extras:
            name = extra_column_name(key, EPOCH_COLUMNS)
            column = scalar_extras.get(name)
            if column is None:  # not setdefault: its default list would be built for every document
                column = scalar_extras[name] = [None] * n_epochs
            column.append(value)
        n_epochs += 1
        for column in scalar_extras.values():
            if len(column) < n_epochs:
                column.append(None)

        # run_id, epoch, source_path and traj_index are repeated per document below, in bulk.
        traj_cols["trajectory_id"].extend(doc.trajectory_ids)
        traj_cols["reward"].extend(doc.rewards)
        traj_cols["advantage"].extend(doc.advantages)
        for key, values in doc.array_extras.items():
            name = extra_column_name(key, TRAJECTORY_COLUMNS)
            column = array_extras.get(name)
            if column is None:  # not setdefault: a run's worth of padding per document made this quadratic
                column = array_extras[name] = [None] * n_traj
            column.extend(values)
        n_traj += n
        for column in array_extras.values():
            if len(column) < n_traj:
                column.extend([None] * (n_traj - len(column)))

    kinds: dict[str, ColumnKinds] = {"epochs": {}, "trajectories": {}}

    def frame(table: str, base: dict[str, list], schema: dict, extras: dict[str, list]) -> pl.DataFrame:
        columns = [pl.Series(name, base[name], dtype=dtype, strict=False) for name, dtype in schema.items()]
        for name, values in extras.items():
            series, types = typed_series(name, values)
            columns.append(series)
            if types is not None:
                kinds[table][name] = types
        return pl.DataFrame(columns)

    return (
        frame("epochs", epoch_cols, EPOCH_COLUMNS, scalar_extras),
        frame("trajectories", {**traj_cols, **_per_trajectory(run_id, epoch_cols)}, TRAJECTORY_COLUMNS, array_extras),
        kinds,
    )
