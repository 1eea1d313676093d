"""Where the lake's files are kept: a local folder (the default, <warehouse>/lake) or a prefix in an S3-compatible
bucket, and the few file operations that differ between the two.

A path into a bucket's lake is a `upath.UPath` (fsspec's pathlib), so the lake's paths are built the same way for
both. On a disk a file is written under a temporary name and renamed into place; in a bucket each object is put
whole in one request, which is atomic (readers see the old object or the new one, never a part of one), and
nothing is renamed. Endpoint and credentials come from the AWS SDK's standard chain (AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID, ..., a profile, an instance role), as for releases in a bucket; nothing here names them. DuckDB
reads a bucket's lake through the same fsspec filesystem, registered on its connection (register_lake).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePath

from pipelines.settings import OBJECT_SCHEME

# A path into the lake: a pathlib.Path on a disk, a upath.UPath in a bucket (typed loosely: upath is imported only
# for a lake in a bucket).
LakePath = Path


def lake_root(location: str | os.PathLike) -> LakePath:
    """The lake at a location: a bucket URL (s3://bucket/prefix) as a UPath, a folder as a Path; a path already made
    by this function is returned as it is."""
    if isinstance(location, PurePath) or not isinstance(location, str) and in_bucket(location):
        return location
    text = os.fspath(location)
    if text.startswith(OBJECT_SCHEME):
        from upath import UPath

        # No listing cache: another process (a Dask worker) writes the same prefixes, and each listing must be the
        # bucket's answer now.
        return UPath(text.rstrip("/"), use_listings_cache=False)
    return Path(text)


def in_bucket(path) -> bool:
    """Whether a lake path is an object in a bucket (a UPath) rather than a file on a disk."""
    return not isinstance(path, PurePath)


def real_location(location: str | os.PathLike) -> str:
    """A place as one string however it was given (relative, through a link, a path object): a folder's real path,
    a bucket prefix's URL as it is."""
    text = str(location)
    return text if text.startswith(OBJECT_SCHEME) else os.path.realpath(text)


def exists(path: LakePath) -> bool:
    return path.exists() if in_bucket(path) else os.path.exists(path)


def write_bytes_atomically(data: bytes, path: LakePath) -> None:
    """Writes a whole file so that no reader sees a part of it: an object in one put, a file under a temporary name
    beside path renamed into place."""
    if in_bucket(path):
        path.fs.pipe_file(path.path, data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: said of the file being written, not of its temporary name
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:  # a write that failed leaves no part of a file behind
        tmp.unlink(missing_ok=True)


def file_stamp(path: LakePath) -> str | None:
    """What changes whenever the file is rewritten: its size and mtime on a disk, its size and ETag in a bucket (an
    object's last-modified time is in whole seconds); None when it does not exist."""
    if in_bucket(path):
        try:
            return _object_stamp(path.fs.info(path.path))
        except FileNotFoundError:
            return None
    return disk_stamp(path)


def disk_stamp(path: str | os.PathLike) -> str | None:
    """file_stamp of a file on a disk, its path given as text or a Path."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return f"{status.st_size}:{status.st_mtime_ns}"


def object_stamps(folder: LakePath) -> dict[str, str]:
    """The stamp (file_stamp) of every object under a bucket prefix, by its URL, from one paginated listing."""
    try:
        objects = folder.fs.find(folder.path, detail=True, withdirs=False)
    except FileNotFoundError:
        return {}
    return {f"{OBJECT_SCHEME}{name}": _object_stamp(info) for name, info in objects.items()}


def _object_stamp(info: dict) -> str:
    return f"{info.get('size')}:{str(info.get('ETag', '')).strip(chr(34))}"


def lock_folder(lake: LakePath) -> Path:
    """Where the lake's run locks are: <lake>/.locks on a disk; for a bucket, which has no locks, a folder of this
    machine's temporary folder named after the lake, so that the processes of one machine take turns on a run."""
    if not in_bucket(lake):
        return Path(lake) / ".locks"
    digest = hashlib.sha256(str(lake).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"grpo-lake-locks-{digest}"


def register_lake(con, lake: LakePath) -> None:
    """Lets a DuckDB connection read a bucket's lake through its fsspec filesystem (no DuckDB extension is
    needed); nothing for a lake on a disk."""
    if in_bucket(lake) and not con.filesystem_is_registered(lake.fs.protocol[0]):
        con.register_filesystem(lake.fs)


def lake_problem(location: str) -> str | None:
    """Why the lake cannot be kept at a location, or None; for a bucket, one put of a small probe object, removed
    again."""
    if not location.startswith(OBJECT_SCHEME):
        return None
    try:
        import s3fs  # noqa: F401
    except ImportError:
        return f"the lake {location} is in a bucket, which needs s3fs: pip install 'grpo-warehouse[scale-out]'"
    probe = lake_root(location) / f".probe-{os.getpid()}"
    try:
        write_bytes_atomically(b"", probe)
        probe.unlink(missing_ok=True)
    except FileNotFoundError:
        return f"the lake {location} cannot be written: no such bucket"
    except Exception as exc:  # botocore's errors (no endpoint, refused credentials) are not OSErrors
        return f"the lake {location} cannot be written: {type(exc).__name__}: {exc}"[:300]
    return None
