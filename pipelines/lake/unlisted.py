"""A folder of a run that could not be listed (permission denied, an I/O error): what the lake took from it is kept."""

from __future__ import annotations

import dataclasses
import os

from pipelines.release.discover import TRANSCRIPT_LAYOUT, EpochFile, RunListing, SkippedEntry

# How discover.list_run begins the reason of a run or epoch folder it could not list.
UNLISTED = "cannot list "


def with_unlisted_kept(listing: RunListing, previous: dict) -> RunListing:
    """The listing with the files the manifest (previous) holds under each folder it could not list, as they were
    then: they are not removed, nor parsed again, and the folder's problem says that they were kept. A folder
    readable again is listed as any other."""
    unlisted = [s for s in listing.skipped if s.error_kind == "unreadable" and s.reason.startswith(UNLISTED)]
    files: dict[str, dict] = previous.get("files", {})
    # The transcript files indexed from it (a *.json candidate that holds transcripts is among the files already).
    transcripts = {path: o for path, o in previous.get("transcripts", {}).items() if path not in files}
    if not unlisted or not (files or transcripts):
        return listing
    seen = {f.source_path for f in listing.epoch_files} | {f.source_path for f in listing.transcript_files}
    kept: list[EpochFile] = []
    kept_transcripts: list[EpochFile] = []
    skipped: list[SkippedEntry] = []
    for entry in listing.skipped:
        if entry not in unlisted:
            skipped.append(entry)
            continue
        under = [path for path in sorted(files) if path.startswith(entry.source_path + "/") and path not in seen]
        kept += [_as_listed(listing, path, files[path]) for path in under]
        under_t = [p for p in sorted(transcripts) if p.startswith(entry.source_path + "/") and p not in seen]
        kept_transcripts += [_as_listed(listing, p, transcripts[p] | _TRANSCRIPT) for p in under_t]
        reason = f"{entry.reason}; the {len(under)} epoch file(s) taken from it before are kept as they were"
        if under_t:
            reason += f", and the {len(under_t)} transcript file(s) indexed from it"
        skipped.append(dataclasses.replace(entry, reason=reason) if under or under_t else entry)
    return dataclasses.replace(
        listing,
        epoch_files=listing.epoch_files + kept,
        skipped=skipped,
        folders=None,
        transcript_files=listing.transcript_files + kept_transcripts,
    )


# A transcript file as the listing names it (its manifest outcome records neither).
_TRANSCRIPT = {"epoch_in_name": None, "layout": TRANSCRIPT_LAYOUT}


def _as_listed(listing: RunListing, source_path: str, outcome: dict) -> EpochFile:
    """An epoch file as its last listing saw it, from the manifest's record of it."""
    return EpochFile(
        listing.run.run_id,
        os.path.join(listing.run.release_root, source_path),
        source_path,
        outcome["epoch_in_name"],
        outcome["layout"],
        outcome["size"],
        outcome["mtime_ns"],
        ctime_ns=outcome.get("ctime_ns", 0),
    )
