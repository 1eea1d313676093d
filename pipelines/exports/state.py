"""What each export was last written from, so that an export whose inputs are unchanged is not rendered again.

`<exports>/.fingerprints.json` maps an export's name to the fingerprint of what it read (the build's
fingerprints of its tables, its parameters, its code), the files it wrote (with their sizes), its data version and
its UI metadata. It is written atomically and after the files, so a crash between the two only costs a re-render.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from filelock import FileLock

from pipelines.exports.files import write_if_changed

STATE_NAME = ".fingerprints.json"


def export_fingerprint(tables: dict[str, str | None], params: dict, code: str) -> str | None:
    """The fingerprint of an export's inputs; None when a table has no recorded fingerprint (then always render)."""
    if any(fingerprint is None for fingerprint in tables.values()):
        return None
    payload = json.dumps({"tables": tables, "params": params, "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# The state file last read, by path: its stat (inode, size, mtime) and what it held. Every export step reads it two
# or three times (its entry, its last metadata, then to record), a megabyte of JSON at 100x: it is parsed again
# only when it was replaced (record writes a new file, a new inode) or changed.
_READ: dict[str, tuple[tuple[int, int, int], dict]] = {}


def _load(folder: Path) -> dict:
    """The state file's entries by export name ({} when there is none or it is unreadable); read only, shared by the
    callers until the file changes."""
    path = Path(folder) / STATE_NAME
    try:
        status = path.stat()
        seen = (status.st_ino, status.st_size, status.st_mtime_ns)
        if (kept := _READ.get(str(path))) is not None and kept[0] == seen:
            return kept[1]
        state = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: every export renders again, which is always safe
    state = state if isinstance(state, dict) else {}
    _READ[str(path)] = (seen, state)
    return state


def recorded_metadata(folder: Path, name: str) -> dict:
    """The metadata an export last recorded, whatever it was written from ({} when none)."""
    entry = _load(folder).get(name)
    metadata = entry.get("metadata") if isinstance(entry, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def remove_gone(folder: Path, name: str, files: list[str]) -> list[str]:
    """Removes the files an export recorded writing that it writes no more (relative paths), and returns them. Only
    recorded files: the exports folder may hold the user's own, which no build removes."""
    entry = _load(folder).get(name)
    recorded = entry.get("files") if isinstance(entry, dict) else None
    gone = sorted(set(recorded if isinstance(recorded, dict) else ()) - set(files))
    for relative in gone:
        (Path(folder) / relative).unlink(missing_ok=True)
    return gone


class UsersFileError(Exception):
    """An export would overwrite a file the warehouse did not write."""


def refuse_users_files(folder: Path, files: Mapping[str, bytes | Callable[[], bytes]]) -> None:
    """Raises UsersFileError, before an export writes anything, if one of its files (relative path -> the bytes, or a
    function giving them) would replace another file that the exports' record does not list: the user's own, which
    no build overwrites. A file holding the same bytes is the export's own, written before its record was."""
    recorded = set()
    for entry in _load(folder).values():
        if isinstance(entry, dict) and isinstance(entry.get("files"), dict):
            recorded.update(entry["files"])
    for relative, content in files.items():
        path = Path(folder) / relative
        if relative in recorded or not (path.exists() or path.is_symlink()):
            continue
        if not (path.is_file() and path.read_bytes() == (content() if callable(content) else content)):
            raise UsersFileError(
                f"{path} is not a file this warehouse wrote, so it is kept and the export is not written: move it "
                "away, then build again"
            )


def write_exports(folder: Path, files: Mapping[str, bytes]) -> list[str]:
    """Writes an export's files (relative path -> bytes) where their bytes changed, after refuse_users_files; returns
    the files written."""
    refuse_users_files(folder, files)
    return [relative for relative, content in files.items() if write_if_changed(Path(folder) / relative, content)]


def still_there(folder: Path, sizes: dict[str, int]) -> bool:
    """Whether files written earlier (relative path -> size then) are all still there at that size; a file the user
    deleted or replaced is written again."""
    for relative, size in sizes.items():
        path = Path(folder) / relative
        if not path.is_file() or path.stat().st_size != size:
            return False
    return True


def kept_entry(folder: Path, name: str, fingerprint: str | None) -> dict | None:
    """The recorded entry of an export if it was written from this fingerprint and all its files are still there."""
    if fingerprint is None:
        return None
    entry = _load(folder).get(name)
    if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint:
        return None
    return entry if still_there(folder, entry.get("files", {})) else None


def record(
    folder: Path, name: str, fingerprint: str | None, files: list[str], data_version: str, metadata: dict
) -> None:
    """Records what an export was written from; call it after its files are in place."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # the exports may run in parallel steps: read-modify-write of the shared file under a lock
    with FileLock(folder / f"{STATE_NAME}.lock"):
        state = dict(_load(folder))
        # Also with no fingerprint (rendered again next time): the files are recorded, so that one gone can be removed.
        state[name] = {
            "fingerprint": fingerprint,
            "files": {relative: (folder / relative).stat().st_size for relative in sorted(files)},
            "data_version": data_version,
            "metadata": metadata,
        }
        write_if_changed(folder / STATE_NAME, json.dumps(state, sort_keys=True, indent=1).encode())
