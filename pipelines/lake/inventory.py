"""The lake's errors and files tables: a row per problem met in a run folder and per entry of it."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
import polars as pl

from pipelines.release.discover import DOCUMENT_ORDER, OTHER_JSON_LAYOUT, EpochFile, SkippedEntry
from pipelines.release.flatten import EPOCH_COLUMNS, mtime_column

ERROR_COLUMNS = {
    "run_id": pl.String,
    "source_path": pl.String,
    "epoch": pl.Int64,
    "error_kind": pl.String,
    "severity": pl.String,  # "error": the file was not loaded; "warning": it was loaded, see message
    "message": pl.String,
    "action": pl.String,
}
FILE_COLUMNS = {
    "run_id": pl.String,
    "source_path": pl.String,
    "layout": pl.String,
    "epoch_in_name": pl.Int64,
    "size_bytes": pl.Int64,
    "mtime": pl.Datetime("us", "UTC"),
    "status": pl.String,  # loaded | loaded_with_warnings | quarantined | duplicate | skipped
    "reason": pl.String,
}


def folders_without_document(current: dict[str, EpochFile], outcomes: dict[str, dict]) -> dict[str, list[str]]:
    """The epoch folders whose *.json candidates were all set aside, each with its candidates' paths."""
    folders: dict[str, list[str]] = {}
    for path, file in current.items():
        if file.layout == OTHER_JSON_LAYOUT:
            folders.setdefault(path.rpartition("/")[0], []).append(path)
    return {
        folder: paths
        for folder, paths in sorted(folders.items())
        if all(outcomes[path]["status"] == "skipped" for path in paths)
    }


def missing_document_errors(run_id: str, current: dict[str, EpochFile], outcomes: dict[str, dict]) -> pl.DataFrame:
    """One error per epoch folder whose *.json files held no epoch document, naming each file and why."""
    rows = []
    for folder, paths in folders_without_document(current, outcomes).items():
        seen = "; ".join(f"{path.rpartition('/')[2]}: {outcomes[path]['reason']}" for path in paths[:5])
        more = f"; and {len(paths) - 5} more" if len(paths) > 5 else ""
        rows.append(
            error_row(
                run_id,
                folder,
                current[paths[0]].epoch_in_name,
                "missing_document",
                "error",
                f"epoch folder without an epoch document ({DOCUMENT_ORDER}): {seen}{more}",
                "skipped: nothing loaded",
            )
        )
    return pl.DataFrame(rows, schema=ERROR_COLUMNS)


def source_path_of(entry: SkippedEntry) -> str:
    return entry.source_path


def length_mismatches(run_id: str, epochs: pl.DataFrame, trajectories: pl.DataFrame) -> list[dict]:
    """A warning per document whose list extra has another length than its trajectory count, where other documents
    of the run give that key one value per trajectory: the key is per-trajectory, and this document's values went
    to fact_epochs as JSON text instead of to fact_trajectories."""
    rows = []
    for column in [c for c in epochs.columns if c in trajectories.columns and c not in EPOCH_COLUMNS]:
        if epochs[column].dtype != pl.String:
            continue
        for path, epoch, n, text in (
            epochs.filter(pl.col(column).is_not_null())
            .select("source_path", "epoch", "n_trajectories", column)
            .iter_rows()
        ):
            try:
                values = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            if isinstance(values, list):
                rows.append(
                    error_row(
                        run_id,
                        path,
                        epoch,
                        "extra_length_mismatch",
                        "warning",
                        f"per-trajectory extra `{column}` holds {len(values)} value(s) for {n} trajectories",
                        f"loaded: its values kept as JSON text in fact_epochs.{column}, null in fact_trajectories",
                    )
                )
    return rows


@dataclass
class FileOutcome:
    """What became of one epoch file, as remembered in the manifest between builds."""

    size: int
    mtime_ns: int
    status: str
    reason: str | None
    epoch: int | None
    # Its change time: a same-size rewrite whose mtime was set back (touch -r, cp -p) cannot set it back. 0: unknown
    # (a manifest written before it was kept), not compared.
    ctime_ns: int = 0
    # As listed: kept when its folder cannot be listed again (unlisted.py)
    layout: str = "file"
    epoch_in_name: int | None = None


def error_row(run_id, source_path, epoch, kind, severity, message, action) -> dict:
    return {
        "run_id": run_id,
        "source_path": source_path,
        "epoch": epoch,
        "error_kind": kind,
        "severity": severity,
        "message": message,
        "action": action,
    }


def inventory_errors(run_id: str, skipped: list[SkippedEntry]) -> pl.DataFrame:
    rows = [
        error_row(
            run_id,
            s.source_path,
            s.epoch,
            s.error_kind or "bad_entry",
            s.severity,
            s.reason,
            "not loaded: duplicate" if s.error_kind == "duplicate_epoch" else "skipped: not opened",
        )
        for s in skipped
        if s.is_problem
    ]
    return pl.DataFrame(rows, schema=ERROR_COLUMNS)


def run_inventory(
    run_id: str, current: dict[str, EpochFile], outcomes: dict[str, FileOutcome], skipped: list[SkippedEntry]
) -> pl.DataFrame:
    """One row per entry of the run folder: its epoch files with what became of them, then what was skipped."""
    paths = sorted(current)
    files = [current[path] for path in paths]
    done = [outcomes[path] for path in paths]
    listed = pl.DataFrame(
        {
            "run_id": [run_id] * len(paths),
            "source_path": paths,
            "layout": [f.layout for f in files],
            "epoch_in_name": [f.epoch_in_name for f in files],
            "size_bytes": [f.size for f in files],
            "mtime": mtime_column([f.mtime_ns for f in files]),
            "status": [o.status for o in done],
            "reason": [o.reason for o in done],
        },
        schema=FILE_COLUMNS,
    )
    if not skipped:
        return listed
    others = pl.DataFrame(
        {
            "run_id": [run_id] * len(skipped),
            "source_path": [s.source_path for s in skipped],
            "epoch_in_name": [s.epoch for s in skipped],
            "status": ["duplicate" if s.error_kind == "duplicate_epoch" else "skipped" for s in skipped],
            "reason": [s.reason for s in skipped],
        },
        schema={name: FILE_COLUMNS[name] for name in ("run_id", "source_path", "epoch_in_name", "status", "reason")},
    )
    return pl.concat([listed, others], how="diagonal_relaxed").select(list(FILE_COLUMNS))
