"""Finds a release's run folders and epoch files, in both published layouts, and inventories every other entry."""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

# Nine digits at most: an epoch number always fits the warehouse's 64-bit integers.
EPOCH_FILE_NAME = re.compile(r"^epoch_(\d{1,9})_results\.json$")
EPOCH_DIR_NAME = re.compile(r"^epoch_(\d{1,9})$")
EPOCH_DIR_DOCUMENT = "results.json"


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 1.6 us to make, this one 0.2 (one per file listed)
class EpochFile:
    """One epoch document on disk, in either layout."""

    run_id: str
    file_path: str  # absolute path inside the release root; a str, not a Path: a listing makes one per file
    source_path: str  # path relative to the release root, as shown to users
    epoch_in_name: int
    layout: str  # "file" (epoch_NNN_results.json) or "folder" (epoch_NNN/results.json)
    size: int
    mtime_ns: int
    # The file the listing saw (its real path checked to be inside the release), to know it again when opened;
    # 0 when unknown.
    device: int = 0
    inode: int = 0

    @property
    def path(self) -> Path:
        return Path(self.file_path)


@dataclass  # not frozen, which costs about a microsecond per entry to make
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


# A folder as a listing found it: (inode, mtime_ns, ctime_ns), taken before its entries were read. Adding,
# removing or renaming an entry changes the folder's mtime and ctime; replacing the folder changes its inode.
FolderStamp = tuple[int, int, int]


@dataclass
class RunListing:
    run: RunFolder
    epoch_files: list[EpochFile]
    skipped: list[SkippedEntry]
    # The run folder's and every epoch folder's stamp, by source path (see folder_stamp); None when an entry
    # is a link, or a folder could not be stamped: a link's target can change without its folder changing.
    folders: dict[str, FolderStamp] | None = None
    listed_at_ns: int = 0  # wall clock when the listing began
    # The latest change time (ctime) of an epoch file or folder it saw: when the run was last written to. Unlike
    # an mtime, a ctime cannot be set back (utime, tar and cp -p set mtimes and leave the ctime at "now").
    changed_at_ns: int = 0


def folder_stamp(st: os.stat_result) -> FolderStamp:
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def folders_unchanged(release_root: Path, stamps: dict[str, list[int]]) -> bool:
    """Whether every folder (by source path, relative to the release root) still has the stamp recorded, as a list.

    Each folder is looked up by name in its parent, opened once: a quiet release of folder-layout runs has a folder
    per epoch, and a stat relative to an open folder skips the walk down the rest of the path (15% of the check).
    """
    root = str(release_root)
    parents: dict[str, int] = {}
    try:
        for source_path, (inode, mtime_ns, ctime_ns) in stamps.items():
            parent, _, name = source_path.rpartition("/")
            fd = parents.get(parent)
            if fd is None:
                fd = parents[parent] = os.open(f"{root}/{parent}" if parent else root, os.O_RDONLY | os.O_DIRECTORY)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if st.st_ino != inode or st.st_mtime_ns != mtime_ns or st.st_ctime_ns != ctime_ns:
                return False
    except (OSError, ValueError, TypeError):  # gone or unreadable; or a stamp not of three numbers: list the run
        return False
    finally:
        for fd in parents.values():
            os.close(fd)
    return True


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


def list_run(run: RunFolder) -> RunListing:
    """Every epoch document of one run folder, and the inventory of everything else in it."""
    # A no-change build lists every file of every run, so this loop costs about one stat per file: plain
    # strings rather than Path objects, os.scandir's entries (their type comes with the listing, their stat
    # is one call), and a real-path check only for links. An entry that is not a link, in a folder whose real
    # path is inside the root, cannot lead outside it: the run folder and any linked epoch folder are checked
    # when met, and the root itself is the reference.
    root = run.release_root
    run_id = run.run_id
    epoch_files: list[EpochFile] = []
    skipped: list[SkippedEntry] = []
    prefix = _relative(run.path, root)  # source paths are this plus "/name", as Path.relative_to would give

    def skip(source_path: str, reason: str, error_kind: str | None = None) -> None:
        skipped.append(SkippedEntry(run_id, source_path, reason, error_kind is not None, error_kind))

    listed_at_ns = time.time_ns()
    folders: dict[str, FolderStamp] | None = None
    changed_at_ns = 0

    def link_problem(entry: os.DirEntry) -> str | None:
        nonlocal folders
        if not entry.is_symlink():
            return None
        folders = None
        return _link_problem(Path(entry.path), root)

    def add_epoch(entry: os.DirEntry, source_path: str, epoch: int, layout: str) -> None:
        nonlocal changed_at_ns
        try:
            st = entry.stat()  # follows a link (already checked to stay inside the root), as Path.stat does
        except OSError as exc:
            skip(source_path, f"cannot stat: {exc.strerror}", "unreadable")
            return
        epoch_files.append(EpochFile(run_id, entry.path, source_path, epoch, layout, st.st_size, st.st_mtime_ns,
                                     st.st_dev, st.st_ino))
        changed_at_ns = max(changed_at_ns, st.st_ctime_ns)

    try:
        st = os.stat(run.path, follow_symlinks=False)
        folders = None if stat.S_ISLNK(st.st_mode) else {prefix: folder_stamp(st)}
        changed_at_ns = st.st_ctime_ns
        with os.scandir(run.path) as listing:
            entries = sorted(listing, key=_name)
    except OSError as exc:
        skip(prefix, f"cannot list run folder: {exc.strerror}", "unreadable")
        return RunListing(run, epoch_files, skipped)

    for entry in entries:
        name = entry.name
        source_path = f"{prefix}/{name}"
        if name.startswith("."):
            skip(source_path, "hidden entry")
            continue
        if problem := link_problem(entry):
            skip(source_path, problem, "outside_link")
            continue
        if (match := EPOCH_FILE_NAME.match(name)) and entry.is_file():
            add_epoch(entry, source_path, int(match.group(1)), "file")
        elif (match := EPOCH_DIR_NAME.match(name)) and entry.is_dir():
            try:
                if folders is not None:
                    folder = entry.stat(follow_symlinks=False)
                    folders[source_path] = folder_stamp(folder)
                    changed_at_ns = max(changed_at_ns, folder.st_ctime_ns)
                with os.scandir(entry.path) as listing:
                    inner_entries = sorted(listing, key=_name)
            except OSError as exc:
                skip(source_path, f"cannot list epoch folder: {exc.strerror}", "unreadable")
                continue
            document = None
            for inner in inner_entries:
                if inner.name == EPOCH_DIR_DOCUMENT:
                    document = inner
                else:
                    skip(f"{source_path}/{inner.name}",
                         f"beside {EPOCH_DIR_DOCUMENT} in an epoch folder; inventoried, not parsed")
            document_path = f"{source_path}/{EPOCH_DIR_DOCUMENT}"
            # A regular file, or a link to anything but a folder (a broken link is reported as such).
            if document is not None and (document.is_file() or (document.is_symlink() and not document.is_dir())):
                if problem := link_problem(document):
                    skip(document_path, problem, "outside_link")
                else:
                    add_epoch(document, document_path, int(match.group(1)), "folder")
            else:
                skip(source_path, f"epoch folder without a {EPOCH_DIR_DOCUMENT} file", "missing_document")
        elif name.startswith("epoch_"):
            # Named like an epoch document but not quite (a backup, a copy, a typo): worth a look.
            skip(source_path, "named like an epoch document but not epoch_NNN_results.json or epoch_NNN/; not parsed",
                 "stray_file")
        else:
            skip(source_path, "not an epoch file")
    return RunListing(run, epoch_files, skipped, folders, listed_at_ns, changed_at_ns)


def _name(entry: os.DirEntry) -> str:
    return entry.name


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
