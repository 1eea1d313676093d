"""Flattens a run's decoded epoch documents into two polars frames: one row per epoch, one per trajectory."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone

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


def extra_column_name(key: str, reserved: dict) -> str:
    """An extra key's column name; keys that collide with the warehouse's own columns get an `extra_` prefix."""
    return f"extra_{key}" if key in reserved or key in ("group_index",) else key


def typed_series(name: str, values: Sequence[Scalar]) -> tuple[pl.Series, str | None]:
    """A column for one extra key, and a note when its values do not share one type.

    Integers beside floats widen to Float64 (lossless for counts). Any other mix is kept as JSON text,
    value by value, so `"1"` and `1` stay distinguishable and nothing is silently cast.
    """
    kinds = {type(v) for v in values if v is not None}
    if kinds == {int, float}:
        kinds = {float}
    if len(kinds) <= 1:
        dtype = _PYTHON_TO_POLARS[kinds.pop()] if kinds else pl.String
        return pl.Series(name, values, dtype=dtype, strict=False), None
    encoded = [None if v is None else json.dumps(v, allow_nan=True) for v in values]
    found = ", ".join(sorted(k.__name__ for k in kinds))
    return pl.Series(name, encoded, dtype=pl.String), f"values of several types ({found}); kept as JSON text"


def _mtime(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc)


def flatten(run_id: str, documents: Sequence[tuple[EpochFile, EpochDoc]]) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """The run's epoch and trajectory frames, plus notes on extra keys whose type drifts across epochs.

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
        for key, value in (*doc.scalar_extras.items(), *doc.json_extras.items()):
            column = scalar_extras.setdefault(extra_column_name(key, EPOCH_COLUMNS), [None] * n_epochs)
            column.append(value)
        n_epochs += 1
        for column in scalar_extras.values():
            if len(column) < n_epochs:
                column.append(None)

        traj_cols["run_id"].extend([run_id] * n)
        traj_cols["epoch"].extend([doc.epoch] * n)
        traj_cols["source_path"].extend([file.source_path] * n)
        traj_cols["traj_index"].extend(range(n))
        traj_cols["trajectory_id"].extend(doc.trajectory_ids)
        traj_cols["reward"].extend(doc.rewards)
        traj_cols["advantage"].extend(doc.advantages)
        for key, values in doc.array_extras.items():
            array_extras.setdefault(extra_column_name(key, TRAJECTORY_COLUMNS), [None] * n_traj).extend(values)
        n_traj += n
        for column in array_extras.values():
            if len(column) < n_traj:
                column.extend([None] * (n_traj - len(column)))

    notes: list[str] = []

    def frame(base: dict[str, list], schema: dict, extras: dict[str, list]) -> pl.DataFrame:
        columns = [pl.Series(name, base[name], dtype=dtype, strict=False) for name, dtype in schema.items()]
        for name, values in extras.items():
            series, note = typed_series(name, values)
            columns.append(series)
            if note:
                notes.append(f"extra key `{name}`: {note}")
        return pl.DataFrame(columns)

    return (
        frame(epoch_cols, EPOCH_COLUMNS, scalar_extras),
        frame(traj_cols, TRAJECTORY_COLUMNS, array_extras),
        notes,
    )
