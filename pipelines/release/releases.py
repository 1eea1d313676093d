"""A build's release folders: each one's run folders (on a disk or in a bucket), and why a folder given as a release
is none (missing, a run folder itself, a folder of releases)."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.release.discover import (
    EPOCH_DIR_NAME,
    EPOCH_FILE_NAME,
    RunFolder,
    SkippedEntry,
    link_problem,
    shown,
)
from pipelines.settings import OBJECT_SCHEME


def list_run_folders(release_root: Path) -> tuple[list[RunFolder], list[SkippedEntry]]:
    """The run folders directly under a release root, and the root's other entries."""
    release_root = Path(release_root)
    runs: list[RunFolder] = []
    skipped: list[SkippedEntry] = []
    with os.scandir(release_root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            rel = entry.name  # its path relative to the root; a Path is made only for a run (thousands of entries)
            if entry.name.startswith("."):
                skipped.append(SkippedEntry(None, shown(rel), "hidden entry", False))
            elif shown(entry.name) != entry.name:
                skipped.append(
                    SkippedEntry(
                        None,
                        shown(rel),
                        "a run folder whose name is not UTF-8 text, which a run "
                        "id must be; not loaded (renamed, it is)",
                        True,
                        "bad_name",
                    )
                )
            elif entry.is_symlink() and (problem := link_problem(Path(entry.path), release_root)):
                skipped.append(SkippedEntry(None, shown(rel), problem, True, "outside_link"))
            elif entry.is_dir():
                runs.append(RunFolder(entry.name, release_root.name, release_root, Path(entry.path)))
            else:
                skipped.append(SkippedEntry(None, shown(rel), "not a run folder", False))
    return runs, skipped


def release_problem(root: Path) -> str | None:
    """Why a folder cannot be a release, or None: missing, not a folder, unreadable, or a run folder itself (epoch
    documents at its top level), which names the folder to give instead."""
    if str(root).startswith(OBJECT_SCHEME):
        return object_release_problem(str(root))
    root = Path(root)
    if not root.exists():
        return f"release folder {shown(str(root))} does not exist"
    if not root.is_dir():
        return f"release folder {shown(str(root))} is not a folder"
    try:
        with os.scandir(root) as entries:
            run_like = any(
                EPOCH_FILE_NAME.match(e.name) or EPOCH_DIR_NAME.match(e.name) and e.is_dir() for e in entries
            )
    except OSError as exc:
        return f"release folder {shown(str(root))} cannot be read: {exc.strerror or exc}"
    if run_like:
        parent = root.absolute().parent
        return (
            f"release folder {shown(str(root))} holds epoch documents itself: it is a run folder; give the folder "
            f"that holds the run folders instead (--release {shown(str(parent))})"
        )
    if releases := _releases_inside(root):
        given = " ".join(f"--release {shown(str(release))}" for release in releases[:5])
        return f"release folder {shown(str(root))} holds releases, whose folders hold the runs: give each ({given})"
    return None


def _releases_inside(root: Path, looked_at: int = 3) -> list[Path]:
    """The folders of root that are releases (a folder of theirs holds epoch entries), when none of root's first
    folders is a run (as a sample's --out folder is): a few folders looked into, not the whole release."""

    def folders(path: Path | str) -> list[str]:
        try:
            with os.scandir(path) as entries:
                return sorted(e.path for e in entries if e.is_dir() and not e.name.startswith("."))
        except OSError:
            return []

    def holds_epochs(path: str) -> bool:
        try:
            with os.scandir(path) as entries:
                return any(EPOCH_FILE_NAME.match(e.name) or EPOCH_DIR_NAME.match(e.name) for e in entries)
        except OSError:
            return False

    children = folders(root)
    if not children or any(map(holds_epochs, children[:looked_at])):
        return []
    return [Path(child) for child in children if any(map(holds_epochs, folders(child)[:looked_at]))]


def list_object_release(root: str, fs=None) -> tuple[list[RunFolder], list[SkippedEntry]]:
    """The run folders (first-level prefixes) of a release in a bucket, and its other first-level keys."""
    from pipelines.release.objects import filesystem, release_name

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
    from pipelines.release.objects import filesystem

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


def _folder_and_parents(folder: Path) -> set[tuple[int, int]]:
    """The (device, inode) of a folder and of each folder above it, by its real path: a run folder is one of them
    exactly when it is the folder or holds it (one stat a run, where a real path costs one per path component)."""
    real = Path(os.path.realpath(folder))
    found = set()
    for path in (real, *real.parents):
        try:
            st = os.stat(path)
        except OSError:
            continue  # not there (yet): nothing can be it
        found.add((st.st_dev, st.st_ino))
    return found


def _is_one_of(path: Path, folders: set[tuple[int, int]]) -> bool:
    try:
        st = os.stat(path)  # follows a link, as a real path does
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in folders


def find_run_folders(
    release_roots: list[Path],
    warehouse: Path | None = None,
) -> tuple[dict[str, RunFolder], list[SkippedEntry], list[str]]:
    """Every run folder of the releases keyed by run id, the roots' other entries, and problems found.

    A run id is unique across releases: a second folder with the same name is reported and not loaded. A folder
    that is the warehouse, or holds it, is never a run: a warehouse placed inside a release is not ingested.
    """
    runs: dict[str, RunFolder] = {}
    entries: list[SkippedEntry] = []
    problems: list[str] = []
    holding_warehouse = _folder_and_parents(warehouse) if warehouse is not None else None
    for root in release_roots:
        if problem := release_problem(root):
            problems.append(problem)
            continue
        if str(root).startswith(OBJECT_SCHEME):
            found, skipped = list_object_release(str(root))
        else:
            found, skipped = list_run_folders(Path(root))
        if holding_warehouse and not str(root).startswith(OBJECT_SCHEME):
            inside = [run for run in found if _is_one_of(run.path, holding_warehouse)]
            found = [run for run in found if run not in inside]
            skipped += [
                SkippedEntry(None, shown(run.run_id), "the warehouse folder, or a folder holding it; not a run", False)
                for run in inside
            ]
        entries.extend(
            SkippedEntry(None, f"{shown(Path(root).name)}/{s.source_path}", s.reason, s.is_problem, s.error_kind)
            for s in skipped
        )
        for run in found:
            if run.run_id in runs:
                problems.append(
                    f"run id {run.run_id} appears in release {runs[run.run_id].release} and again in "
                    f"{run.release}; the second copy is not loaded"
                )
            else:
                runs[run.run_id] = run
    return runs, entries, problems
