"""The Parquet lake: one folder per table, one partition per run, rewritten only when a run's files change."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import os
import re
import stat
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import polars as pl
from filelock import FileLock

from pipelines.lake_store import (
    LakePath,
    exists,
    file_stamp,
    in_bucket,
    lake_root,
    lock_folder,
    object_stamps,
    real_location,
    write_bytes_atomically,
)
from pipelines.release.decode import DecodeError, EpochDoc, decode_parsed, parse_document
from pipelines.release.discover import (
    DOCUMENT_ORDER,
    LISTING_VERSION,
    OBJECT_SCHEME,
    OTHER_JSON_LAYOUT,
    EpochFile,
    RunFolder,
    RunListing,
    SkippedEntry,
    folders_unchanged,
    list_run,
    resolve_inside,
)
from pipelines.release.flatten import (
    EPOCH_COLUMNS,
    TRAJECTORY_COLUMNS,
    ColumnKinds,
    RunColumns,
    column_order,
    combine,
    drift_notes,
    mtime_column,
    python_values,
    typed_series,
)

LAKE_FORMAT = 4  # 2: the manifest records which extra columns hold JSON text; 3: files named by run_key;
# 4: a per-trajectory extra of objects or lists is in the trajectories (it was an epoch's JSON text)

# A run last written to (the latest ctime of its epoch files and folders) this long before it was listed is quiet:
# its writer is done with it. A quiet run with no quarantined file and no problem entry is not listed again while its
# folders keep the stamps they had then (see unchanged_by_stamps); a full scan lists it anyway. The configuration's
# quiet_seconds sets the wait (0: at once; negative: never, every build lists every file).
DEFAULT_QUIET_SECONDS = 3600
RUN_TABLES = ("epochs", "trajectories", "errors", "files")
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


_NOT_IN_KEY = re.compile(r"[^a-z0-9_]+")
RUN_IDS = "run_ids"  # lake/run_ids/<key>: the exact run id of the files named <key>


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
    return lake_root(lake) / table / run_key(run_id) / "data.parquet"


def manifest_file(lake: LakePath, run_id: str) -> LakePath:
    return lake_root(lake) / "manifests" / f"{run_key(run_id)}.json"


def stamps_file(lake: LakePath, run_id: str) -> LakePath:
    """A quiet run's folder stamps (see unchanged_by_stamps): a file of its own, a fraction of the manifest's size."""
    return lake_root(lake) / "stamps" / f"{run_key(run_id)}.json"


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
    listed = object_stamps(lake / table) if in_bucket(lake) else None
    paths = ((run_id, lake / table / key / "data.parquet") for run_id, key in runs.items())
    stamps = ((run_id, file_stamp(path) if listed is None else listed.get(str(path))) for run_id, path in paths)
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


def read_parquet(path: LakePath) -> pl.DataFrame:
    """A Parquet file read by its exact path: polars otherwise takes `*`, `?` and `[` in a path as a pattern, and
    `key=value` folders as columns. An object in a bucket is fetched whole, in one GET."""
    if in_bucket(path):
        return pl.read_parquet(io.BytesIO(path.read_bytes()))
    return pl.read_parquet(path, glob=False, hive_partitioning=False)


def write_atomically(frame: pl.DataFrame, path: LakePath) -> None:
    """Writes Parquet so that no reader sees a part of it: to a temporary name beside path, then renamed into place;
    in a bucket, put whole (lake_store.write_bytes_atomically)."""
    # zstd level 1 rather than polars' default 3, and no column statistics (a run's partition is one row group,
    # read whole): a run's trajectories written in 8 ms instead of 17 ms, to a file of about the same size.
    options = {"statistics": False, "compression": "zstd", "compression_level": 1}
    if in_bucket(path):
        buffer = io.BytesIO()
        frame.write_parquet(buffer, **options)
        write_bytes_atomically(buffer.getvalue(), path)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.write_parquet(tmp, **options)
    os.replace(tmp, path)


def write_text_atomically(text: str, path: LakePath) -> None:
    write_bytes_atomically(text.encode(), path)


@dataclass
class RunIngestResult:
    run_id: str
    changed: bool
    files_parsed: int
    files_quarantined: int  # quarantined files in the run now, parsed this time or earlier
    epochs: int  # epoch documents loaded in the lake for this run
    trajectories: int
    seconds: float


@dataclass
class _Outcome:
    """What became of one epoch file, as remembered in the manifest between builds."""

    size: int
    mtime_ns: int
    status: str
    reason: str | None
    epoch: int | None
    # Its change time: a same-size rewrite whose mtime was set back (touch -r, cp -p) cannot set it back. 0: unknown
    # (a manifest written before it was kept), not compared.
    ctime_ns: int = 0


def read_manifest(lake: LakePath, run_id: str) -> dict:
    """A run's manifest as the lake last wrote it; {} when there is none, or it is unreadable or of another format."""
    path = manifest_file(lake, run_id)
    try:
        manifest = orjson.loads(path.read_bytes())  # orjson wrote it; read every build, for every run
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) and manifest.get("format") == LAKE_FORMAT else {}


def _read_partition(lake: LakePath, table: str, run_id: str) -> pl.DataFrame | None:
    path = partition_file(lake, table, run_id)
    return read_parquet(path) if path.exists() else None


def _keep_rows(frame: pl.DataFrame | None, drop_paths: set[str]) -> pl.DataFrame | None:
    if frame is None:
        return None
    return frame.filter(~pl.col("source_path").is_in(list(drop_paths)))


def _concat(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    present = [f for f in frames if f is not None and f.width > 0]
    return pl.concat(present, how="diagonal_relaxed") if present else pl.DataFrame()


def _release_root(file: EpochFile) -> Path:
    return file.path.parents[len(Path(file.source_path).parts) - 1]


_REAL_ROOTS: dict[str, str] = {}


def _real_path_inside(file: EpochFile) -> str:
    """resolve_inside(file.path, its release root), with the root resolved once per process instead of per file.

    One realpath per file on the usual path; anything unusual (outside, broken, a loop) goes through
    resolve_inside itself, so its errors and messages are exactly resolve_inside's.
    """
    root = file.file_path[: -len(file.source_path) - 1]
    real_root = _REAL_ROOTS.get(root)
    if real_root is None:
        real_root = _REAL_ROOTS[root] = os.path.realpath(root)
    try:
        real = os.path.realpath(file.file_path, strict=True)
    except OSError:
        real = None
    if real is not None and real.startswith(real_root + os.sep) and file.file_path.endswith(file.source_path):
        return real
    return str(resolve_inside(file.path, _release_root(file)))


def _open_listed(file: EpochFile) -> tuple[int, os.stat_result] | None:
    """The file opened without a real-path check when it is the very file the listing saw, and its status; else
    None.

    The listing checked that file's real path. Opened here without following a last link, and known again by
    its device and inode, it is that same file, whatever path led to it, so no component is resolved again (a
    realpath per file costs about as much as reading it). A link, or anything swapped in since, gets None.
    """
    if not file.inode:
        return None
    try:
        fd = os.open(file.file_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    status = os.fstat(fd)
    if (status.st_dev, status.st_ino) == (file.device, file.inode) and stat.S_ISREG(status.st_mode):
        return fd, status
    os.close(fd)
    return None


def read_epoch_file(file: EpochFile, max_file_bytes: int) -> bytes:
    """The bytes of an epoch file, opened only when its real path is inside its release; at most the limit read."""
    opened = _open_listed(file)
    if opened is None:
        try:
            real = _real_path_inside(file)
            # O_NOFOLLOW: the real path has no link left to follow, so a link swapped in since is refused;
            # O_NONBLOCK: a FIFO behind a link does not hang the build.
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise DecodeError("unreadable", f"cannot open the file: {exc.strerror or exc}") from None
        opened = fd, None
    fd, status = opened
    try:
        if status is None:
            status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise DecodeError("not_a_file", "not a regular file (a FIFO or a device behind a link?)")
        chunks, size = [], 0
        # Reads of about the file's size: os.read allocates the whole request, max_file_bytes per call otherwise.
        block = min(max(status.st_size + 1, 1 << 16), max_file_bytes + 1)
        while chunk := os.read(fd, min(block, max_file_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_file_bytes:
                raise DecodeError("file_too_large", f"over the limit of {max_file_bytes} bytes (max_file_bytes)")
            if len(chunk) < block and size >= status.st_size:
                break  # a short read at or past the size fstat gave: the end of the file, no further read needed
    except OSError as exc:
        raise DecodeError("unreadable", f"cannot read the file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)


def _document_bytes(file: EpochFile, max_file_bytes: int, fetched: bytes | Exception | None) -> bytes:
    """The bytes of an epoch file, read now or as fetched (an object's, or the error its fetch met, from
    _with_objects_fetched); DecodeError when it is over the limit or cannot be read."""
    return _read_file(file, max_file_bytes) if fetched is None else _read_object(file, max_file_bytes, fetched)


def _read_file(file: EpochFile, max_file_bytes: int) -> bytes:
    """The bytes of an epoch file; DecodeError when it is over the limit or cannot be read."""
    if file.size > max_file_bytes:
        raise DecodeError("file_too_large", f"{file.size} bytes, over the limit of {max_file_bytes} (max_file_bytes)")
    if file.file_path.startswith(OBJECT_SCHEME):
        return _read_object(file, max_file_bytes)
    return read_epoch_file(file, max_file_bytes)


# Objects fetched at once, up to this many or this many bytes: a bucket answers each GET after a round trip, and
# many in flight hide it.
FETCH_OBJECTS, FETCH_BYTES = 32, 64 * 2**20


def _with_objects_fetched(files: list[EpochFile], max_file_bytes: int) -> Iterator[tuple[EpochFile, object]]:
    """Each file, with its bytes (or the error met) when it is an object in a bucket, fetched in batches of
    concurrent GETs; None for a file on a disk, read when parsed."""
    batch: list[EpochFile] = []

    def fetch() -> Iterator[tuple[EpochFile, object]]:
        from pipelines.release.objects import read_objects

        yield from zip(batch, read_objects([f.file_path for f in batch], max_file_bytes), strict=True)
        batch.clear()

    for file in files:
        if not file.file_path.startswith(OBJECT_SCHEME) or file.size > max_file_bytes:
            yield file, None
            continue
        if batch and (len(batch) == FETCH_OBJECTS or sum(f.size for f in batch) + file.size > FETCH_BYTES):
            yield from fetch()
        batch.append(file)
    if batch:
        yield from fetch()


def _read_object(file: EpochFile, max_file_bytes: int, fetched: bytes | Exception | None = None) -> bytes:
    """The bytes of an epoch document in a bucket; DecodeError when it is over the limit or cannot be read."""
    from pipelines.release.objects import read_object

    try:
        if isinstance(fetched, Exception):
            raise fetched
        data = read_object(file.file_path, max_file_bytes) if fetched is None else fetched
    except Exception as exc:  # botocore's errors (gone, access denied) are not all OSErrors
        raise DecodeError("unreadable", f"cannot read the object: {type(exc).__name__}: {exc}"[:300]) from None
    if len(data) > max_file_bytes:
        raise DecodeError("file_too_large", f"over the limit of {max_file_bytes} bytes (max_file_bytes)")
    return data


@contextmanager
def _failures_as_invalid_json() -> Iterator[None]:
    """A parser's or checker's own failure on hostile input is the file's problem: it must not stop the run's
    other files."""
    try:
        yield
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError("invalid_json", f"cannot be decoded: {type(exc).__name__}: {exc}"[:300]) from None


def _check_document(file: EpochFile, parsed: object, parse_warnings: list[tuple[str, str]]) -> EpochDoc:
    """The document checked key by key and value by value (decode_parsed), and against its file's name."""
    with _failures_as_invalid_json():
        doc = decode_parsed(parsed, parse_warnings)
    if doc.epoch != file.epoch_in_name:
        raise DecodeError(
            "epoch_mismatch", f"the file says epoch {doc.epoch} but its name says epoch {file.epoch_in_name}"
        )
    return doc


def _worth_retrying(outcome: dict, file: EpochFile, max_file_bytes: int) -> bool:
    """A quarantined or set-aside file whose problem may have gone without its size or mtime changing (chmod, a new
    limit)."""
    if outcome["status"] == "skipped":  # a candidate document set aside unread, over the limit then
        return outcome["reason"].startswith(_OVER_THE_LIMIT) and file.size <= max_file_bytes
    if outcome["status"] != "quarantined":
        return False
    if outcome["reason"] == "unreadable":  # an object's access is the store's to say: asked again, one GET
        return file.file_path.startswith(OBJECT_SCHEME) or os.access(file.file_path, os.R_OK)
    return outcome["reason"] == "file_too_large" and file.size <= max_file_bytes


class NotAnEpochDocument(Exception):
    """A *.json candidate in an epoch folder (OTHER_JSON_LAYOUT) that is not an epoch document: set aside, not
    quarantined."""


_OVER_THE_LIMIT = "over max_file_bytes"
# How an epoch document, even a damaged one, is told from a transcript or a config without parsing it: it spells
# this key, which is the epoch document's own.
_DOCUMENT_TOKEN = b'"trajectory_ids"'


def _read_candidate(file: EpochFile, max_file_bytes: int, fetched: bytes | Exception | None = None) -> bytes:
    """The bytes of a *.json candidate in an epoch folder; NotAnEpochDocument when it cannot be one.

    A byte search rather than a parse (gigabytes a second): transcripts and per-trajectory files beside an epoch's
    document can be large, and each is read once (the manifest remembers it). A candidate that has the key is
    parsed, and quarantined if damaged; one that lacks another required key is set aside (decode's missing_key).
    """
    if file.size > max_file_bytes:
        raise NotAnEpochDocument(f"{_OVER_THE_LIMIT} ({file.size} > {max_file_bytes} bytes); not opened")
    data = _document_bytes(file, max_file_bytes, fetched)
    if _DOCUMENT_TOKEN not in data:
        raise NotAnEpochDocument("not an epoch document: no `trajectory_ids` key")
    return data


def _folders_without_document(current: dict[str, EpochFile], outcomes: dict[str, dict]) -> dict[str, list[str]]:
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


def _missing_document_errors(run_id: str, current: dict[str, EpochFile], outcomes: dict[str, dict]) -> pl.DataFrame:
    """One error per epoch folder whose *.json files held no epoch document, naming each file and why."""
    rows = []
    for folder, paths in _folders_without_document(current, outcomes).items():
        seen = "; ".join(f"{path.rpartition('/')[2]}: {outcomes[path]['reason']}" for path in paths[:5])
        more = f"; and {len(paths) - 5} more" if len(paths) > 5 else ""
        rows.append(
            _error(
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


def _source_path(entry: SkippedEntry) -> str:
    return entry.source_path


def _partitions_present(lake: LakePath, run_id: str) -> bool:
    """Whether the partitions every ingest of a run writes (errors, files; a run may have no epochs) are there."""
    return all(exists(partition_file(lake, table, run_id)) for table in ("errors", "files"))


def _stamps_record(listing: RunListing, quarantined: int, rows: dict, quiet_seconds: int) -> dict | None:
    """What a later build needs to settle the run without listing it, or None when it must list it.

    Only a quiet run qualifies, whose folders were all stamped (no links), and with nothing to look at again: a
    quarantined file may be fixed in place, and a problem entry (an unreadable file, say) may heal without its
    folder changing.
    """
    if listing.folders is None or quarantined or any(s.is_problem and s.severity == "error" for s in listing.skipped):
        return None
    if quiet_seconds < 0 or listing.listed_at_ns - listing.changed_at_ns < quiet_seconds * 10**9:
        return None
    return {
        "format": LAKE_FORMAT,
        "listing": LISTING_VERSION,
        "release": listing.run.release,
        "rows": rows,
        "listed_at_ns": listing.listed_at_ns,
        "changed_at_ns": listing.changed_at_ns,
        "folders": {path: list(stamp) for path, stamp in listing.folders.items()},
    }


def _read_stamps(lake: LakePath, run_id: str) -> dict | None:
    try:
        record = orjson.loads(stamps_file(lake, run_id).read_bytes())
    except (OSError, ValueError):
        return None
    if isinstance(record, dict) and record.get("format") == LAKE_FORMAT and record.get("listing") == LISTING_VERSION:
        return record
    return None


def _write_stamps(lake: LakePath, run_id: str, record: dict | None) -> None:
    """Writes a run's stamps record, or removes it (None). Written after the manifest, removed before a rewrite."""
    if record is None:
        stamps_file(lake, run_id).unlink(missing_ok=True)
    else:
        write_text_atomically(orjson.dumps(record).decode(), stamps_file(lake, run_id))


def unchanged_by_stamps(run: RunFolder, lake: LakePath) -> RunIngestResult | None:
    """The result of a run settled without listing it, from its folder stamps; None when it must be listed: it
    was not quiet when last listed, or a folder of it has changed since (a file added, removed or renamed; the
    folder replaced). A file rewritten in place, which changes no folder, is found by a full scan."""
    started = time.perf_counter()
    lake = lake_root(lake)
    record = _read_stamps(lake, run.run_id)
    if record is None or record.get("release") != run.release:
        return None
    if not folders_unchanged(run.release_root, record["folders"]):
        return None
    if not _partitions_present(lake, run.run_id):
        return None
    return _result(run.run_id, False, 0, 0, lake, started, rows=record["rows"])


@dataclass
class RunWork:
    """What the lake lacks of one listed run: what ingest_run would parse, drop and inventory again."""

    listing: RunListing
    changed: list[EpochFile]  # new or changed since parsed (size or mtime), or quarantined and worth retrying
    removed: list[str]  # source paths the manifest holds that the folder no longer has
    inventory_changed: bool  # the non-epoch entries differ from the manifest's, or a partition is missing
    in_lake: bool = True  # the lake has a manifest of the run (False: everything of it is new)

    @property
    def pending(self) -> bool:
        return bool(self.changed or self.removed or self.inventory_changed)


def _compare(listing: RunListing, lake: LakePath, max_file_bytes: int, previous: dict) -> RunWork:
    """A run's listing against its manifest (previous, as read_manifest returns it); stats only, parses nothing."""
    # The manifest's entries are compared as they were read: a no-change build does this for every file of every
    # run, and builds no object per file.
    files: dict[str, dict] = previous.get("files", {})
    changed = [
        f
        for f in listing.epoch_files
        if (o := files.get(f.source_path)) is None
        or o["size"] != f.size
        or o["mtime_ns"] != f.mtime_ns
        or o.get("ctime_ns", 0) not in (0, f.ctime_ns)
        or o["status"] != "loaded"
        and _worth_retrying(o, f, max_file_bytes)
    ]
    removed = sorted(files.keys() - {f.source_path for f in listing.epoch_files})
    skipped = [vars(s) for s in sorted(listing.skipped, key=_source_path)]
    inventory_changed = previous.get("skipped") != skipped or not _partitions_present(lake, listing.run.run_id)
    return RunWork(listing, changed, removed, inventory_changed, in_lake=bool(previous))


def _settle_unchanged(listing: RunListing, lake: LakePath, previous: dict, quiet_seconds: int) -> int:
    """Records the stamps of a run found unchanged if it became quiet (or removes them if it became busy); returns
    its count of quarantined files. Called holding the run's lock."""
    run_id = listing.run.run_id
    files: dict[str, dict] = previous.get("files", {})
    quarantined = sum(o["status"] == "quarantined" for o in files.values())
    # A folder of set-aside candidates, like a quarantined file, may be fixed in place.
    current = {f.source_path: f for f in listing.epoch_files}
    unsettled = quarantined + len(_folders_without_document(current, files))
    record = _stamps_record(listing, unsettled, previous.get("rows"), quiet_seconds)
    old = _read_stamps(lake, run_id)
    if (old is None) != (record is None) or record and old["folders"] != record["folders"]:
        _write_stamps(lake, run_id, record)  # the run became quiet, or busy, or a folder changed
    return quarantined


def ingest_run(
    listing: RunListing,
    lake: LakePath,
    max_file_bytes: int,
    only_if_unchanged: bool = False,
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
) -> RunIngestResult | None:
    """Brings one run's lake partitions up to date with its folder, parsing only new or changed files.

    With only_if_unchanged, returns None instead of parsing when the run has something to parse.
    """
    started = time.perf_counter()
    run_id = listing.run.run_id
    lake = lake_root(lake)
    with run_lock(lake, run_id):
        previous = read_manifest(lake, run_id)
        work = _compare(listing, lake, max_file_bytes, previous)
        if not work.pending:
            quarantined = _settle_unchanged(listing, lake, previous, quiet_seconds)
            return _result(run_id, False, 0, quarantined, lake, started, rows=previous.get("rows"))
        if only_if_unchanged:
            return None
        # Not to be settled by its stamps until this rewrite is done: a crash midway must not be hidden.
        _write_stamps(lake, run_id, None)
        register_run(lake, run_id)
        parsed = _parse_changes(work, lake, max_file_bytes, previous)
        (epochs, epoch_kinds), (trajectories, trajectory_kinds) = parsed.merged["epochs"], parsed.merged["trajectories"]
        notes = drift_notes(epoch_kinds) + drift_notes(trajectory_kinds)
        errors = _run_errors(listing, lake, parsed, notes, epochs, trajectories)
        epochs, trajectories = _in_order(epochs, trajectories)
        kinds = {"epochs": epoch_kinds, "trajectories": trajectory_kinds}
        quarantined = _write_run(listing, lake, parsed.outcomes, epochs, trajectories, kinds, errors, quiet_seconds)
        return _result(run_id, True, parsed.n_parsed, quarantined, lake, started, epochs, trajectories)


@dataclass
class _Parsed:
    """A run's rows after its new and changed files are parsed, and what became of each of its files."""

    merged: dict[str, tuple[pl.DataFrame, ColumnKinds]]  # per table: its rows and its columns kept as JSON text
    outcomes: dict[str, _Outcome]  # per source path still in the folder
    new_errors: list[dict]  # the parsed files' error and warning rows
    stale: set[str]  # the source paths whose stored rows and errors were replaced (or are gone)
    n_parsed: int


def _parse_changes(work: RunWork, lake: LakePath, max_file_bytes: int, previous: dict) -> _Parsed:
    """Parses a run's new and changed files and merges them with its stored rows. When a file was rewritten or
    removed, and the merged columns may not be those a first ingest would make (a key only it had, a type only it
    brought: _may_differ_from_a_fresh_parse), the run is parsed again whole, as a first ingest."""
    listing = work.listing
    run_id = listing.run.run_id
    files: dict[str, dict] = previous.get("files", {})
    current = {f.source_path for f in listing.epoch_files}
    changed, removed = work.changed, set(work.removed)
    known = {k: _Outcome(**v) for k, v in files.items()}
    replaced = bool(removed) or any(f.source_path in files for f in changed)
    n_parsed = 0
    for whole in (False, True):
        parse = listing.epoch_files if whole else changed
        n_parsed += len(parse)
        stale = current | removed if whole else {f.source_path for f in changed} | removed
        outcomes = {path: o for path, o in known.items() if path in current and path not in stale}
        columns = RunColumns(run_id)
        parse_outcomes, new_errors = _parse_files(run_id, parse, columns, max_file_bytes)
        outcomes.update(parse_outcomes)
        new_epochs, new_trajectories, new_kinds = columns.frames()
        old_kinds = {} if whole else previous.get("json_columns", {})
        merged = {}
        for table, new_frame, schema in (
            ("epochs", new_epochs, EPOCH_COLUMNS),
            ("trajectories", new_trajectories, TRAJECTORY_COLUMNS),
        ):
            old_frame = None if whole else _keep_rows(_read_partition(lake, table, run_id), stale)
            old = (old_frame if old_frame is not None else pl.DataFrame(), old_kinds.get(table, {}))
            merged[table] = combine([old, (new_frame, new_kinds[table])], schema)
        if (
            whole
            or not replaced
            or not any(
                _may_differ_from_a_fresh_parse(*merged[table], schema)
                for table, schema in (("epochs", EPOCH_COLUMNS), ("trajectories", TRAJECTORY_COLUMNS))
            )
        ):
            break
    return _Parsed(merged, outcomes, new_errors, stale, n_parsed)


def _parse_files(
    run_id: str, files: list[EpochFile], columns: RunColumns, max_file_bytes: int
) -> tuple[dict[str, _Outcome], list[dict]]:
    """Adds each file's rows to columns; returns what became of each file and the error and warning rows.

    Most documents of a run share one shape. The fast path takes them: from their bytes, decoded and checked by the
    shape's typed decoder (RunColumns.add_bytes), or else parsed (add_parsed). The others are checked one by one
    (decode_parsed)."""
    outcomes: dict[str, _Outcome] = {}
    errors: list[dict] = []

    def outcome(file: EpochFile, status: str, reason: str | None, epoch: int | None) -> None:
        outcomes[file.source_path] = _Outcome(file.size, file.mtime_ns, status, reason, epoch, ctime_ns=file.ctime_ns)

    for file, fetched in _with_objects_fetched(files, max_file_bytes):
        candidate = file.layout == OTHER_JSON_LAYOUT
        try:
            data = (
                _read_candidate(file, max_file_bytes, fetched)
                if candidate
                else _document_bytes(file, max_file_bytes, fetched)
            )
            fast = columns.add_bytes(file, data)
            if not fast:
                with _failures_as_invalid_json():
                    parsed, parse_warnings = parse_document(data)
                fast = not parse_warnings and columns.add_parsed(file, parsed)
            if fast:
                outcome(file, "loaded", None, file.epoch_in_name)
                continue
            doc = _check_document(file, parsed, parse_warnings)
        except NotAnEpochDocument as exc:
            outcome(file, "skipped", str(exc), None)
            continue
        except DecodeError as exc:
            if candidate and exc.error_kind in ("not_an_object", "missing_key"):
                outcome(file, "skipped", f"not an epoch document: {exc.message}", None)
            else:
                action = "quarantined: not loaded"
                errors.append(
                    _error(run_id, file.source_path, file.epoch_in_name, exc.error_kind, "error", exc.message, action)
                )
                outcome(file, "quarantined", exc.error_kind, file.epoch_in_name)
            continue
        for kind, message in doc.warnings:
            errors.append(_error(run_id, file.source_path, doc.epoch, kind, "warning", message, "loaded"))
        outcome(file, "loaded_with_warnings" if doc.warnings else "loaded", None, doc.epoch)
        columns.add(file, doc)
    return outcomes, errors


def _run_errors(
    listing: RunListing,
    lake: LakePath,
    parsed: _Parsed,
    notes: list[str],
    epochs: pl.DataFrame,
    trajectories: pl.DataFrame,
) -> pl.DataFrame:
    """The run's errors partition: the stored rows of files not parsed again, the parsed files' rows, and the
    inventory problems, type-drift notes and length mismatches, which are recomputed on every change."""
    run_id = listing.run.run_id
    current = {f.source_path: f for f in listing.epoch_files}
    parse_errors = _keep_rows(_read_partition(lake, "errors", run_id), parsed.stale)
    if parse_errors is not None:
        parse_errors = parse_errors.filter(pl.col("source_path").is_in(list(current)))
    errors = _concat(
        [
            parse_errors,
            pl.DataFrame(parsed.new_errors, schema=ERROR_COLUMNS),
            _inventory_errors(run_id, listing.skipped),
            _missing_document_errors(run_id, current, {path: vars(o) for path, o in parsed.outcomes.items()}),
        ]
    )
    errors = errors.filter(~pl.col("error_kind").is_in(["type_drift", "extra_length_mismatch"]))
    drift = [
        _error(run_id, f"{run_id}/", None, "type_drift", "warning", note, "loaded: every value kept as JSON text")
        for note in notes
    ]
    return _concat(
        [errors, pl.DataFrame(drift + _length_mismatches(run_id, epochs, trajectories), schema=ERROR_COLUMNS)]
    )


def _write_run(
    listing: RunListing,
    lake: LakePath,
    outcomes: dict[str, _Outcome],
    epochs: pl.DataFrame,
    trajectories: pl.DataFrame,
    kinds: dict[str, ColumnKinds],
    errors: pl.DataFrame,
    quiet_seconds: int,
) -> int:
    """Writes a run's partitions, then its manifest, then its stamps; returns its count of quarantined files."""
    run_id = listing.run.run_id
    current = {f.source_path: f for f in listing.epoch_files}
    for table, frame in (("epochs", epochs), ("trajectories", trajectories)):
        if frame.height:
            write_atomically(frame, partition_file(lake, table, run_id))
        else:
            partition_file(lake, table, run_id).unlink(missing_ok=True)
    write_atomically(
        errors if errors.width else pl.DataFrame(schema=ERROR_COLUMNS), partition_file(lake, "errors", run_id)
    )
    write_atomically(_inventory(run_id, current, outcomes, listing.skipped), partition_file(lake, "files", run_id))
    # The manifest goes last, then the stamps: a crash before it only means the same files are parsed again.
    quarantined = sum(o.status == "quarantined" for o in outcomes.values())
    unsettled = quarantined + len(_folders_without_document(current, {p: vars(o) for p, o in outcomes.items()}))
    manifest = {
        "format": LAKE_FORMAT,
        "run_id": run_id,
        "release": listing.run.release,
        # Which folder of that name it came from: another folder of the same name is not where its runs went.
        "release_root": real_location(listing.run.release_root),
        "files": {path: vars(o) for path, o in sorted(outcomes.items())},
        "skipped": [dict(vars(s)) for s in sorted(listing.skipped, key=_source_path)],
        "json_columns": kinds,
        # Row counts, so that a build with nothing to do opens no Parquet file at all.
        "rows": {"epochs": epochs.height, "trajectories": trajectories.height},
    }
    # orjson: the manifest lists every file of the run; the stdlib's indenting encoder is pure Python.
    write_text_atomically(orjson.dumps(manifest, option=orjson.OPT_INDENT_2).decode(), manifest_file(lake, run_id))
    _write_stamps(lake, run_id, _stamps_record(listing, unsettled, manifest["rows"], quiet_seconds))
    return quarantined


def _length_mismatches(run_id: str, epochs: pl.DataFrame, trajectories: pl.DataFrame) -> list[dict]:
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
                    _error(
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


def _may_differ_from_a_fresh_parse(frame: pl.DataFrame, kinds: ColumnKinds, schema: dict) -> bool:
    """Whether a run's merged rows, after a file was rewritten or removed, may have other columns than a first
    ingest of its files would give: an extra column left without a value (the key may be gone with that file), a
    Float64 one left with whole numbers only (integers beside a float that only file had), or one kept as JSON
    text whose values are no longer of the types recorded. Then the run is parsed again whole."""
    for name in frame.columns:
        if name in schema:
            continue
        column = frame[name]
        values = column.drop_nulls()
        if not values.len():
            return True
        if name in kinds:  # what a first ingest would make of the values left
            if typed_series(name, python_values(values, kinds[name]))[1] != kinds[name]:
                return True
        elif column.dtype == pl.Float64 and (values.is_finite() & (values == values.floor())).all():
            return True
    return False


def _in_order(epochs: pl.DataFrame, trajectories: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both tables' rows in the lake's order, (epoch, source_path[, traj_index]), and their columns in its order.

    Rows usually arrive in it (files listed by name, one document per epoch), and are then not sorted: with one
    document per epoch, a document's trajectories were added together and in order, so they are in order when
    their epochs are.
    """
    epochs, trajectories = _in_column_order(epochs, EPOCH_COLUMNS), _in_column_order(trajectories, TRAJECTORY_COLUMNS)
    if not epochs.height:
        return epochs, trajectories
    one_per_epoch = epochs["epoch"].n_unique() == epochs.height
    if not (one_per_epoch and epochs["epoch"].is_sorted()):
        epochs = epochs.sort("epoch", "source_path", maintain_order=True)
    if trajectories.height and not (one_per_epoch and trajectories["epoch"].is_sorted()):
        trajectories = trajectories.sort("epoch", "source_path", "traj_index", maintain_order=True)
    return epochs, trajectories


def _in_column_order(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """The frame's columns in the lake's order (column_order): the same run's partition is the same file whether it
    was ingested at once or file by file."""
    ordered = column_order(frame.columns, schema)
    return frame if ordered == frame.columns else frame.select(ordered)


def _error(run_id, source_path, epoch, kind, severity, message, action) -> dict:
    return {
        "run_id": run_id,
        "source_path": source_path,
        "epoch": epoch,
        "error_kind": kind,
        "severity": severity,
        "message": message,
        "action": action,
    }


def _inventory_errors(run_id: str, skipped: list[SkippedEntry]) -> pl.DataFrame:
    rows = [
        _error(
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


def _inventory(
    run_id: str, current: dict[str, EpochFile], outcomes: dict[str, _Outcome], skipped: list[SkippedEntry]
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


def _result(
    run_id,
    changed,
    parsed,
    quarantined: int,
    lake: LakePath,
    started: float,
    epochs: pl.DataFrame | None = None,
    trajectories: pl.DataFrame | None = None,
    rows: dict | None = None,
) -> RunIngestResult:
    rows = rows or {}

    def count(table: str, frame: pl.DataFrame | None) -> int:
        if frame is not None:
            return frame.height
        return rows[table] if table in rows else count_rows(partition_file(lake, table, run_id))

    n_epochs, n_traj = count("epochs", epochs), count("trajectories", trajectories)
    return RunIngestResult(
        run_id, changed, parsed, quarantined, n_epochs, n_traj, round(time.perf_counter() - started, 3)
    )


def count_rows(path: LakePath) -> int:
    """A lake file's rows, from its Parquet footer; 0 when there is no file."""
    if not exists(path):
        return 0
    if in_bucket(path):
        import pyarrow.parquet as pq  # here: its import costs every ingest process 0.1 s

        return pq.read_metadata(io.BytesIO(path.read_bytes())).num_rows
    return pl.scan_parquet(path, glob=False, hive_partitioning=False).select(pl.len()).collect().item()


def parquet_schema(path: LakePath) -> pl.Schema:
    """A lake file's columns and their types, from its Parquet footer."""
    if in_bucket(path):
        return pl.read_parquet_schema(io.BytesIO(path.read_bytes()))
    return pl.scan_parquet(path, glob=False, hive_partitioning=False).collect_schema()


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


def ingest_run_folder(
    run: RunFolder, lake: LakePath, max_file_bytes: int, quiet_seconds: int = DEFAULT_QUIET_SECONDS
) -> RunIngestResult:
    return ingest_run(list_run(run), lake, max_file_bytes, quiet_seconds=quiet_seconds)


# A run to ingest: (ingest_run, its listing), or (ingest_run_folder, the run) for a run new to the lake.
_Job = tuple[Callable[..., RunIngestResult], RunListing | RunFolder]


def _settle_or_job(
    run: RunFolder, lake: LakePath, max_file_bytes: int, workers: int, full_scan: bool, quiet_seconds: int
) -> RunIngestResult | _Job:
    """A run's result when this process can settle it, else its job for the pool.

    A run the lake already holds is listed here, once, and settled here from its manifest when it has nothing
    to parse: a pool of spawned workers (each importing polars and the caller's main module) costs more than
    checking hundreds of unchanged runs. A quiet run whose folders have not changed is not even listed
    (unchanged_by_stamps), unless full_scan. A run new to the lake is listed by the worker that ingests it, so
    that this process does not list a whole new release while the workers wait. With one worker, every run is
    ingested here."""
    if not full_scan and (result := unchanged_by_stamps(run, lake)) is not None:
        return result
    if workers > 1 and not manifest_file(lake, run.run_id).exists():
        return (ingest_run_folder, run)
    listing = list_run(run)
    if workers <= 1:
        return ingest_run(listing, lake, max_file_bytes, quiet_seconds=quiet_seconds)
    if (result := ingest_run(listing, lake, max_file_bytes, True, quiet_seconds)) is not None:
        return result
    return (ingest_run, listing)


def ingest_runs(
    runs: list[RunFolder],
    lake: LakePath,
    max_file_bytes: int,
    workers: int = 0,
    progress: Callable[[RunIngestResult, int, int], None] | None = None,
    full_scan: bool = False,
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
) -> list[RunIngestResult]:
    """Ingests runs independently, in parallel processes when several have files to parse; reports each as it finishes.

    Runs this process cannot settle (_settle_or_job) go to the pool as they are found, or are ingested here when
    there is only one (one new epoch file).
    """
    lake = lake_root(lake)
    workers = min(workers or os.cpu_count() or 1, len(runs))
    results: list[RunIngestResult] = []

    def done(result: RunIngestResult) -> None:
        results.append(result)
        if progress:
            progress(result, len(results), len(runs))

    waiting: _Job | None = None  # the first run to parse, held until a second shows that a pool pays
    pool: ProcessPoolExecutor | None = None
    futures: set = set()

    def submit(job: _Job) -> None:
        # A few runs ahead of the workers, no more: a listing holds an object per file, and all of a large
        # release's listings queued at once would hold the whole release's file list in this process.
        while len(futures) >= 2 * workers:
            finished, _ = wait(futures, return_when=FIRST_COMPLETED)
            for future in finished:
                futures.remove(future)
                done(future.result())
        futures.add(pool.submit(job[0], job[1], lake, max_file_bytes, quiet_seconds=quiet_seconds))

    try:
        for run in runs:
            job = _settle_or_job(run, lake, max_file_bytes, workers, full_scan, quiet_seconds)
            if isinstance(job, RunIngestResult):
                done(job)
                continue
            if waiting is None and pool is None:
                waiting = job
                continue
            if pool is None:
                # spawn, not fork: the caller (a Dagster run) has threads; polars' thread pool does not survive fork
                pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
                submit(waiting)
                waiting = None
            submit(job)
        if waiting is not None:
            done(waiting[0](waiting[1], lake, max_file_bytes, quiet_seconds=quiet_seconds))
        for future in as_completed(futures):
            done(future.result())
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return sorted(results, key=lambda r: r.run_id)


@dataclass
class RunSelection:
    """Which run partitions of the lake have work, from one look at the releases (select_runs)."""

    work: dict[str, RunWork]  # every run listed, with what the lake lacks of it (perhaps nothing)
    quiet: list[str]  # runs settled from their folder stamps, not listed
    gone: list[str]  # runs the lake holds whose folders are in no release

    @property
    def stale(self) -> list[str]:
        """The run ids whose lake partitions are out of date: something to parse, drop or inventory, or gone."""
        return sorted([run_id for run_id, work in self.work.items() if work.pending] + self.gone)


def select_runs(
    runs: Iterable[RunFolder],
    lake: LakePath,
    max_file_bytes: int,
    full_scan: bool = False,
    must_list: Collection[str] = (),
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
) -> RunSelection:
    """Compares every run folder with the lake's manifests: the one decision of which run partitions have work,
    for a build and for the release sensor alike. Parses nothing. A run unchanged_by_stamps settles is not listed,
    unless full_scan or its id is in must_list; a listed run with nothing to do has its stamps brought up to date."""
    lake = lake_root(lake)
    work: dict[str, RunWork] = {}
    quiet: list[str] = []
    for run in runs:
        if not full_scan and run.run_id not in must_list and unchanged_by_stamps(run, lake) is not None:
            quiet.append(run.run_id)
            continue
        listing = list_run(run)
        with run_lock(lake, run.run_id):
            previous = read_manifest(lake, run.run_id)
            work[run.run_id] = _compare(listing, lake, max_file_bytes, previous)
            if not work[run.run_id].pending:
                _settle_unchanged(listing, lake, previous, quiet_seconds)
    present = set(work) | set(quiet)
    return RunSelection(work, sorted(quiet), gone_runs(lake, present))
