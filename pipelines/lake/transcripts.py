"""The lake's transcripts table: a run's transcript files indexed when new or changed, the others' rows kept."""

from __future__ import annotations

import os
from dataclasses import dataclass

import orjson
import polars as pl

from pipelines.lake.inventory import FILE_COLUMNS, error_row
from pipelines.lake.merge import keep_rows, may_differ_from_a_fresh_parse, read_partition
from pipelines.lake.read import OVER_THE_LIMIT, document_bytes, with_objects_fetched
from pipelines.lake_store import LakePath
from pipelines.release.decode import DecodeError
from pipelines.release.discover import OBJECT_SCHEME, OTHER_JSON_LAYOUT, EpochFile, RunListing
from pipelines.release.flatten import ColumnKinds, column_order, combine, extra_column_name, mtime_column, typed_series
from pipelines.release.transcript_fields import FieldColumns
from pipelines.release.transcripts import TranscriptIndex, TranscriptRecord, index_transcripts, take_fields

TRANSCRIPTS = "transcripts"
INDEXED = ("indexed", "indexed_with_warnings")
_ACTIONS = {
    "error": "quarantined: not indexed",
    "transcript_invalid": "indexed: the other lines",
    "transcript_without_id": "indexed: those records left out",
}


TRANSCRIPT_COLUMNS = {
    "run_id": pl.String,
    "source_path": pl.String,
    "trajectory_id": pl.String,
    "id_source": pl.String,
    "format": pl.String,
    "line": pl.Int64,
    "byte_offset": pl.Int64,
    "byte_length": pl.Int64,
    "n_messages": pl.Int64,
    "n_turns": pl.Int64,
    "n_tool_calls": pl.Int64,
    "content_chars": pl.Int64,
    "messages_by_role": pl.String,  # a JSON object, role: count, in order of first appearance (a MAP in SQL)
    "text": pl.String,
}


class TranscriptRows:
    """A run's rows of the transcripts table, gathered as its files are indexed: each file's records taken at once
    (as plain tuples), their fields a batch at a time (FieldColumns), so that no file's index is held to the run's
    end, which would cost the garbage collector more than the indexing."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.paths: list[str] = []
        self.formats: list[str | None] = []
        self.records: list[tuple] = []
        self.fields = FieldColumns()

    def add(self, path: str, index: TranscriptIndex) -> None:
        """Takes an indexed file's records (and their fields: take_fields)."""
        self.paths += [path] * len(index.records)
        self.formats += [index.format] * len(index.records)
        self.records += map(tuple, index.records)
        take_fields(index, self.fields)

    def frame(self) -> tuple[pl.DataFrame, ColumnKinds]:
        """The rows, one per record, its scalar fields as typed columns after the table's own (flatten.typed_series:
        a field whose type changes between records is kept as JSON text), and which of those are JSON text."""
        transposed = zip(*self.records, strict=True) if self.records else ([] for _ in TranscriptRecord._fields)
        by_field = dict(zip(TranscriptRecord._fields, transposed, strict=True))
        columns = {
            "run_id": [self.run_id] * len(self.records),
            "source_path": self.paths,
            "format": self.formats,
            "messages_by_role": [orjson.dumps(by_role).decode() for by_role in by_field["messages_by_role"]],
        }
        columns |= {name: by_field[name] for name in TRANSCRIPT_COLUMNS if name not in columns}
        frame = pl.DataFrame(columns, schema=TRANSCRIPT_COLUMNS)
        fields = self.fields.columns()
        by_column = {extra_column_name(name, TRANSCRIPT_COLUMNS): values for name, values in fields.items()}
        kinds: ColumnKinds = {}
        extras = []
        for name in sorted(by_column):
            series, types = typed_series(name, by_column[name])
            extras.append(series)
            if types is not None:
                kinds[name] = types
        return frame.with_columns(extras) if extras else frame, kinds


def transcript_sources(listing: RunListing, epoch_outcomes: dict[str, dict]) -> dict[str, EpochFile]:
    """The run's files that may hold transcripts, by source path: those listed as such, and the *.json candidates
    of epoch folders that proved no epoch document (files per trajectory beside a document of another name)."""
    sources = {f.source_path: f for f in listing.transcript_files}
    for file in listing.epoch_files:
        outcome = epoch_outcomes.get(file.source_path)
        if file.layout == OTHER_JSON_LAYOUT and outcome is not None and outcome["status"] == "skipped":
            if not outcome["reason"].startswith(OVER_THE_LIMIT):
                sources[file.source_path] = file
    return sources


def _worth_indexing(known: dict | None, file: EpochFile, max_file_bytes: int, text_changed: bool) -> bool:
    """Whether a transcript file is to be indexed (again): new, changed, its text now wanted or no longer, or a
    problem that may have gone without a change (a new limit, a chmod)."""
    if known is None or (known["size"], known["mtime_ns"]) != (file.size, file.mtime_ns):
        return True
    if known.get("ctime_ns", 0) not in (0, file.ctime_ns):
        return True
    if known["status"] in INDEXED:
        return text_changed
    if known["status"] == "skipped":
        return known["reason"].startswith(OVER_THE_LIMIT) and file.size <= max_file_bytes
    if known["reason"] == "unreadable":
        return file.file_path.startswith(OBJECT_SCHEME) or _readable(file.file_path)
    return False


def _readable(path: str) -> bool:
    return os.access(path, os.R_OK)


def transcripts_to_index(
    sources: dict[str, EpochFile], previous: dict, max_file_bytes: int, keep_text: bool
) -> tuple[list[EpochFile], list[str]]:
    """The transcript files to index (new, changed, or worth another look) and the paths the run no longer has."""
    known: dict[str, dict] = previous.get("transcripts", {})
    text_changed = previous.get("transcript_text", False) != keep_text
    changed = [f for path, f in sources.items() if _worth_indexing(known.get(path), f, max_file_bytes, text_changed)]
    return changed, sorted(known.keys() - sources.keys())


@dataclass
class IndexedTranscripts:
    """A run's transcript rows after its new and changed files are indexed, and what became of each file."""

    frame: pl.DataFrame
    kinds: ColumnKinds  # its field columns kept as JSON text
    outcomes: dict[str, dict]  # per source path still in the run
    new_errors: list[dict]  # the indexed files' problems
    stale: set[str]  # the paths whose stored rows and problems were replaced (or are gone)
    n_read: int


def index_run_transcripts(
    run_id: str,
    lake: LakePath,
    sources: dict[str, EpochFile],
    previous: dict,
    max_file_bytes: int,
    keep_text: bool,
) -> IndexedTranscripts:
    """Indexes a run's new and changed transcript files and merges their rows with its stored ones. When a file was
    rewritten or removed and the merged field columns may not be those a first indexing would make, every file of
    the run is indexed again."""
    if not sources and not previous.get("transcripts"):  # most runs: nothing to index, now or before
        return IndexedTranscripts(pl.DataFrame(schema=TRANSCRIPT_COLUMNS), {}, {}, [], set(), 0)
    changed, removed = transcripts_to_index(sources, previous, max_file_bytes, keep_text)
    known = {path: outcome for path, outcome in previous.get("transcripts", {}).items() if path in sources}
    # Only dropping a file's rows can leave merged columns a fresh indexing would not make.
    dropped = [*removed, *(f.source_path for f in changed)]
    replaced = any(previous.get("transcripts", {}).get(path, {}).get("records") for path in dropped)
    n_read = 0
    for whole in (False, True):
        todo = list(sources.values()) if whole else changed
        n_read += len(todo)
        stale = set(sources) | set(removed) if whole else {f.source_path for f in changed} | set(removed)
        outcomes = {path: o for path, o in known.items() if path not in stale}
        rows, new_errors = _index_files(run_id, todo, outcomes, max_file_bytes, keep_text)
        new_frame, new_kinds = rows.frame()
        old = None if whole else keep_rows(read_partition(lake, TRANSCRIPTS, run_id), stale)
        old_kinds = {} if whole else previous.get("transcript_columns", {})
        parts = [(old if old is not None else pl.DataFrame(), old_kinds), (new_frame, new_kinds)]
        frame, kinds = combine(parts, TRANSCRIPT_COLUMNS)
        if whole or not replaced or not may_differ_from_a_fresh_parse(frame, kinds, TRANSCRIPT_COLUMNS):
            break
    if frame.height:
        frame = frame.select(column_order(frame.columns, TRANSCRIPT_COLUMNS)).sort("source_path", "byte_offset")
    return IndexedTranscripts(frame, kinds, dict(sorted(outcomes.items())), new_errors, stale, n_read)


def _index_files(
    run_id: str, files: list[EpochFile], outcomes: dict[str, dict], max_file_bytes: int, keep_text: bool
) -> tuple[TranscriptRows, list[dict]]:
    """Reads and indexes each file, recording its outcome; returns the rows of the files indexed and their problems'
    rows."""
    rows, errors = TranscriptRows(run_id), []
    for file, fetched in with_objects_fetched(files, max_file_bytes):
        outcome = {"size": file.size, "mtime_ns": file.mtime_ns, "ctime_ns": file.ctime_ns, "records": 0}
        outcomes[file.source_path] = outcome
        if file.size > max_file_bytes:
            outcome |= {"status": "skipped", "reason": f"{OVER_THE_LIMIT} ({file.size} > {max_file_bytes} bytes)"}
            continue
        try:
            data = document_bytes(file, max_file_bytes, fetched)
        except DecodeError as exc:
            outcome |= {"status": "quarantined", "reason": exc.error_kind}
            action = _ACTIONS["error"]
            errors.append(error_row(run_id, file.source_path, None, exc.error_kind, "error", exc.message, action))
            continue
        index = index_transcripts(data, file.source_path.rpartition("/")[2], keep_text)
        failed = any(severity == "error" for _, severity, _ in index.problems)
        for kind, severity, message in index.problems:
            action = _ACTIONS["error" if severity == "error" else kind]
            errors.append(error_row(run_id, file.source_path, None, kind, severity, message, action))
        if index.not_a_transcript:
            outcome |= {"status": "skipped", "reason": index.not_a_transcript}
        elif failed:
            outcome |= {"status": "quarantined", "reason": index.problems[0][0]}
        else:
            status = "indexed_with_warnings" if index.problems else "indexed"
            reason = f"{len(index.records)} record(s), {index.format}"
            outcome |= {"status": status, "reason": reason, "records": len(index.records)}
            rows.add(file.source_path, index)
    return rows, errors


def transcript_inventory(run_id: str, sources: dict[str, EpochFile], outcomes: dict[str, dict]) -> pl.DataFrame:
    """One inventory row per file that may hold transcripts: what became of it (indexed, with how many records and
    in what format, layout `transcript`; skipped, and why, as any other entry; quarantined)."""
    paths = sorted(sources)
    files = [sources[path] for path in paths]
    return pl.DataFrame(
        {
            "run_id": [run_id] * len(paths),
            "source_path": paths,
            "layout": [None if outcomes[path]["status"] == "skipped" else "transcript" for path in paths],
            "epoch_in_name": [f.epoch_in_name if f.layout != OTHER_JSON_LAYOUT else None for f in files],
            "size_bytes": [f.size for f in files],
            "mtime": mtime_column([f.mtime_ns for f in files]),
            "status": [outcomes[path]["status"] for path in paths],
            "reason": [outcomes[path]["reason"] for path in paths],
        },
        schema=FILE_COLUMNS,
    )


def kept_errors(stored: pl.DataFrame | None, sources: dict[str, EpochFile], stale: set[str]) -> pl.DataFrame | None:
    """The stored problem rows of transcript files not indexed again."""
    if stored is None:
        return None
    kept = keep_rows(stored, stale)
    return kept.filter(pl.col("source_path").is_in(list(sources)))
