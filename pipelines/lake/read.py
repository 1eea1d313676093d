"""Reading an epoch file's bytes from a disk or a bucket, only from inside its release and up to the limit."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.release.decode import DecodeError, EpochDoc, decode_parsed
from pipelines.release.discover import OBJECT_SCHEME, EpochFile, resolve_inside


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


def document_bytes(file: EpochFile, max_file_bytes: int, fetched: bytes | Exception | None) -> bytes:
    """The bytes of an epoch file, read now or as fetched (an object's, or the error its fetch met, from
    with_objects_fetched); DecodeError when it is over the limit or cannot be read."""
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


def with_objects_fetched(files: list[EpochFile], max_file_bytes: int) -> Iterator[tuple[EpochFile, object]]:
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
def failures_as_invalid_json() -> Iterator[None]:
    """A parser's or checker's own failure on hostile input is the file's problem: it must not stop the run's
    other files."""
    try:
        yield
    except DecodeError:
        raise
    except Exception as exc:
        raise DecodeError("invalid_json", f"cannot be decoded: {type(exc).__name__}: {exc}"[:300]) from None


def check_document(file: EpochFile, parsed: object, parse_warnings: list[tuple[str, str]]) -> EpochDoc:
    """The document checked key by key and value by value (decode_parsed), and against its file's name."""
    with failures_as_invalid_json():
        doc = decode_parsed(parsed, parse_warnings)
    if doc.epoch != file.epoch_in_name:
        raise DecodeError(
            "epoch_mismatch", f"the file says epoch {doc.epoch} but its name says epoch {file.epoch_in_name}"
        )
    return doc


class NotAnEpochDocument(Exception):
    """A *.json candidate in an epoch folder (OTHER_JSON_LAYOUT) that is not an epoch document: set aside, not
    quarantined."""


OVER_THE_LIMIT = "over max_file_bytes"


# How an epoch document, even a damaged one, is told from a transcript or a config without parsing it: it spells
# this key, which is the epoch document's own.
_DOCUMENT_TOKEN = b'"trajectory_ids"'


def read_candidate(file: EpochFile, max_file_bytes: int, fetched: bytes | Exception | None = None) -> bytes:
    """The bytes of a *.json candidate in an epoch folder; NotAnEpochDocument when it cannot be one.

    A byte search rather than a parse (gigabytes a second): transcripts and per-trajectory files beside an epoch's
    document can be large, and each is read once (the manifest remembers it). A candidate that has the key is
    parsed, and quarantined if damaged; one that lacks another required key is set aside (decode's missing_key).
    """
    if file.size > max_file_bytes:
        raise NotAnEpochDocument(f"{OVER_THE_LIMIT} ({file.size} > {max_file_bytes} bytes); not opened")
    data = document_bytes(file, max_file_bytes, fetched)
    if _DOCUMENT_TOKEN not in data:
        raise NotAnEpochDocument("not an epoch document: no `trajectory_ids` key")
    return data
