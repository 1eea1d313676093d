"""Releases on S3-compatible object storage: run folders and epoch documents found in a bucket's object keys.

A release `s3://bucket/prefix` is read as a folder: the first level of keys under the prefix are its run folders,
and a run is listed with one paginated listing of every key under it, laid out as folders (ObjectTree), so that
discover.list_run finds the same layouts, duplicates and stray entries as on a disk. An object's stamp is its size,
its last-modified time and a digest of its ETag (every write changes it); a bucket has no folder stamps, so a quiet
run is listed again at each build. Endpoint and credentials come from the AWS SDK's standard chain
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION, a profile, an
instance role): nothing here names them. The listings that use this tree (discover.list_object_run,
releases.list_object_release) import this module, never the other way round.
"""

from __future__ import annotations

import functools
import hashlib
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipelines.settings import OBJECT_SCHEME as SCHEME


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
    """One run's keys, from one listing, as folders of entries (list_run's tree).

    A bucket lets a key be an object and the prefix of other keys at once (`run/epoch_001` beside
    `run/epoch_001/results.json`), which no folder can: the prefix is kept as the folder, and the object's URL goes to
    `clashes`, to be reported rather than dropped unseen.
    """

    def __init__(self, run_url: str, objects: list[dict]):
        self.folders: dict[str, dict[str, _Entry]] = {run_url: {}}
        self.clashes: list[str] = []
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
        entries = self.folders.setdefault(parent, {})
        if name in entries and entries[name].folder:
            self.clashes.append(key)
        else:
            entries[name] = _Entry(name, key, status, False)
        while parent != run_url and parent.startswith(run_url + "/"):
            grand, _, folder_name = parent.rpartition("/")
            entries = self.folders.setdefault(grand, {})
            if folder_name in entries and not entries[folder_name].folder:
                self.clashes.append(entries[folder_name].path)
            if folder_name not in entries or not entries[folder_name].folder:
                entries[folder_name] = _Entry(folder_name, parent, _FOLDER, True)
            parent = grand

    def stat(self, path: str) -> _Status:
        return _FOLDER

    def scan(self, path: str) -> list[_Entry]:
        return sorted(self.folders.get(path, {}).values(), key=lambda entry: entry.name)


def read_objects(urls: list[str], max_file_bytes: int, fs=None) -> list[bytes | Exception]:
    """Objects' bytes, at most max_file_bytes + 1 of each, their GETs in flight together; an object's error in its
    place."""
    n = len(urls)
    return (fs or filesystem()).cat_ranges(urls, [0] * n, [max_file_bytes + 1] * n, on_error="return")


def read_object(url: str, max_file_bytes: int, fs=None) -> bytes:
    """An object's bytes, at most max_file_bytes + 1 of them read (more means over the limit): one ranged GET."""
    return (fs or filesystem()).cat_file(url, start=0, end=max_file_bytes + 1)


@contextmanager
def loopback_s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on a free loopback port (moto, a test dependency); yields the AWS variables that point a
    process at it, and stops it on leaving (for tests and the benchmark)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
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
