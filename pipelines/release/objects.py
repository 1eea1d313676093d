"""Releases on S3-compatible object storage: run folders and epoch documents found in a bucket's object keys.

A release `s3://bucket/prefix` is read as a folder: the first level of keys under the prefix are its run folders,
and a run is listed with one paginated listing of every key under it, laid out as folders, so that discover.list_run
finds the same layouts, duplicates and stray entries as on a disk. An object's stamp is its size, its last-modified
time and a digest of its ETag (every write changes it); a bucket has no folder stamps, so a quiet run is listed again
at each build. Endpoint and credentials come from the AWS SDK's standard chain (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION, a profile, an instance role): nothing here names them.
"""

from __future__ import annotations

import functools
import hashlib
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipelines.release.discover import OBJECT_SCHEME as SCHEME
from pipelines.release.discover import RunFolder, RunListing, SkippedEntry, list_run, shown


@functools.cache
def filesystem():
    """This process's s3fs filesystem, which caches no listing: each listing is the bucket's answer now."""
    import s3fs

    return s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)


def release_name(root: str) -> str:
    return root.rstrip("/").rpartition("/")[2]


def etag_stamp(etag: str) -> int:
    """A positive 63-bit number from an object's ETag, kept where a file's ctime is (EpochFile.ctime_ns)."""
    return int.from_bytes(hashlib.sha256(etag.strip('"').encode()).digest()[:8], "big") >> 1 or 1


@dataclass(frozen=True, slots=True)
class _Status:
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_mode: int
    st_ino: int = 0
    st_dev: int = 0


@dataclass(slots=True)
class _Entry:
    """An object, or a folder its keys imply, with the part of os.DirEntry's interface list_run uses."""

    name: str
    path: str
    status: _Status
    folder: bool

    def is_dir(self) -> bool:
        return self.folder

    def is_file(self) -> bool:
        return not self.folder

    def is_symlink(self) -> bool:
        return False

    def stat(self, follow_symlinks: bool = True) -> _Status:
        return self.status


_FOLDER = _Status(0, 0, 0, stat.S_IFDIR)


class ObjectTree:
    """One run's keys, from one listing, as folders of entries (list_run's tree)."""

    def __init__(self, run_url: str, objects: list[dict]):
        self.folders: dict[str, dict[str, _Entry]] = {run_url: {}}
        for info in objects:
            key = f"{SCHEME}{info['name']}" if not info["name"].startswith(SCHEME) else info["name"]
            if info.get("type") == "directory" or key.endswith("/"):
                continue  # a folder marker some tools write: the folder is implied by its keys anyway
            modified = info.get("LastModified")
            mtime_ns = int(modified.timestamp() * 10**9) if modified is not None else 0
            status = _Status(int(info.get("size") or 0), mtime_ns, etag_stamp(str(info.get("ETag", ""))), stat.S_IFREG)
            self._add(run_url, key, status)

    def _add(self, run_url: str, key: str, status: _Status) -> None:
        parent, _, name = key.rpartition("/")
        self.folders.setdefault(parent, {})[name] = _Entry(name, key, status, False)
        while parent != run_url and parent.startswith(run_url + "/"):
            grand, _, folder_name = parent.rpartition("/")
            self.folders.setdefault(grand, {}).setdefault(folder_name, _Entry(folder_name, parent, _FOLDER, True))
            parent = grand

    def stat(self, path: str) -> _Status:
        return _FOLDER

    def scan(self, path: str) -> list[_Entry]:
        return sorted(self.folders.get(path, {}).values(), key=lambda entry: entry.name)


def list_object_run(run: RunFolder, fs=None) -> RunListing:
    """Every epoch document of a run under a bucket prefix, from one paginated listing of its keys."""
    fs = fs or filesystem()
    listed_at_ns = time.time_ns()
    try:
        objects = fs.find(str(run.path), detail=True, withdirs=False)
    except OSError as exc:
        prefix = str(run.path)[len(str(run.release_root)) + 1 :]
        return RunListing(
            run, [], [SkippedEntry(run.run_id, prefix, f"cannot list run folder: {exc}", True, "unreadable")]
        )
    listing = list_run(run, ObjectTree(str(run.path), list(objects.values())))
    # No folder stamps in a bucket: a run is listed again at each build, never settled from stamps.
    listing.folders = None
    listing.listed_at_ns = listed_at_ns
    listing.changed_at_ns = max((f.mtime_ns for f in listing.epoch_files), default=0)
    return listing


def list_object_release(root: str, fs=None) -> tuple[list[RunFolder], list[SkippedEntry]]:
    """The run folders (first-level prefixes) of a release in a bucket, and its other first-level keys."""
    fs = fs or filesystem()
    root = root.rstrip("/")
    runs, skipped = [], []
    for info in sorted(fs.ls(root, detail=True, refresh=True), key=lambda info: info["name"]):
        name = info["name"].rstrip("/").rpartition("/")[2]
        if name.startswith("."):
            skipped.append(SkippedEntry(None, shown(name), "hidden entry", False))
        elif info.get("type") == "directory":
            runs.append(RunFolder(name, release_name(root), root, f"{root}/{name}"))
        else:
            skipped.append(SkippedEntry(None, shown(name), "not a run folder", False))
    return runs, skipped


def object_release_problem(root: str, fs=None) -> str | None:
    """Why a bucket prefix cannot be a release, or None: no such bucket, nothing under the prefix, unreachable, or
    epoch documents at its top level (a run folder itself)."""
    from pipelines.release.discover import EPOCH_DIR_NAME, EPOCH_FILE_NAME

    try:
        import s3fs  # noqa: F401
    except ImportError:
        return f"release {root} is in a bucket, which needs s3fs: pip install 'grpo-warehouse[scale-out]'"
    try:
        fs = fs or filesystem()
        entries = fs.ls(root.rstrip("/"), detail=True, refresh=True)
    except FileNotFoundError:
        return f"release {root} does not exist (no such bucket, or no key under the prefix)"
    except Exception as exc:  # botocore's errors (no endpoint, refused credentials) are not OSErrors
        return f"release {root} cannot be read: {type(exc).__name__}: {exc}"
    names = [info["name"].rstrip("/").rpartition("/")[2] for info in entries]
    if any(EPOCH_FILE_NAME.match(name) or EPOCH_DIR_NAME.match(name) for name in names):
        parent = root.rstrip("/").rpartition("/")[0]
        return (
            f"release {root} holds epoch documents itself: it is a run folder; give the prefix that holds the "
            f"run folders instead (--release {parent})"
        )
    return None


def read_object(url: str, max_file_bytes: int, fs=None) -> bytes:
    """An object's bytes, at most max_file_bytes + 1 of them read (more means over the limit): one ranged GET."""
    return (fs or filesystem()).cat_file(url, start=0, end=max_file_bytes + 1)


@contextmanager
def loopback_s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on a free loopback port (moto, a test dependency); yields the AWS variables that point a
    process at it, and stops it on leaving (for tests and the benchmark)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        server.stop()
