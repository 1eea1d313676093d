"""Finds a release's run folders and epoch documents in every recognised placement; inventories every other entry."""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.settings import OBJECT_SCHEME

# Nine digits at most: an epoch number always fits the warehouse's 64-bit integers.
EPOCH_FILE_NAME = re.compile(r"^epoch_(\d{1,9})_results\.json$")
EPOCH_DIR_NAME = re.compile(r"^epoch_(\d{1,9})$")
# An epoch entry's name but for its number's length, which says why it is not loaded.
LONG_EPOCH_NAME = re.compile(r"^epoch_(\d{10,})(_results\.json)?$")
# A file that an epoch's document comes with in a flat run folder (epoch_007_transcripts.jsonl, epoch_007_config.json):
# inventoried like any other file, not reported as a misnamed document.
EPOCH_COMPANION_NAME = re.compile(r"^epoch_\d{1,9}_(?!results)[^.]+(\.[A-Za-z0-9]+)+$")
# An epoch folder's document, by name, in the order tried: the first present is loaded, and any other of these
# names beside it is a duplicate_epoch. "{n}" is the folder's own digits (epoch_007/epoch_007_results.json).
EPOCH_DIR_DOCUMENTS = (
    ("epoch_{n}_results.json", "folder_epoch_results"),
    ("results.json", "folder"),
    ("metrics.json", "folder_metrics"),
)
# With none of those names in an epoch folder, each of its *.json files is a candidate, loaded when it proves to be
# an epoch document (pipelines.lake.read decides, from its content); its other files are inventoried only.
OTHER_JSON_LAYOUT = "folder_other_json"
# Every layout (an EpochFile's layout, fact_epochs.source_layout), in the order an epoch folder's names are tried.
LAYOUTS = ("file", *(layout for _, layout in EPOCH_DIR_DOCUMENTS), OTHER_JSON_LAYOUT)
EXPECTED_PLACEMENTS = (
    "<run>/epoch_NNN_results.json",
    *(f"<run>/epoch_NNN/{name.format(n='NNN')}" for name, _ in EPOCH_DIR_DOCUMENTS),
    "<run>/epoch_NNN/<any name>.json",
)
DOCUMENT_ORDER = (
    "names tried in order: epoch_NNN_results.json, results.json, metrics.json, then any other "
    "*.json holding an epoch document"
)
# A file that may hold transcripts (*.jsonl, *.ndjson, *.json that is no epoch document), anywhere in a run folder:
# its EpochFile's layout. Folders other than epoch folders are looked into down to this depth below the run folder.
TRANSCRIPT_LAYOUT = "transcript"
TRANSCRIPT_SUFFIXES = (".jsonl", ".ndjson", ".json")
FOLDER_DEPTH = 4


@dataclass(slots=True)  # not frozen: a frozen dataclass costs 1.6 us to make, this one 0.2 (one per file listed)
class EpochFile:
    """One epoch document on disk, in either layout."""

    run_id: str
    file_path: str  # absolute path inside the release root; a str, not a Path: a listing makes one per file
    source_path: str  # path relative to the release root, as shown to users
    epoch_in_name: int
    # "file" (<run>/epoch_NNN_results.json) or, in an epoch folder, the EPOCH_DIR_DOCUMENTS layout or OTHER_JSON_LAYOUT
    layout: str
    size: int
    mtime_ns: int
    # The file the listing saw (its real path checked to be inside the release), to know it again when opened;
    # 0 when unknown.
    device: int = 0
    inode: int = 0
    # Its change time, which no writer can set back; for an object in a bucket, a digest of its ETag, which every
    # write changes; 0 when unknown.
    ctime_ns: int = 0

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
    severity: str = "error"  # "warning" for a problem that loses nothing (a second document for a loaded epoch)
    epoch: int | None = None  # the epoch of the epoch folder it is, or is in


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
    # The files that may hold transcripts (layout TRANSCRIPT_LAYOUT; epoch_in_name the epoch of the epoch folder they
    # are in, or None), wherever they are in the run folder.
    transcript_files: list[EpochFile] = field(default_factory=list)


def may_hold_transcripts(name: str) -> bool:
    return name.lower().endswith(TRANSCRIPT_SUFFIXES)


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


def relative_path(path: Path | str, root: Path | str) -> str:
    if isinstance(path, str):  # an object's URL (pipelines.release.objects), under its root's
        return path[len(str(root)) + 1 :]
    return path.relative_to(root).as_posix()


def shown(name: str) -> str:
    """A name as text: bytes that are not UTF-8 (kept by Python as lone surrogates, which no table can hold) as
    `\\xNN` escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def link_problem(path: Path, root: Path) -> str | None:
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
    problem = link_problem(path, root)
    if problem is not None:
        raise PermissionError(problem)
    return path.resolve(strict=True)


class LocalTree:
    """How list_run looks at a folder on a disk: the folder's status, and its entries in name order."""

    @staticmethod
    def stat(path) -> os.stat_result:
        return os.stat(path, follow_symlinks=False)

    @staticmethod
    def scan(path) -> list[os.DirEntry]:
        with os.scandir(path) as listing:
            return sorted(listing, key=_name)


def list_run(run: RunFolder, tree=LocalTree) -> RunListing:
    """Every epoch document of one run folder, and the inventory of everything else in it; tree is how its folders
    are looked at (LocalTree; an object store's listing of the run, pipelines.release.objects)."""
    if tree is LocalTree and isinstance(run.path, str) and run.path.startswith(OBJECT_SCHEME):
        return list_object_run(run)
    lister = _RunLister(run, tree)
    try:
        st = tree.stat(run.path)
        lister.folders = None if stat.S_ISLNK(st.st_mode) else {lister.prefix: folder_stamp(st)}
        lister.changed_at_ns = st.st_ctime_ns
        entries = tree.scan(run.path)
    except OSError as exc:
        lister.skip(lister.prefix, f"cannot list run folder: {exc.strerror}", "unreadable")
        return RunListing(run, lister.epoch_files, lister.skipped)
    lister.list_entries(entries)
    return RunListing(
        run,
        lister.epoch_files,
        lister.skipped,
        lister.folders,
        lister.listed_at_ns,
        lister.changed_at_ns,
        lister.transcript_files,
    )


class _RunLister:
    """One listing of a run folder: its epoch files, its skipped entries and its folders' stamps, as they are met.

    A no-change build lists every file of every run, so this costs about one stat per file: plain strings rather
    than Path objects, os.scandir's entries (their type comes with the listing, their stat is one call), and a
    real-path check only for links. An entry that is not a link, in a folder whose real path is inside the root,
    cannot lead outside it: the run folder and any linked epoch folder are checked when met, and the root itself
    is the reference.
    """

    def __init__(self, run: RunFolder, tree):
        self.run_id = run.run_id
        self.root = run.release_root
        self.tree = tree
        self.prefix = relative_path(
            run.path, self.root
        )  # source paths are this plus "/name", as Path.relative_to gives
        self.epoch_files: list[EpochFile] = []
        self.transcript_files: list[EpochFile] = []
        self.skipped: list[SkippedEntry] = []
        self.listed_at_ns = time.time_ns()
        self.folders: dict[str, FolderStamp] | None = None  # None: not settled from stamps (a link, a bucket)
        self.changed_at_ns = 0

    def skip(
        self, source_path: str, reason: str, error_kind: str | None = None, severity: str = "error", epoch=None
    ) -> None:
        self.skipped.append(
            SkippedEntry(self.run_id, shown(source_path), reason, error_kind is not None, error_kind, severity, epoch)
        )

    def link_problem(self, entry: os.DirEntry) -> str | None:
        if not entry.is_symlink():
            return None
        self.folders = None
        return link_problem(Path(entry.path), self.root)

    def not_a_file(self, entry: os.DirEntry, source_path: str, epoch: int) -> None:
        """An entry named as an epoch document that is a folder, a FIFO, a socket or a device: reported as what it
        is, and never opened (a FIFO's open would wait for a writer)."""
        try:
            mode = entry.stat().st_mode  # follows a link, checked to stay inside the root
        except OSError as exc:
            self.skip(source_path, f"cannot stat: {exc.strerror}", "unreadable", epoch=epoch)
            return
        what = next((kind for test, kind in _NOT_FILES if test(mode)), "a device")
        self.skip(
            source_path, f"named as an epoch document, but {what}, not a file; not opened", "not_a_file", epoch=epoch
        )

    def add_epoch(self, entry: os.DirEntry, source_path: str, epoch: int | None, layout: str) -> None:
        """An epoch document (or a transcript file, of layout TRANSCRIPT_LAYOUT) as the listing saw it."""
        if shown(source_path) != source_path:
            self.skip(source_path, "a document whose name is not UTF-8 text; not loaded (renamed, it is)", "bad_name")
            return
        try:
            st = entry.stat()  # follows a link (already checked to stay inside the root), as Path.stat does
        except OSError as exc:
            self.skip(source_path, f"cannot stat: {exc.strerror}", "unreadable", epoch=epoch)
            return
        files = self.transcript_files if layout == TRANSCRIPT_LAYOUT else self.epoch_files
        files.append(
            EpochFile(
                self.run_id,
                entry.path,
                source_path,
                epoch,
                layout,
                st.st_size,
                st.st_mtime_ns,
                st.st_dev,
                st.st_ino,
                st.st_ctime_ns,
            )
        )
        self.changed_at_ns = max(self.changed_at_ns, st.st_ctime_ns)

    def list_epoch_folder(self, inner_entries: list[os.DirEntry], folder_path: str, digits: str) -> None:
        """The epoch folder's document, by EPOCH_DIR_DOCUMENTS' names in order, else its *.json candidates."""
        epoch = int(digits)
        known = {name.format(n=digits): (rank, layout) for rank, (name, layout) in enumerate(EPOCH_DIR_DOCUMENTS)}
        documents, candidates, others, refused = [], [], [], False
        for inner in inner_entries:
            path = f"{folder_path}/{inner.name}"
            if inner.name.startswith("."):
                self.skip(path, "hidden entry", epoch=epoch)
            elif not (inner.name in known or inner.name.endswith(".json")):
                others.append(inner)
            elif inner.name in known and not inner.is_symlink() and not inner.is_file():
                self.not_a_file(inner, path, epoch)  # a FIFO named results.json: its own problem, not the folder's
                refused = True
            # A regular file, or a link to anything but a folder (a broken link is reported as such).
            elif not (inner.is_file() or (inner.is_symlink() and not inner.is_dir())):
                others.append(inner)
            elif problem := self.link_problem(inner):
                self.skip(path, problem, "outside_link", epoch=epoch)
                refused = True  # reported; the folder is not reported again as without a document
            elif inner.name in known:
                documents.append((known[inner.name], inner))
            else:
                candidates.append(inner)
        documents.sort(key=lambda ranked: ranked[0][0])
        if documents:
            (_, layout), chosen = documents[0]
            self.add_epoch(chosen, f"{folder_path}/{chosen.name}", epoch, layout)
            for _, second in documents[1:]:
                self.skip(
                    f"{folder_path}/{second.name}",
                    f"a second document for epoch {epoch}: {folder_path}/{chosen.name} is loaded ({DOCUMENT_ORDER})",
                    "duplicate_epoch",
                    "warning",
                    epoch,
                )
            beside = f"beside {chosen.name} in an epoch folder; inventoried, not parsed"
            others += candidates
        else:
            for candidate in candidates:
                self.add_epoch(candidate, f"{folder_path}/{candidate.name}", epoch, OTHER_JSON_LAYOUT)
            beside = "in an epoch folder; inventoried, not parsed"
            if not candidates and not refused:
                seen = ", ".join(inner.name for inner in inner_entries[:5]) or "nothing"
                more = f" and {len(inner_entries) - 5} more" if len(inner_entries) > 5 else ""
                self.skip(
                    folder_path,
                    f"epoch folder without an epoch document ({DOCUMENT_ORDER}); it holds {seen}{more}",
                    "missing_document",
                    epoch=epoch,
                )
        for other in sorted(others, key=_name):
            self.list_other(other, f"{folder_path}/{other.name}", 2, beside, epoch)

    def list_other(self, entry: os.DirEntry, source_path: str, depth: int, reason: str, epoch=None) -> None:
        """An entry that is no epoch document, depth folders below the run folder: a file that may hold transcripts
        is listed as one, a folder looked into (down to FOLDER_DEPTH), anything else inventoried with the reason."""
        if entry.name.startswith("."):
            self.skip(source_path, "hidden entry", epoch=epoch)
        elif problem := self.link_problem(entry):
            self.skip(source_path, problem, "outside_link", epoch=epoch)
        elif entry.is_dir():
            if depth > FOLDER_DEPTH:
                self.skip(source_path, f"a folder more than {FOLDER_DEPTH} deep in the run folder; not looked into")
            else:
                self.list_folder(entry, source_path, depth, epoch)
        elif may_hold_transcripts(entry.name) and entry.is_file():
            self.add_epoch(entry, source_path, epoch, TRANSCRIPT_LAYOUT)
        else:
            self.skip(source_path, reason, epoch=epoch)

    def stamped_scan(self, entry: os.DirEntry, source_path: str) -> list:
        """A folder's entries, its stamp recorded first (while stamps are kept); OSError when it cannot be listed."""
        if self.folders is not None:
            folder = entry.stat(follow_symlinks=False)
            self.folders[source_path] = folder_stamp(folder)
            self.changed_at_ns = max(self.changed_at_ns, folder.st_ctime_ns)
        return self.tree.scan(entry.path)

    def list_folder(self, entry: os.DirEntry, source_path: str, depth: int, epoch=None) -> None:
        """A folder that is no epoch folder (transcripts/, logs/; epoch: of the epoch folder it is in, if any):
        stamped, and each of its entries listed."""
        try:
            inner_entries = self.stamped_scan(entry, source_path)
        except OSError as exc:
            self.skip(source_path, f"cannot list folder: {exc.strerror}", "unreadable", epoch=epoch)
            return
        for inner in inner_entries:
            self.list_other(inner, f"{source_path}/{inner.name}", depth + 1, "not an epoch file", epoch)

    def list_entries(self, entries: list[os.DirEntry]) -> None:
        """The run folder's entries: epoch files, epoch folders, and the rest inventoried."""
        for entry in entries:
            name = entry.name
            source_path = f"{self.prefix}/{name}"
            if name.startswith("."):
                self.skip(source_path, "hidden entry")
                continue
            if problem := self.link_problem(entry):
                named = EPOCH_FILE_NAME.match(name) or EPOCH_DIR_NAME.match(name)
                self.skip(source_path, problem, "outside_link", epoch=int(named.group(1)) if named else None)
                continue
            if match := EPOCH_FILE_NAME.match(name):
                if entry.is_file():
                    self.add_epoch(entry, source_path, int(match.group(1)), "file")
                else:
                    self.not_a_file(entry, source_path, int(match.group(1)))
            elif (match := EPOCH_DIR_NAME.match(name)) and entry.is_dir():
                try:
                    inner_entries = self.stamped_scan(entry, source_path)
                except OSError as exc:
                    self.skip(
                        source_path,
                        f"cannot list epoch folder: {exc.strerror}",
                        "unreadable",
                        epoch=int(match.group(1)),
                    )
                    continue
                self.list_epoch_folder(inner_entries, source_path, match.group(1))
            elif name != name.lower() and (
                match := EPOCH_FILE_NAME.match(lower := name.lower()) or EPOCH_DIR_NAME.match(lower)
            ):
                reason = f"named as an epoch entry in capital letters; not loaded (renamed {lower}, it is)"
                self.skip(source_path, reason, "stray_file", epoch=int(match.group(1)))
            elif match := LONG_EPOCH_NAME.match(name):
                reason = f"an epoch number of {len(match.group(1))} digits, over the 9 an epoch may have; not parsed"
                self.skip(source_path, reason, "stray_file")
            elif name.startswith("epoch_") and not EPOCH_COMPANION_NAME.match(name):
                # Named like an epoch document but not quite (a backup, a copy, a typo): worth a look.
                self.skip(
                    source_path,
                    "named like an epoch document but not epoch_NNN_results.json or epoch_NNN/; not parsed",
                    "stray_file",
                )
            else:
                self.list_other(entry, source_path, 1, "not an epoch file")


# What an entry is when it is not a regular file, by its mode (anything else: a device).
_NOT_FILES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def _name(entry: os.DirEntry) -> str:
    return entry.name


def list_object_run(run: RunFolder, fs=None) -> RunListing:
    """Every epoch document of a run under a bucket prefix, from one paginated listing of its keys."""
    from pipelines.release.objects import ObjectTree, filesystem

    fs = fs or filesystem()
    listed_at_ns = time.time_ns()
    try:
        objects = fs.find(str(run.path), detail=True, withdirs=False)
    except OSError as exc:
        prefix = str(run.path)[len(str(run.release_root)) + 1 :]
        return RunListing(
            run, [], [SkippedEntry(run.run_id, prefix, f"cannot list run folder: {exc}", True, "unreadable")]
        )
    tree = ObjectTree(str(run.path), list(objects.values()))
    listing = list_run(run, tree)
    root = str(run.release_root)
    listing.skipped += [
        SkippedEntry(
            run.run_id,
            shown(url[len(root) + 1 :]),
            "an object whose key is also the prefix of other keys: not opened, the prefix read as the folder",
            True,
            "name_clash",
        )
        for url in sorted(tree.clashes)
    ]
    # No folder stamps in a bucket: a run is listed again at each build, never settled from stamps.
    listing.folders = None
    listing.listed_at_ns = listed_at_ns
    listing.changed_at_ns = max((f.mtime_ns for f in listing.epoch_files), default=0)
    return listing
