"""One run's ingest: its new and changed files parsed, merged with its stored rows, and its partitions written."""

from __future__ import annotations

import time
from dataclasses import dataclass

import orjson
import polars as pl

from pipelines.lake.inventory import (
    ERROR_COLUMNS,
    FileOutcome,
    error_row,
    folders_without_document,
    inventory_errors,
    length_mismatches,
    missing_document_errors,
    run_inventory,
    source_path_of,
)
from pipelines.lake.manifest import (
    DEFAULT_QUIET_SECONDS,
    RunIngestResult,
    RunWork,
    compare_listing,
    ingest_result,
    lake_version,
    read_manifest,
    settle_unchanged,
    stamps_record,
    write_stamps,
)
from pipelines.lake.merge import concat_frames, keep_rows, may_differ_from_a_fresh_parse, read_partition
from pipelines.lake.parquet import write_atomically, write_text_atomically
from pipelines.lake.paths import manifest_file, partition_file, register_run, run_lock
from pipelines.lake.read import (
    NotAnEpochDocument,
    check_document,
    document_bytes,
    failures_as_invalid_json,
    read_candidate,
    with_objects_fetched,
)
from pipelines.lake.transcripts import (
    TRANSCRIPTS,
    IndexedTranscripts,
    index_run_transcripts,
    kept_errors,
    transcript_inventory,
    transcript_sources,
)
from pipelines.lake.wide import wide_notes
from pipelines.lake_store import LakePath, lake_root, real_location
from pipelines.release.decode import DecodeError, parse_document
from pipelines.release.discover import OTHER_JSON_LAYOUT, EpochFile, RunListing
from pipelines.release.flatten import (
    EPOCH_COLUMNS,
    TRAJECTORY_COLUMNS,
    ColumnKinds,
    RunColumns,
    column_order,
    combine,
    drift_notes,
)


def ingest_run(
    listing: RunListing,
    lake: LakePath,
    max_file_bytes: int,
    only_if_unchanged: bool = False,
    quiet_seconds: int = DEFAULT_QUIET_SECONDS,
    transcript_text: bool = False,
) -> RunIngestResult | None:
    """Brings one run's lake partitions up to date with its folder, parsing only new or changed files, and
    indexing its new or changed transcript files (with their messages' text when transcript_text).

    With only_if_unchanged, returns None instead of parsing when the run has something to parse.
    """
    started = time.perf_counter()
    run_id = listing.run.run_id
    lake = lake_root(lake)
    with run_lock(lake, run_id):
        previous = read_manifest(lake, run_id)
        work = compare_listing(listing, lake, max_file_bytes, previous, transcript_text)
        listing = work.listing  # with the files of a folder it could not list, kept
        if not work.pending:
            quarantined = settle_unchanged(listing, lake, previous, quiet_seconds, transcript_text)
            return ingest_result(run_id, False, 0, quarantined, lake, started, rows=previous.get("rows"))
        if only_if_unchanged:
            return None
        # Not to be settled by its stamps until this rewrite is done: a crash midway must not be hidden.
        write_stamps(lake, run_id, None)
        register_run(lake, run_id)
        parsed = _parse_changes(work, lake, max_file_bytes, previous)
        # The *.json candidates just set aside as no epoch document may be transcripts: known only now.
        sources = transcript_sources(listing, {path: vars(o) for path, o in parsed.outcomes.items()})
        transcripts = index_run_transcripts(run_id, lake, sources, previous, max_file_bytes, transcript_text)
        (epochs, epoch_kinds), (trajectories, trajectory_kinds) = parsed.merged["epochs"], parsed.merged["trajectories"]
        notes = drift_notes(epoch_kinds) + drift_notes(trajectory_kinds)
        errors = _run_errors(listing, lake, parsed, notes, epochs, trajectories, (sources, transcripts))
        epochs, trajectories = _in_order(epochs, trajectories)
        errors = concat_frames([errors, wide_notes(run_id, lake, epochs, trajectories)])
        kinds = {"epochs": epoch_kinds, "trajectories": trajectory_kinds, TRANSCRIPTS: transcripts.kinds}
        tables = {"epochs": epochs, "trajectories": trajectories, TRANSCRIPTS: transcripts.frame}
        outcomes = (parsed.outcomes, sources, transcripts.outcomes)
        quarantined = _write_run(listing, lake, outcomes, tables, kinds, errors, quiet_seconds, transcript_text)
        n_read = parsed.n_parsed + transcripts.n_read
        return ingest_result(run_id, True, n_read, quarantined, lake, started, epochs, trajectories)


@dataclass
class _Parsed:
    """A run's rows after its new and changed files are parsed, and what became of each of its files."""

    merged: dict[str, tuple[pl.DataFrame, ColumnKinds]]  # per table: its rows and its columns kept as JSON text
    outcomes: dict[str, FileOutcome]  # per source path still in the folder
    new_errors: list[dict]  # the parsed files' error and warning rows
    stale: set[str]  # the source paths whose stored rows and errors were replaced (or are gone)
    n_parsed: int


def _parse_changes(work: RunWork, lake: LakePath, max_file_bytes: int, previous: dict) -> _Parsed:
    """Parses a run's new and changed files and merges them with its stored rows. When a file was rewritten or
    removed, and the merged columns may not be those a first ingest would make (a key only it had, a type only it
    brought: may_differ_from_a_fresh_parse), the run is parsed again whole, as a first ingest."""
    listing = work.listing
    run_id = listing.run.run_id
    files: dict[str, dict] = previous.get("files", {})
    current = {f.source_path for f in listing.epoch_files}
    changed, removed = work.changed, set(work.removed)
    known = {k: FileOutcome(**v) for k, v in files.items()}
    replaced = bool(removed) or any(f.source_path in files for f in changed)
    n_parsed = 0
    for whole in (False, True):
        parse = listing.epoch_files if whole else changed
        n_parsed += len(parse)
        stale = current | removed if whole else {f.source_path for f in changed} | removed
        outcomes = {path: o for path, o in known.items() if path in current and path not in stale}
        columns = RunColumns(run_id)
        parse_outcomes, new_errors = _parse_files(run_id, parse, columns, max_file_bytes)
        outcomes.update(parse_outcomes)
        new_epochs, new_trajectories, new_kinds = columns.frames()
        old_kinds = {} if whole else previous.get("json_columns", {})
        merged = {}
        for table, new_frame, schema in (
            ("epochs", new_epochs, EPOCH_COLUMNS),
            ("trajectories", new_trajectories, TRAJECTORY_COLUMNS),
        ):
            # No manifest (none yet, or of other code): every stored row is stale, and so are its columns.
            old_frame = None if whole or not previous else keep_rows(read_partition(lake, table, run_id), stale)
            old = (old_frame if old_frame is not None else pl.DataFrame(), old_kinds.get(table, {}))
            merged[table] = combine([old, (new_frame, new_kinds[table])], schema)
        if (
            whole
            or not replaced
            or not any(
                may_differ_from_a_fresh_parse(*merged[table], schema)
                for table, schema in (("epochs", EPOCH_COLUMNS), ("trajectories", TRAJECTORY_COLUMNS))
            )
        ):
            break
    return _Parsed(merged, outcomes, new_errors, stale, n_parsed)


def _parse_files(
    run_id: str, files: list[EpochFile], columns: RunColumns, max_file_bytes: int
) -> tuple[dict[str, FileOutcome], list[dict]]:
    """Adds each file's rows to columns; returns what became of each file and the error and warning rows.

    Most documents of a run share one shape. The fast path takes them: from their bytes, decoded and checked by the
    shape's typed decoder (RunColumns.add_bytes), or else parsed (add_parsed). The others are checked one by one
    (decode_parsed)."""
    outcomes: dict[str, FileOutcome] = {}
    errors: list[dict] = []

    def outcome(file: EpochFile, status: str, reason: str | None, epoch: int | None) -> None:
        outcomes[file.source_path] = FileOutcome(
            file.size, file.mtime_ns, status, reason, epoch, file.ctime_ns, file.layout, file.epoch_in_name
        )

    for file, fetched in with_objects_fetched(files, max_file_bytes):
        candidate = file.layout == OTHER_JSON_LAYOUT
        try:
            data = (
                read_candidate(file, max_file_bytes, fetched)
                if candidate
                else document_bytes(file, max_file_bytes, fetched)
            )
            fast = columns.add_bytes(file, data)
            if not fast:
                with failures_as_invalid_json():
                    parsed, parse_warnings = parse_document(data)
                fast = not parse_warnings and columns.add_parsed(file, parsed)
            if fast:
                outcome(file, "loaded", None, file.epoch_in_name)
                continue
            doc = check_document(file, parsed, parse_warnings)
        except NotAnEpochDocument as exc:
            outcome(file, "skipped", str(exc), None)
            continue
        except DecodeError as exc:
            if candidate and exc.error_kind in ("not_an_object", "missing_key"):
                outcome(file, "skipped", f"not an epoch document: {exc.message}", None)
            else:
                action = "quarantined: not loaded"
                errors.append(
                    error_row(
                        run_id, file.source_path, file.epoch_in_name, exc.error_kind, "error", exc.message, action
                    )
                )
                outcome(file, "quarantined", exc.error_kind, file.epoch_in_name)
            continue
        for kind, message in doc.warnings:
            errors.append(error_row(run_id, file.source_path, doc.epoch, kind, "warning", message, "loaded"))
        outcome(file, "loaded_with_warnings" if doc.warnings else "loaded", None, doc.epoch)
        columns.add(file, doc)
    return outcomes, errors


def _run_errors(
    listing: RunListing,
    lake: LakePath,
    parsed: _Parsed,
    notes: list[str],
    epochs: pl.DataFrame,
    trajectories: pl.DataFrame,
    transcripts: tuple[dict[str, EpochFile], IndexedTranscripts],
) -> pl.DataFrame:
    """The run's errors partition: the stored rows of files not parsed (or indexed) again, the parsed and indexed
    files' rows, and the inventory problems, type-drift notes and length mismatches, which are recomputed on every
    change."""
    run_id = listing.run.run_id
    sources, indexed = transcripts
    current = {f.source_path: f for f in listing.epoch_files}
    stored = read_partition(lake, "errors", run_id)
    parse_errors = keep_rows(stored, parsed.stale)
    if parse_errors is not None:  # the epoch files' own; a candidate that may hold transcripts has kept_errors'
        documents = [path for path in current if path not in sources]
        parse_errors = parse_errors.filter(pl.col("source_path").is_in(documents))
    errors = _stacked(
        [
            parse_errors,
            pl.DataFrame(parsed.new_errors, schema=ERROR_COLUMNS),
            kept_errors(stored, sources, indexed.stale),
            pl.DataFrame(indexed.new_errors, schema=ERROR_COLUMNS),
            inventory_errors(run_id, listing.skipped),
            missing_document_errors(run_id, current, {path: vars(o) for path, o in parsed.outcomes.items()}),
        ]
    )
    errors = errors.filter(~pl.col("error_kind").is_in(["type_drift", "extra_length_mismatch", "wide_extras"]))
    drift = [
        error_row(run_id, f"{run_id}/", None, "type_drift", "warning", note, "loaded: every value kept as JSON text")
        for note in notes
    ]
    return _stacked(
        [errors, pl.DataFrame(drift + length_mismatches(run_id, epochs, trajectories), schema=ERROR_COLUMNS)]
    )


def _stacked(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    """Error rows stacked in order, parts without rows left out (a concat costs a plan per frame, and most runs have
    no error); ERROR_COLUMNS' empty frame when none has rows."""
    present = [frame for frame in frames if frame is not None and frame.height]
    return concat_frames(present) if present else pl.DataFrame(schema=ERROR_COLUMNS)


def _write_run(
    listing: RunListing,
    lake: LakePath,
    outcomes: tuple[dict[str, FileOutcome], dict[str, EpochFile], dict[str, dict]],
    tables: dict[str, pl.DataFrame],
    kinds: dict[str, ColumnKinds],
    errors: pl.DataFrame,
    quiet_seconds: int,
    transcript_text: bool,
) -> int:
    """Writes a run's partitions, then its manifest, then its stamps; returns its count of quarantined files.
    outcomes: what became of its epoch files, the files that may hold transcripts, and what became of those."""
    run_id = listing.run.run_id
    epoch_outcomes, sources, transcript_outcomes = outcomes
    current = {f.source_path: f for f in listing.epoch_files}
    for table, frame in tables.items():
        if frame.height:
            write_atomically(frame, partition_file(lake, table, run_id))
        else:
            partition_file(lake, table, run_id).unlink(missing_ok=True)
    write_atomically(
        errors if errors.width else pl.DataFrame(schema=ERROR_COLUMNS), partition_file(lake, "errors", run_id)
    )
    inventory = run_inventory(run_id, current, epoch_outcomes, listing.skipped)
    # A candidate set aside as no epoch document that holds transcripts is listed as what it is.
    transcript_rows = {p for p in sources if p not in current or transcript_outcomes[p]["status"] != "skipped"}
    if transcript_rows:
        inventory = pl.concat(
            [
                inventory.filter(~pl.col("source_path").is_in(list(transcript_rows))),
                transcript_inventory(run_id, {p: sources[p] for p in transcript_rows}, transcript_outcomes),
            ]
        )
    write_atomically(inventory, partition_file(lake, "files", run_id))
    # The manifest goes last, then the stamps: a crash before it only means the same files are parsed again.
    statuses = [*(o.status for o in epoch_outcomes.values()), *(o["status"] for o in transcript_outcomes.values())]
    quarantined = statuses.count("quarantined")
    unsettled = quarantined + len(folders_without_document(current, {p: vars(o) for p, o in epoch_outcomes.items()}))
    manifest = {
        "code_version": lake_version(),
        "run_id": run_id,
        "release": listing.run.release,
        # Which folder of that name it came from: another folder of the same name is not where its runs went.
        "release_root": real_location(listing.run.release_root),
        "files": {path: vars(o) for path, o in sorted(epoch_outcomes.items())},
        "skipped": [dict(vars(s)) for s in sorted(listing.skipped, key=source_path_of)],
        "json_columns": {table: kinds[table] for table in ("epochs", "trajectories")},
        "transcripts": transcript_outcomes,
        "transcript_columns": kinds[TRANSCRIPTS],
        "transcript_text": transcript_text,
        # Row counts, so that a build with nothing to do opens no Parquet file at all.
        "rows": {table: frame.height for table, frame in tables.items()},
    }
    # orjson: the manifest lists every file of the run; the stdlib's indenting encoder is pure Python.
    write_text_atomically(orjson.dumps(manifest, option=orjson.OPT_INDENT_2).decode(), manifest_file(lake, run_id))
    write_stamps(lake, run_id, stamps_record(listing, unsettled, manifest["rows"], quiet_seconds, transcript_text))
    return quarantined


def _in_order(epochs: pl.DataFrame, trajectories: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Both tables' rows in the lake's order, (epoch, source_path[, traj_index]), and their columns in its order.

    Rows usually arrive in it (files listed by name, one document per epoch), and are then not sorted: with one
    document per epoch, a document's trajectories were added together and in order, so they are in order when
    their epochs are.
    """
    epochs, trajectories = _in_column_order(epochs, EPOCH_COLUMNS), _in_column_order(trajectories, TRAJECTORY_COLUMNS)
    if not epochs.height:
        return epochs, trajectories
    one_per_epoch = epochs["epoch"].n_unique() == epochs.height
    if not (one_per_epoch and epochs["epoch"].is_sorted()):
        epochs = epochs.sort("epoch", "source_path", maintain_order=True)
    if trajectories.height and not (one_per_epoch and trajectories["epoch"].is_sorted()):
        trajectories = trajectories.sort("epoch", "source_path", "traj_index", maintain_order=True)
    return epochs, trajectories


def _in_column_order(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """The frame's columns in the lake's order (column_order): the same run's partition is the same file whether it
    was ingested at once or file by file."""
    ordered = column_order(frame.columns, schema)
    return frame if ordered == frame.columns else frame.select(ordered)
