"""Indexes trajectory transcripts: each record's trajectory id, where it sits in its file, and what any shape gives."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import orjson

from pipelines.release.decode import json_kind
from pipelines.release.discover import resolve_inside
from pipelines.release.transcript_fields import FieldColumns
from pipelines.settings import OBJECT_SCHEME

JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
# A transcript's messages each have a role: a file that never spells the key (a config, a log) is not one, which a
# byte search tells without parsing.
ROLE_TOKEN = b'"role"'
# Where a record's trajectory id is looked for, in this order (a dotted name is a key of an object); a file holding
# one record and none of these is named after its trajectory (<id>.json).
ID_KEYS = ("trajectory_id", "metadata.trajectory_id", "id", "metadata.id")
FILE_NAME_ID = "file name"
# Each id key, whether it is in the metadata object, and its name there.
_ID_PLACES = tuple((key, "." in key, key.rpartition(".")[2]) for key in ID_KEYS)
# The key of a record's list of messages, tried first; then any key whose value is a list of objects with a role.
MESSAGE_KEYS = ("messages", "transcript", "conversation", "turns")
# Content blocks that are tool calls (Anthropic's tool_use, others' tool_call and function_call).
TOOL_BLOCK_TYPES = frozenset({"tool_use", "tool_call", "function_call"})
JSON_LINES, JSON_ARRAY, JSON_OBJECT = "jsonl", "json_array", "json_object"


class TranscriptRecord(NamedTuple):
    """One record of a transcript file: its trajectory id, where it is, and its schema-free measures."""

    trajectory_id: str
    id_source: str  # the key it was found at (ID_KEYS), or FILE_NAME_ID
    line: int | None  # 1-based, in a JSON Lines file
    byte_offset: int
    byte_length: int
    n_messages: int
    messages_by_role: dict[str, int]
    n_turns: int
    n_tool_calls: int
    content_chars: int
    messages_key: str | None  # where its messages are (find_messages)
    text: str | None = None  # the messages' text, when kept


@dataclass
class TranscriptIndex:
    """What indexing one file found: its format and records, or why it is no transcript, and its problems."""

    format: str | None = None
    records: list[TranscriptRecord] = field(default_factory=list)
    # each record as read, its messages taken out: the rest gives its fields (take_fields)
    sources: list[dict] = field(default_factory=list)
    # (error_kind, severity, message): a file that does not parse is an error, a bad line or a record without an id a
    # warning (the rest of the file is indexed)
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    not_a_transcript: str | None = None  # why the file holds no transcript (a config, say): inventoried only


def index_transcripts(data: bytes, name: str, keep_text: bool = False) -> TranscriptIndex:
    """Indexes a file's records: JSON Lines (one record a line), a JSON array of records, or one JSON object (a file
    per trajectory). name is the file's name: its suffix says JSON Lines, its stem is a lone record's id when the
    record holds none. Content is data: nothing in it is followed, run or fetched."""
    if ROLE_TOKEN not in data:
        return TranscriptIndex(not_a_transcript="no message with a `role` in it: not a transcript")
    try:
        return _index(data, name, keep_text)
    except Exception as exc:  # a parser's or walker's own failure on hostile input is the file's problem
        message = f"cannot be indexed: {type(exc).__name__}: {exc}"[:300]
        return TranscriptIndex(problems=[("transcript_invalid", "error", message)])


def _index(data: bytes, name: str, keep_text: bool) -> TranscriptIndex:
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # a byte order mark, which some writers put first
    if name.lower().endswith(JSON_LINES_SUFFIXES):
        found = _json_lines(data, start, keep_text)
    else:
        try:
            value = loads(data[start:])
        except orjson.JSONDecodeError as exc:
            # A .json file of JSON Lines (more than one value): indexed as such when its first line is a record.
            first = data[start:].split(b"\n", 1)[0]
            if b"\n" in data[start:].strip() and _loads_object(first) is not None:
                found = _json_lines(data, start, keep_text)
            else:
                return TranscriptIndex(problems=[("transcript_invalid", "error", f"does not parse as JSON: {exc}")])
        else:
            found = _one_value(value, data, start, name, keep_text)
    if found.format is not None and not any(map(attrgetter("n_messages"), found.records)) and not found.problems:
        return TranscriptIndex(not_a_transcript="no record with a list of messages: not a transcript")
    return found


def take_fields(index: TranscriptIndex, fields: FieldColumns) -> None:
    """Moves an index's records (their messages taken out) into a run's field columns, which work out their scalar
    fields; a record's id and messages are no fields."""
    fields.add(index.sources, [(record.id_source, record.messages_key) for record in index.records])
    index.sources = []


def loads(data: bytes):
    """JSON text's value, by orjson; failing that by the standard library, which reads Python's `NaN` and
    `Infinity` tokens; orjson's error (its message has the line and column) when neither reads it."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if b"NaN" not in data and b"Infinity" not in data:
            raise
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise exc from None


def _loads_object(line: bytes) -> dict | None:
    try:
        value = loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class _Collector:
    """Records and their problems as a file is read: records without an id counted, with the first one's place."""

    def __init__(self, file_format: str, keep_text: bool):
        self.index = TranscriptIndex(format=file_format)
        self.keep_text = keep_text
        self.without_id: list[str] = []

    def add(self, record: dict, where: int | str, line: int | None, offset: int, length: int, file_id=None) -> None:
        """Indexes a record; where: its place in the file, as the warning of a record without an id says it (a line
        number stands for `line <number>`)."""
        indexed = index_record(record, line, offset, length, file_id, self.keep_text)
        if indexed is not None:
            self.index.records.append(indexed)
            self.index.sources.append(record)
        elif find_messages(record)[0] is not None:  # a record of messages that cannot be linked
            self.without_id.append(f"line {where}" if type(where) is int else where)

    def done(self) -> TranscriptIndex:
        if self.without_id:
            keys = ", ".join(f"`{key}`" for key in ID_KEYS)
            self.index.problems.append(
                (
                    "transcript_without_id",
                    "warning",
                    f"{len(self.without_id)} record(s) with no trajectory id (none of {keys}), the first at "
                    f"{self.without_id[0]}",
                )
            )
        return self.index


def _json_lines(data: bytes, start: int, keep_text: bool) -> TranscriptIndex:
    """A JSON Lines file's records: each line an object; a line that is not is reported, the others indexed."""
    collector = _Collector(JSON_LINES, keep_text)
    bad: list[tuple[int, str]] = []
    offset = start
    for number, line in enumerate(data[start:].split(b"\n"), 1):
        line_start, offset = offset, offset + len(line) + 1
        body = line.rstrip(b"\r")
        if not body.strip():
            continue
        try:
            record = loads(body)
        except orjson.JSONDecodeError as exc:
            bad.append((number, f"does not parse ({exc})"))
            continue
        if type(record) is not dict:
            bad.append((number, f"is a JSON {json_kind(record)}, not an object"))
            continue
        collector.add(record, number, number, line_start, len(body))
    index = collector.done()
    if bad:
        number, why = bad[0]
        severity = "warning" if index.records else "error"
        message = f"{len(bad)} line(s) that are not a record; line {number} {why}"
        index.problems.insert(0, ("transcript_invalid", severity, message))
    return index


def _one_value(value, data: bytes, start: int, name: str, keep_text: bool) -> TranscriptIndex:
    """A .json file's records: a JSON array of records, or one object (a transcript per file)."""
    if isinstance(value, dict):
        collector = _Collector(JSON_OBJECT, keep_text)
        stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        collector.add(value, "the file's object", None, start, len(data) - start, stem or None)
        return collector.done()
    if not isinstance(value, list):
        return TranscriptIndex(not_a_transcript=f"a JSON {json_kind(value)}, not a record: not a transcript")
    collector = _Collector(JSON_ARRAY, keep_text)
    spans = array_element_spans(data)
    for number, element in enumerate(value):
        where = f"element {number} of the array"
        if not isinstance(element, dict):
            continue  # an array may mix records with other values; only objects are records
        offset, length = spans[number] if spans is not None and len(spans) == len(value) else (start, len(data) - start)
        collector.add(element, where, None, offset, length)
    return collector.done()


_STRUCTURAL = np.zeros(256, dtype=bool)
_STRUCTURAL[list(b'"\\[]{},')] = True
_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_OPENING, _CLOSING = np.array([ord("["), ord("{")]), np.array([ord("]"), ord("}")])


def array_element_spans(data: bytes) -> list[tuple[int, int]] | None:
    """(byte offset, length) of each element of the JSON array data holds, found from its structural characters
    alone (brackets, braces, commas outside strings), in a few passes of numpy over them; None when the top level is
    no array."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    positions = np.flatnonzero(_STRUCTURAL[buffer])
    chars = buffer[positions]
    # A backslash escapes the next byte: of a run of them, an odd-length one escapes the byte after it.
    backslashes = positions[chars == _BACKSLASH]
    escaped = np.zeros(0, dtype=positions.dtype)
    if backslashes.size:
        run_starts = np.flatnonzero(np.diff(backslashes, prepend=-2) != 1)
        run_ends = np.append(run_starts[1:], backslashes.size) - 1
        odd = (run_ends - run_starts) % 2 == 0
        escaped = backslashes[run_ends[odd]] + 1
    kept = (chars != _BACKSLASH) & ~np.isin(positions, escaped)
    positions, chars = positions[kept], chars[kept]
    quotes = chars == _QUOTE
    inside = (np.cumsum(quotes) - quotes) % 2 == 1  # an odd number of quotes before it: inside a string
    outside = ~quotes & ~inside
    positions, chars = positions[outside], chars[outside]
    if not chars.size or chars[0] != ord("["):
        return None
    opens, closes = np.isin(chars, _OPENING), np.isin(chars, _CLOSING)
    depth_after = np.cumsum(opens.astype(np.int64) - closes)
    depth_before = depth_after - opens + closes
    ends = positions[((chars == _COMMA) & (depth_before == 1)) | (closes & (depth_after == 0))]
    spans, begin = [], int(positions[0]) + 1
    for end in ends.tolist():
        segment = data[begin:end]
        stripped = segment.lstrip()
        body = stripped.rstrip()
        if body:
            spans.append((begin + len(segment) - len(stripped), len(body)))
        begin = end + 1
    return spans


def record_id(record: dict) -> tuple[str, str] | None:
    """A record's trajectory id and the key it is at (ID_KEYS, in order); None when it has none. An id is a
    non-empty string, or a whole number (as its digits)."""
    metadata = record.get("metadata")
    for key, in_metadata, name in _ID_PLACES:
        source = metadata if in_metadata else record
        if type(source) is not dict:
            continue
        value = source.get(name)
        if isinstance(value, str) and value:
            return value, key
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value), key
    return None


def index_record(
    record: dict, line: int | None, offset: int, length: int, file_id: str | None = None, keep_text: bool = False
) -> TranscriptRecord | None:
    """A record's index entry, or None when it has no trajectory id (file_id, the file's name, serves a lone
    record); keep_text: with its messages' text. The messages of a record indexed are taken out of it, which leaves
    its fields."""
    found = record_id(record)
    if found is None:
        if file_id is None:
            return None
        found = (file_id, FILE_NAME_ID)
    trajectory_id, id_source = found
    messages_key, holder, key = _messages_place(record)
    messages = [] if holder is None else holder.pop(key)  # not kept with the record's fields: they are the bulk
    by_role, turns, tool_calls, chars = measure_messages(messages)
    return TranscriptRecord(
        trajectory_id,
        id_source,
        line,
        offset,
        length,
        sum(by_role.values()),
        by_role,
        turns,
        tool_calls,
        chars,
        messages_key,
        messages_text(messages) if keep_text else None,
    )


def measure_messages(messages: list) -> tuple[dict[str, int], int, int, int]:
    """Messages by role, turns (runs of one role's messages, the system's left out), tool calls and characters of
    content. One pass with the common shapes (a string content, a `tool_calls` list) taken first: it runs on every
    message of every transcript."""
    by_role: dict[str, int] = {}
    turns = tool_calls = chars = 0
    previous = None
    for message in messages:
        if type(message) is not dict:
            continue
        role = message.get("role")
        if type(role) is not str:
            role = orjson.dumps(role).decode()
        by_role[role] = by_role.get(role, 0) + 1
        if role != previous:
            turns += role != "system"
            previous = role
        content = message.get("content")
        if type(content) is str:
            chars += len(content)
            calls = message.get("tool_calls")
            if type(calls) is list:
                tool_calls += len(calls)
            if "function_call" in message:
                tool_calls += type(message["function_call"]) is dict
        else:
            chars += len(content_text(content))
            tool_calls += len(message_tool_calls(message))
    return by_role, turns, tool_calls, chars


def find_messages(record: dict) -> tuple[str | None, list]:
    """The record's list of messages and its key (dotted when it is in an object of the record): MESSAGE_KEYS first,
    then any list whose first item is an object with a role; (None, []) when there is none."""
    name, holder, key = _messages_place(record)
    return (None, []) if holder is None else (name, holder[key])


def _messages_place(record: dict) -> tuple[str | None, dict | None, str | None]:
    """Where find_messages finds the messages: their name, the object holding them and their key in it."""
    for key in MESSAGE_KEYS:
        if _is_messages(record.get(key)):
            return key, record, key
    for key, value in record.items():
        if _is_messages(value):
            return key, record, key
    for key, value in record.items():
        if isinstance(value, dict):
            for inner, messages in value.items():
                if _is_messages(messages):
                    return f"{key}.{inner}", value, inner
    return None, None, None


def _is_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], dict) and "role" in value[0]


def message_tool_calls(message: dict) -> list:
    """A message's tool calls: its `tool_calls` list, a `function_call` object, content blocks of a tool-call type."""
    calls = message.get("tool_calls")
    found = list(calls) if isinstance(calls, list) else []
    if isinstance(message.get("function_call"), dict):
        found.append(message["function_call"])
    content = message.get("content")
    if isinstance(content, list):
        found += [block for block in content if isinstance(block, dict) and block.get("type") in TOOL_BLOCK_TYPES]
    return found


def content_text(content, depth: int = 0) -> str:
    """A message's content as text: a string as it is; of content blocks, their `text` (or their own `content`,
    as a tool result's), joined by newlines."""
    if isinstance(content, str):
        return content
    if depth > 4:  # deeper blocks than any writer makes: not text
        return ""
    if isinstance(content, dict):
        text = content.get("text")
        return text if isinstance(text, str) else content_text(content.get("content"), depth + 1)
    if isinstance(content, list):
        return "\n".join(part for block in content if (part := content_text(block, depth + 1)))
    return ""


def messages_text(messages: list) -> str:
    """The messages as searchable text: a line `role: content` per message, and `role [tool call]: <call as JSON>`
    per tool call."""
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        role = role if isinstance(role, str) else orjson.dumps(role).decode()
        lines.append(f"{role}: {content_text(message.get('content'))}")
        lines += [f"{role} [tool call]: {orjson.dumps(call).decode()}" for call in message_tool_calls(message)]
    return "\n".join(lines)


def read_span(release_root: str, source_path: str, offset: int, length: int) -> bytes:
    """length bytes at offset of a release's file (a record where the index placed it): opened only inside the
    release and only as a regular file; in a bucket, one ranged GET."""
    if release_root.startswith(OBJECT_SCHEME):
        from pipelines.release.objects import filesystem

        return filesystem().cat_file(f"{release_root.rstrip('/')}/{source_path}", start=offset, end=offset + length)
    root = Path(release_root)
    fd = os.open(resolve_inside(root / source_path, root), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)
