"""Helpers the tests import by name: hand-written epoch documents and the files of tiny releases."""

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import polars as pl
from filelock import FileLock

from pipelines.models import load_models


def epoch_document(epoch: int, n: int = 4, **extras) -> dict:
    """A small valid epoch document with n trajectories; rewards 0.0, 0.25, ... and advantages their negatives."""
    rewards = [i / 4 for i in range(n)]
    return {
        "epoch": epoch,
        "loss": 0.5 + epoch,
        "mean_reward": sum(rewards) / n if n else 0.0,
        "kl_sample_train": 0.0,
        "sample_entropy": 1.5,
        "train_entropy": 1.25,
        "snapshot_id": f"ft_snap_{epoch:03d}",
        "trajectory_ids": [f"ft_traj_{epoch:03d}_{i}" for i in range(n)],
        "rewards": rewards,
        "advantages": [-r for r in rewards],
        **extras,
    }


def write_epoch_file(
    run_dir: Path, epoch: int, document=None, layout: str = "file", name_epoch: int | None = None
) -> Path:
    """Writes one epoch document (a dict, or raw text/bytes) in either layout; returns its path."""
    number = epoch if name_epoch is None else name_epoch
    path = (
        run_dir / f"epoch_{number:03d}_results.json"
        if layout == "file"
        else run_dir / f"epoch_{number:03d}" / "results.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    if document is None:
        document = epoch_document(epoch)
    if isinstance(document, dict):
        document = json.dumps(document)
    path.write_bytes(document.encode() if isinstance(document, str) else document)
    return path


def touch_later(path: Path) -> None:
    """Moves a file's mtime one second on, as a rewrite a second later would: within one clock tick, a rewrite of
    the same size could keep its mtime and look unchanged."""
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))


def record_duckdb_connections(monkeypatch) -> list[str]:
    """The databases duckdb.connect opens from now on in this test, as given to it (":memory:" for none)."""
    import duckdb

    opened: list[str] = []
    connect = duckdb.connect

    def recording(database=":memory:", *args, **kwargs):
        opened.append(str(database))
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", recording)
    return opened


def empty_table_sql(model: str) -> str:
    """Creates the model's table empty, of the columns its schema.yml declares."""
    declared = ", ".join(f"{column.name} {column.data_type}" for column in load_models()[model].columns)
    return f"create or replace table {model} ({declared})"


def empty_table(model: str) -> pl.DataFrame:
    """The model's table empty, of the columns and types its schema.yml declares."""
    with duckdb.connect() as con:
        con.execute(empty_table_sql(model))
        return con.table(model).pl()


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder that make(folder) fills once for the whole run: under pytest-xdist, the first worker to ask makes it
    in the run's shared temporary folder while the others wait on a file lock, then all of them read it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    folder = tmp_path_factory.getbasetemp().parent / name  # the run's folder, above each worker's own
    with FileLock(f"{folder}.lock"):
        done = folder / ".made"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # left half made by a worker whose make failed
            folder.mkdir()
            make(folder)
            done.touch()
    return folder
