"""Where the lake keeps a run's files: run keys, partition, manifest and stamp paths, and the runs it holds."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock

from pipelines.lake_store import (
    LakePath,
    disk_stamp,
    in_bucket,
    lake_root,
    lock_folder,
    object_stamps,
    write_bytes_atomically,
)

RUN_TABLES = ("epochs", "trajectories", "errors", "files", "transcripts")

_NOT_IN_KEY = re.compile(r"[^a-z0-9_]+")
RUN_IDS = "run_ids"  # lake/run_ids/<key>: the exact run id of the files named <key>


@functools.lru_cache(maxsize=2**16)  # asked for several times per run by every build
def run_key(run_id: str) -> str:
    """The lake's name for a run's files and folders: a lowercase slug of the run id, for people, and a digest of
    the exact id, for uniqueness.

    A run id is any name a folder can have: glob characters, `=` (a hive partition to DuckDB and polars), more
    bytes than a file name may hold, or a difference in case only (one name on a case-insensitive disk). None of
    it reaches a path the lake writes or a reader lists: the key holds [a-z0-9_-] only and is at most 65 long.
    """
    slug = _NOT_IN_KEY.sub("_", run_id.lower()).strip("_")[:48]
    return f"{slug or 'run'}-{hashlib.sha256(run_id.encode('utf-8', 'surrogateescape')).hexdigest()[:16]}"


def partition_file(lake: LakePath, table: str, run_id: str) -> LakePath:
    return lake_root(lake).joinpath(table, run_key(run_id), "data.parquet")


def manifest_file(lake: LakePath, run_id: str) -> LakePath:
    return lake_root(lake).joinpath("manifests", f"{run_key(run_id)}.json")


def manifested_runs(lake: LakePath, run_ids: Iterable[str]) -> set[str]:
    """The run ids the lake holds a manifest of, on a disk from one listing of the manifests folder."""
    lake = lake_root(lake)
    if in_bucket(lake):
        return {run_id for run_id in run_ids if manifest_file(lake, run_id).exists()}
    try:
        with os.scandir(lake / "manifests") as entries:
            names = {entry.name for entry in entries}
    except FileNotFoundError:
        return set()
    return {run_id for run_id in run_ids if f"{run_key(run_id)}.json" in names}


def stamps_file(lake: LakePath, run_id: str) -> LakePath:
    """A quiet run's folder stamps (see unchanged_by_stamps): a file of its own, a fraction of the manifest's size."""
    return lake_root(lake).joinpath("stamps", f"{run_key(run_id)}.json")


def _run_id_file(lake: LakePath, run_id: str) -> LakePath:
    return lake_root(lake) / RUN_IDS / run_key(run_id)


_RUN_IDS_SEEN: dict[str, tuple[tuple[int, int], dict[str, str]]] = {}


def lake_runs(lake: LakePath) -> dict[str, str]:
    """Every run the lake holds files of: run id -> its key (run_key), in run id order.

    Read from lake/run_ids, one small file per run written before the run's first partition and removed after its
    last. A key's run id never changes, so the mapping is read again only when the folder's entries change.
    """
    lake = lake_root(lake)
    if in_bucket(lake):
        return _object_lake_runs(lake)
    folder = lake / RUN_IDS
    try:
        st = folder.stat()
    except FileNotFoundError:
        return {}
    stamp = (st.st_ino, st.st_mtime_ns)
    cached = _RUN_IDS_SEEN.get(str(folder))
    if cached is not None and cached[0] == stamp:
        return dict(cached[1])
    runs = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.startswith("."):
                try:
                    runs[Path(entry.path).read_bytes().decode("utf-8", "surrogateescape")] = entry.name
                except FileNotFoundError:  # removed since the listing
                    continue
    runs = dict(sorted(runs.items()))
    if time.time_ns() - st.st_mtime_ns > 10**9:  # a folder changed within the clock's tick may change again unseen
        _RUN_IDS_SEEN[str(folder)] = (stamp, runs)
    return dict(runs)


# A bucket's run ids by lake and key: a key's run id never changes, so each is fetched once per process.
_OBJECT_RUN_IDS: dict[str, dict[str, str]] = {}


def _object_lake_runs(lake: LakePath) -> dict[str, str]:
    """lake_runs of a lake in a bucket: one listing of lake/run_ids, and a GET of each key not seen before."""
    folder = lake / RUN_IDS
    try:
        keys = [name.rpartition("/")[2] for name in folder.fs.ls(folder.path, detail=False)]
    except FileNotFoundError:
        return {}
    known = _OBJECT_RUN_IDS.setdefault(str(lake), {})
    new = [key for key in keys if key not in known and not key.startswith(".")]
    if new:
        # cat_ranges rather than cat: the paths are names, not patterns (a lake's prefix may hold `*` or `[`).
        fetched = folder.fs.cat_ranges([f"{folder.path}/{key}" for key in new], 0, None, on_error="return")
        for key, data in zip(new, fetched, strict=True):
            if isinstance(data, bytes):  # else removed since the listing
                known[key] = data.decode("utf-8", "surrogateescape")
    return dict(sorted((known[key], key) for key in keys if key in known))


def table_stamps(lake: LakePath, table: str, runs: dict[str, str] | None = None) -> dict[str, str]:
    """The stamp (lake_store.file_stamp) of each run's partition of a per-run lake table (RUN_TABLES), by run id, in
    run id order; runs (default: lake_runs) without one are absent. In a bucket, from one listing of the table's
    prefix."""
    lake = lake_root(lake)
    runs = lake_runs(lake) if runs is None else runs
    if in_bucket(lake):
        listed = object_stamps(lake / table)
        stamps = ((run_id, listed.get(str(lake.joinpath(table, key, "data.parquet")))) for run_id, key in runs.items())
    else:  # paths as text: a Path per run costs more than its stat
        folder = os.path.join(lake, table)
        stamps = ((run_id, disk_stamp(f"{folder}/{key}/data.parquet")) for run_id, key in runs.items())
    return {run_id: stamp for run_id, stamp in stamps if stamp is not None}


def lake_files(lake: LakePath, table: str) -> list[LakePath]:
    """The Parquet files of one per-run lake table (RUN_TABLES), one per run that has one, in run id order: a list
    of the lake's own paths, never a pattern."""
    lake = lake_root(lake)
    if in_bucket(lake):
        return [partition_file(lake, table, run_id) for run_id in table_stamps(lake, table)]
    files = (lake / table / key / "data.parquet" for key in lake_runs(lake).values())
    return [path for path in files if path.exists()]


def run_lock(lake: LakePath, run_id: str) -> FileLock:
    """The lock a run's lake files are written under: two ingests of one run take turns, of two runs run at once."""
    folder = lock_folder(lake_root(lake))
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(folder / f"{run_key(run_id)}.lock")


def register_run(lake: LakePath, run_id: str) -> None:
    """Records the run id behind its key, before any file of the run is written under that key."""
    path = _run_id_file(lake, run_id)
    if not path.exists():
        write_bytes_atomically(run_id.encode("utf-8", "surrogateescape"), path)


def remove_run(lake: LakePath, run_id: str) -> None:
    """Drops a run that no longer exists in any release from every lake table."""
    stamps_file(lake, run_id).unlink(missing_ok=True)
    for table in RUN_TABLES:
        partition_file(lake, table, run_id).unlink(missing_ok=True)
        if in_bucket(lake_root(lake)):
            continue  # a bucket has no folders: a prefix is gone with its last key
        try:
            partition_file(lake, table, run_id).parent.rmdir()
        except OSError:
            pass  # not there, or not empty (a temporary file of a write under way)
    manifest_file(lake, run_id).unlink(missing_ok=True)
    _run_id_file(lake, run_id).unlink(missing_ok=True)


def gone_runs(lake: LakePath, present) -> list[str]:
    """The runs the lake holds that are not among the present run ids."""
    return sorted(run_id for run_id in lake_runs(lake) if run_id not in present)
