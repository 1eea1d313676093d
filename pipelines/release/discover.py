"""Finds a release's run folders and epoch files, in both published layouts, and inventories every other entry."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# Nine digits at most: an epoch number always fits the warehouse's 64-bit integers.
EPOCH_FILE_NAME = re.compile(r"^epoch_(\d{1,9})_results\.json$")
EPOCH_DIR_NAME = re.compile(r"^epoch_(\d{1,9})$")
EPOCH_DIR_DOCUMENT = "results.json"


@dataclass(frozen=True)
class EpochFile:
    """One epoch document on disk, in either layout."""

    run_id: str
    path: Path  # absolute path inside the release root
    source_path: str  # path relative to the release root, as shown to users
    epoch_in_name: int
    layout: str  # "file" (epoch_NNN_results.json) or "folder" (epoch_NNN/results.json)
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class SkippedEntry:
    """An entry that is not an epoch document, kept in the inventory with the reason it was not parsed."""

    run_id: str | None
    source_path: str
    reason: str
    is_problem: bool  # True when the entry is reported in ingest_errors too (e.g. a link out of the release)
    error_kind: str | None = None  # its error_kind in ingest_errors, when it is a problem


@dataclass(frozen=True)
class RunFolder:
    run_id: str
    release: str
    release_root: Path
    path: Path


@dataclass
class RunListing:
    run: RunFolder
    epoch_files: list[EpochFile]
    skipped: list[SkippedEntry]


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _link_problem(path: Path, root: Path) -> str | None:
    """Why a path may not be followed (a link out of the root, a broken link, a loop), or None when it may."""
    try:
        resolved = path.resolve(strict=True)
    except FileNotFoundError:
        return "broken link; not followed"
    except (OSError, RuntimeError):  # RuntimeError: a link loop, before Python 3.13
        return "link that cannot be resolved (a loop?); not followed"
    try:
        resolved.relative_to(root.resolve())
    except ValueError:
        return "link leading outside the release root; not followed"
    return None


def resolve_inside(path: Path, root: Path) -> Path:
    """The real path of a file inside root; raises PermissionError when it leads elsewhere, checked at open time."""
    problem = _link_problem(path, root)
    if problem is not None:
        raise PermissionError(problem)
    return path.resolve(strict=True)


def list_run_folders(release_root: Path) -> tuple[list[RunFolder], list[SkippedEntry]]:
    """The run folders directly under a release root, and the root's other entries."""
    release_root = Path(release_root)
    runs: list[RunFolder] = []
    skipped: list[SkippedEntry] = []
    with os.scandir(release_root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path = Path(entry.path)
            rel = _relative(path, release_root)
            if entry.name.startswith("."):
                skipped.append(SkippedEntry(None, rel, "hidden entry", False))
            elif entry.is_symlink() and (problem := _link_problem(path, release_root)):
                skipped.append(SkippedEntry(None, rel, problem, True, "outside_link"))
            elif entry.is_dir():
                runs.append(RunFolder(entry.name, release_root.name, release_root, path))
            else:
                skipped.append(SkippedEntry(None, rel, "not a run folder", False))
    return runs, skipped


def _stat(path: Path) -> os.stat_result:
    return path.stat()


def list_run(run: RunFolder) -> RunListing:
    """Every epoch document of one run folder, and the inventory of everything else in it."""
    root = run.release_root
    epoch_files: list[EpochFile] = []
    skipped: list[SkippedEntry] = []

    def skip(path: Path, reason: str, error_kind: str | None = None) -> None:
        skipped.append(SkippedEntry(run.run_id, _relative(path, root), reason, error_kind is not None, error_kind))

    def add_epoch(path: Path, epoch: int, layout: str) -> None:
        if path.is_symlink() and (problem := _link_problem(path, root)):
            skip(path, problem, "outside_link")
            return
        try:
            st = _stat(path)
        except OSError as exc:
            skip(path, f"cannot stat: {exc.strerror}", "unreadable")
            return
        epoch_files.append(
            EpochFile(run.run_id, path, _relative(path, root), epoch, layout, st.st_size, st.st_mtime_ns)
        )

    try:
        entries = sorted(os.scandir(run.path), key=lambda e: e.name)
    except OSError as exc:
        skip(run.path, f"cannot list run folder: {exc.strerror}", "unreadable")
        return RunListing(run, epoch_files, skipped)

    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith("."):
            skip(path, "hidden entry")
            continue
        if entry.is_symlink() and (problem := _link_problem(path, root)):
            skip(path, problem, "outside_link")
            continue
        if (match := EPOCH_FILE_NAME.match(entry.name)) and entry.is_file():
            add_epoch(path, int(match.group(1)), "file")
        elif (match := EPOCH_DIR_NAME.match(entry.name)) and entry.is_dir():
            document = path / EPOCH_DIR_DOCUMENT
            try:
                inner_entries = sorted(os.scandir(path), key=lambda e: e.name)
            except OSError as exc:
                skip(path, f"cannot list epoch folder: {exc.strerror}", "unreadable")
                continue
            for inner in inner_entries:
                if inner.name != EPOCH_DIR_DOCUMENT:
                    skip(Path(inner.path), f"beside {EPOCH_DIR_DOCUMENT} in an epoch folder; inventoried, not parsed")
            if document.is_file() or (document.is_symlink() and not document.is_dir()):
                add_epoch(document, int(match.group(1)), "folder")
            else:
                skip(path, f"epoch folder without a {EPOCH_DIR_DOCUMENT} file", "missing_document")
        elif entry.name.startswith("epoch_"):
            # Named like an epoch document but not quite (a backup, a copy, a typo): worth a look.
            skip(path, "named like an epoch document but not epoch_NNN_results.json or epoch_NNN/; not parsed",
                 "stray_file")
        else:
            skip(path, "not an epoch file")
    return RunListing(run, epoch_files, skipped)


def find_run_folders(release_roots: list[Path]) -> tuple[dict[str, RunFolder], list[SkippedEntry], list[str]]:
    """Every run folder of the releases keyed by run id, the roots' other entries, and problems found.

    A run id is unique across releases: a second folder with the same name is reported and not loaded.
    """
    runs: dict[str, RunFolder] = {}
    entries: list[SkippedEntry] = []
    problems: list[str] = []
    for root in release_roots:
        if not Path(root).is_dir():
            problems.append(f"release folder {root} does not exist or is not a folder")
            continue
        found, skipped = list_run_folders(Path(root))
        entries.extend(SkippedEntry(None, f"{Path(root).name}/{s.source_path}", s.reason, s.is_problem, s.error_kind)
                       for s in skipped)
        for run in found:
            if run.run_id in runs:
                problems.append(
                    f"run id {run.run_id} appears in release {runs[run.run_id].release} and again in "
                    f"{run.release}; the second copy is not loaded"
                )
            else:
                runs[run.run_id] = run
    return runs, entries, problems
