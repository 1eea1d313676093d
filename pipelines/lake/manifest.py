"""What the lake remembers of a run (its manifest and folder stamps), and what a listing of it lacks."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import cache

import orjson
import polars as pl

from pipelines.code_versions import code_version, package_modules
from pipelines.lake.inventory import folders_without_document, source_path_of
from pipelines.lake.parquet import count_rows, write_text_atomically
from pipelines.lake.paths import manifest_file, partition_file, stamps_file
from pipelines.lake.read import OVER_THE_LIMIT
from pipelines.lake.transcripts import transcript_sources, transcripts_to_index
from pipelines.lake.unlisted import with_unlisted_kept
from pipelines.lake_store import LakePath, exists, lake_root
from pipelines.parameters import DECLARED
from pipelines.release.discover import (
    OBJECT_SCHEME,
    EpochFile,
    RunFolder,
    RunListing,
    folders_unchanged,
)

# A run last written to (the latest ctime of its epoch files and folders) this long before it was listed is quiet:
# its writer is done with it. A quiet run with no quarantined file and no problem entry is not listed again while its
# folders keep the stamps they had then (see unchanged_by_stamps); a full scan lists it anyway. The configuration's
# quiet_seconds sets the wait (0: at once; negative: never, every build lists every file).
DEFAULT_QUIET_SECONDS = DECLARED["quiet_seconds"].default


@cache
def lake_version() -> str:
    """The lake's code version (code_versions): of the modules of pipelines/lake/ and of what they import, the
    listing, the decoder and the flattener among them. A manifest or stamps record made by other code is not trusted:
    after a change to that code, or to a library writing its files, every run is parsed again."""
    return code_version(*package_modules("pipelines.lake"))


@dataclass
class RunIngestResult:
    run_id: str
    changed: bool
    files_parsed: int
    files_quarantined: int  # quarantined files in the run now, parsed this time or earlier
    epochs: int  # epoch documents loaded in the lake for this run
    trajectories: int
    seconds: float


def read_manifest(lake: LakePath, run_id: str) -> dict:
    """A run's manifest as the lake last wrote it; {} when there is none, or it is unreadable or of other code."""
    path = manifest_file(lake, run_id)
    try:
        manifest = orjson.loads(path.read_bytes())  # orjson wrote it; read every build, for every run
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) and manifest.get("code_version") == lake_version() else {}


def _worth_retrying(outcome: dict, file: EpochFile, max_file_bytes: int) -> bool:
    """A quarantined or set-aside file whose problem may have gone without its size or mtime changing (chmod, a new
    limit)."""
    if outcome["status"] == "skipped":  # a candidate document set aside unread, over the limit then
        return outcome["reason"].startswith(OVER_THE_LIMIT) and file.size <= max_file_bytes
    if outcome["status"] != "quarantined":
        return False
    if outcome["reason"] == "unreadable":  # an object's access is the store's to say: asked again, one GET
        return file.file_path.startswith(OBJECT_SCHEME) or os.access(file.file_path, os.R_OK)
    return outcome["reason"] == "file_too_large" and file.size <= max_file_bytes


def _partitions_present(lake: LakePath, run_id: str) -> bool:
    """Whether the partitions every ingest of a run writes (errors, files; a run may have no epochs) are there."""
    return all(exists(partition_file(lake, table, run_id)) for table in ("errors", "files"))


def stamps_record(
    listing: RunListing, quarantined: int, rows: dict, quiet_seconds: int, transcript_text: bool = False
) -> dict | None:
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
        "code_version": lake_version(),
        "release": listing.run.release,
        "transcript_text": transcript_text,  # a build that wants the other setting lists the run
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
    if isinstance(record, dict) and record.get("code_version") == lake_version():
        return record
    return None


def write_stamps(lake: LakePath, run_id: str, record: dict | None) -> None:
    """Writes a run's stamps record, or removes it (None). Written after the manifest, removed before a rewrite."""
    if record is None:
        stamps_file(lake, run_id).unlink(missing_ok=True)
    else:
        write_text_atomically(orjson.dumps(record).decode(), stamps_file(lake, run_id))


def unchanged_by_stamps(run: RunFolder, lake: LakePath, transcript_text: bool = False) -> RunIngestResult | None:
    """The result of a run settled without listing it, from its folder stamps; None when it must be listed: it
    was not quiet when last listed, or a folder of it has changed since (a file added, removed or renamed; the
    folder replaced). A file rewritten in place, which changes no folder, is found by a full scan."""
    started = time.perf_counter()
    lake = lake_root(lake)
    record = _read_stamps(lake, run.run_id)
    if record is None or record.get("release") != run.release or record.get("transcript_text") != transcript_text:
        return None
    if not folders_unchanged(run.release_root, record["folders"]):
        return None
    if not _partitions_present(lake, run.run_id):
        return None
    return ingest_result(run.run_id, False, 0, 0, lake, started, rows=record["rows"])


@dataclass
class RunWork:
    """What the lake lacks of one listed run: what ingest_run would parse, drop and inventory again."""

    listing: RunListing
    changed: list[EpochFile]  # new or changed since parsed (size or mtime), or quarantined and worth retrying
    removed: list[str]  # source paths the manifest holds that the folder no longer has
    inventory_changed: bool  # the non-epoch entries differ from the manifest's, or a partition is missing
    in_lake: bool = True  # the lake has a manifest of the run (False: everything of it is new)
    # The files that may hold transcripts to index (new, changed, or worth another look), and those gone.
    transcripts_changed: list[EpochFile] = field(default_factory=list)
    transcripts_removed: list[str] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        transcripts = self.transcripts_changed or self.transcripts_removed
        return bool(self.changed or self.removed or self.inventory_changed or transcripts)


def compare_listing(
    listing: RunListing, lake: LakePath, max_file_bytes: int, previous: dict, transcript_text: bool = False
) -> RunWork:
    """A run's listing against its manifest (previous, as read_manifest returns it); stats only, parses nothing.
    transcript_text: whether the lake is to keep the transcripts' text (indexed files are indexed again when the
    manifest says otherwise)."""
    listing = with_unlisted_kept(listing, previous)
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
    skipped = [vars(s) for s in sorted(listing.skipped, key=source_path_of)]
    inventory_changed = previous.get("skipped") != skipped or not _partitions_present(lake, listing.run.run_id)
    sources = transcript_sources(listing, files)
    transcripts = transcripts_to_index(sources, previous, max_file_bytes, transcript_text)
    return RunWork(listing, changed, removed, inventory_changed, bool(previous), *transcripts)


# What a stamps record settles a run by: its folders' stamps, and whether the lake keeps the transcripts' text.
_SETTLED_BY = ("folders", "transcript_text")


def settle_unchanged(
    listing: RunListing, lake: LakePath, previous: dict, quiet_seconds: int, transcript_text: bool = False
) -> int:
    """Records the stamps of a run found unchanged if it became quiet (or removes them if it became busy); returns
    its count of quarantined files. Called holding the run's lock."""
    quarantined, record, due = stamps_due(listing, lake, previous, quiet_seconds, transcript_text)
    if due:
        write_stamps(lake, listing.run.run_id, record)
    return quarantined


def stamps_due(
    listing: RunListing, lake: LakePath, previous: dict, quiet_seconds: int, transcript_text: bool = False
) -> tuple[int, dict | None, bool]:
    """Of a run found unchanged: its count of quarantined files, the stamps record it should have (stamps_record),
    and whether the lake's differs: the run became quiet, or busy, or a folder or the setting changed."""
    files: dict[str, dict] = previous.get("files", {})
    outcomes = [*files.values(), *previous.get("transcripts", {}).values()]
    quarantined = sum(o["status"] == "quarantined" for o in outcomes)
    # A folder of set-aside candidates, like a quarantined file, may be fixed in place.
    current = {f.source_path: f for f in listing.epoch_files}
    unsettled = quarantined + len(folders_without_document(current, files))
    record = stamps_record(listing, unsettled, previous.get("rows"), quiet_seconds, transcript_text)
    old = _read_stamps(lake, listing.run.run_id)
    due = (old is None) != (record is None) or bool(record and any(old.get(k) != record[k] for k in _SETTLED_BY))
    return quarantined, record, due


def ingest_result(
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
