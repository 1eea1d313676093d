"""Decodes one epoch document into a typed EpochDoc, or says precisely why it cannot be loaded."""

from __future__ import annotations

import codecs
import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

REQUIRED_KEYS = ("epoch", "trajectory_ids", "rewards", "advantages")
DOCUMENTED_SCALARS = ("loss", "mean_reward", "kl_sample_train", "sample_entropy", "train_entropy")
DOCUMENTED_KEYS = (*REQUIRED_KEYS, *DOCUMENTED_SCALARS, "snapshot_id")

Scalar = bool | int | float | str | None


# The JSON names of parsed values' types, as a message says them: a user wrote `null`, never a NoneType.
_JSON_KINDS = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    list: "list",
    dict: "object",
}


def json_kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _found(value: Any) -> str:
    """A wrong value as a message shows it: its JSON type, then its first characters as JSON writes them."""
    return "null" if value is None else f"{json_kind(value)} {json.dumps(value, ensure_ascii=False)[:40]}"


class DecodeError(Exception):
    """A document that cannot be loaded; error_kind is a stable keyword, the message says where and what."""

    def __init__(self, error_kind: str, message: str):
        super().__init__(message)
        self.error_kind = error_kind
        self.message = message


@dataclass
class EpochDoc:
    epoch: int
    trajectory_ids: list[str]
    rewards: list[float | None]
    advantages: list[float | None]
    scalars: dict[str, float | None]  # the documented numeric keys
    snapshot_id: str | None
    scalar_extras: dict[str, Scalar] = field(default_factory=dict)
    # One value per trajectory: scalars, or objects and lists (flatten types them, or keeps them as JSON text)
    array_extras: dict[str, list[Any]] = field(default_factory=dict)
    json_extras: dict[str, str] = field(default_factory=dict)  # nested extras, kept as JSON text
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (error_kind, message) of a loaded document

    @property
    def n_trajectories(self) -> int:
        return len(self.trajectory_ids)


# Exact types, as both JSON parsers produce them; bool is its own type, so a set of types tells it from a number.
NUMBER_TYPES = frozenset({int, float, type(None)})
SCALAR_TYPES = frozenset({bool, int, float, str, type(None)})


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _position(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {column} (char {offset})"


@dataclass
class _DuplicateKeys:
    """An object_pairs_hook for the standard parser that notes every key repeated within one object."""

    found: list[tuple[str, bool]] = field(default_factory=list)  # (key, both values equal)

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict:
        result = dict(pairs)  # the last value wins, as everywhere in Python
        if len(result) != len(pairs):
            seen: dict[str, Any] = {}
            for key, value in pairs:
                if key in seen:
                    self.found.append((key, _same_value(seen[key], value)))
                seen[key] = value
        return result


def _same_value(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, allow_nan=True) == json.dumps(b, sort_keys=True, allow_nan=True)


def keys_outside_lists(doc: Any) -> int:
    """How many keys the document's objects hold, not counting objects inside lists (at most all of them)."""
    if type(doc) is not dict:
        return 0
    count, objects = 0, [doc]
    while objects:
        obj = objects.pop()
        count += len(obj)
        objects += [value for value in obj.values() if type(value) is dict]
    return count


def _may_hold_duplicate_keys(data: bytes, doc: Any) -> bool:
    """Cheap tests that are never wrong when they say no.

    First, colons: every key in the text is followed by one, so a text with no more colons than the parsed
    objects hold keys has no key twice (colons inside strings only make the test say maybe). Then quotes:
    re-serializing drops a repeated key, and with it quotes. Every string of the input reappears in orjson's
    output with the same quote characters, unless the input spells characters below U+0040 (a quote, say) as
    \\u00XX escapes; then the exact check runs instead.
    """
    if data.count(b":") <= keys_outside_lists(doc):
        return False
    if data.find(b"\\") >= 0 and data.find(b"\\u00") >= 0:
        return True
    return orjson.dumps(doc).count(b'"') != data.count(b'"')


_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def may_hold_lone_surrogate(data: bytes) -> bool:
    """Whether the text spells a surrogate as an escape (\\udXXX), which the standard parser's path checks."""
    return b"\\" in data and _LONE_SURROGATE.search(data) is not None


# Every digit made a 0, every byte that continues a number into a float ('.', 'e', 'E') a '.', any other a space.
_NUMERALS_ONLY = bytes(
    ord("0") if chr(b) in "0123456789" else ord(".") if chr(b) in ".eE" else ord(" ") for b in range(256)
)
_LONG_INTEGER_START = b" " + b"0" * 19


def may_hold_an_integer_beyond_64_bits(data: bytes) -> bool:
    """Whether the text may hold an integer beyond 64 bits (below -2**63 or above 2**64 - 1), which orjson reads as a
    float. Never wrong when it says no: such an integer has at least 19 digits, and none before them; a float
    written with as many digits before its point, or digits in a string, only make it say maybe."""
    return _LONG_INTEGER_START in data.translate(_NUMERALS_ONLY)


def utf16_text(data: bytes) -> bool:
    """Whether text is UTF-16 or UTF-32 (a byte-order mark, or NUL bytes, which UTF-8 text never starts with)."""
    return data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in data[:4]


def _encoding_problem(data: bytes) -> DecodeError | None:
    """A document in another encoding than JSON's UTF-8, named as such: the parsers see only a bad first byte."""
    if data.startswith(codecs.BOM_UTF8):
        return DecodeError(
            "invalid_json",
            "the file starts with a UTF-8 byte-order mark (bytes EF BB BF), which JSON text may not; saved without "
            "it, it loads",
        )
    if utf16_text(data):
        return DecodeError(
            "invalid_utf8", "the file is UTF-16 or UTF-32 text (a byte-order mark or NUL bytes at its start), not UTF-8"
        )
    return None


def _stdlib_parse(data: bytes) -> tuple[Any, _DuplicateKeys]:
    if problem := _encoding_problem(data):
        raise problem
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid_utf8", f"invalid UTF-8 at {_position(data, exc.start)}: {exc.reason}") from None
    duplicates = _DuplicateKeys()
    try:
        doc = json.loads(text, object_pairs_hook=duplicates)
    except json.JSONDecodeError as exc:
        # A string left open runs to the end of the file: the file was cut short there too.
        cut_short = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        kind = "truncated_json" if cut_short else "invalid_json"
        # "Unterminated string starting at": the position that follows is where the string starts.
        where = f"{exc.msg.removesuffix(' at')} at line {exc.lineno}, column {exc.colno} (char {exc.pos})"
        raise DecodeError(kind, where) from None
    except RecursionError:
        raise DecodeError("invalid_json", "nested too deeply to parse") from None
    if _LONE_SURROGATE.search(data):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DecodeError("invalid_utf8", f"a string holds an unpaired surrogate escape ({exc.reason})") from None
    return doc, duplicates


def _duplicate_problem(data: bytes, duplicates: _DuplicateKeys) -> tuple[str, str] | None:
    """(severity, message) for the repeated keys found, with where the first repeat is."""
    if not duplicates.found:
        return None
    key, _ = duplicates.found[0]
    repeats = list(re.finditer(re.escape(json.dumps(key).encode()) + rb"\s*:", data))
    where = f" (repeated at {_position(data, repeats[1].start())})" if len(repeats) > 1 else ""
    keys = ", ".join(dict.fromkeys(f"`{k}`" for k, _ in duplicates.found))
    if all(same for _, same in duplicates.found):
        return "warning", f"key(s) {keys} appear more than once in one object with equal values{where}"
    return "error", f"key(s) {keys} appear more than once in one object with different values{where}"


def parse_document(data: bytes) -> tuple[Any, list[tuple[str, str]]]:
    """Parses JSON as Python's json module wrote it (NaN and Infinity tokens included), and its warnings.

    Keys repeated within one object, which both parsers silently collapse to the last value, are found too:
    with equal values the document loads with a warning; with different values it is refused, as nobody can
    tell which value was meant.
    """
    if not data.strip():
        raise DecodeError("empty_file", "the file is empty")
    if may_hold_an_integer_beyond_64_bits(data):  # the standard parser keeps it an integer
        doc, duplicates = _stdlib_parse(data)
    else:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            # orjson rejects NaN/Infinity tokens and gives no line numbers; the standard parser does both.
            doc, duplicates = _stdlib_parse(data)
        else:
            if not _may_hold_duplicate_keys(data, doc):
                return doc, []
            doc, duplicates = _stdlib_parse(data)
    problem = _duplicate_problem(data, duplicates)
    if problem is None:
        return doc, []
    severity, message = problem
    if severity == "error":
        raise DecodeError("duplicate_key", message)
    return doc, [("duplicate_key", message)]


def parse_json(data: bytes) -> Any:
    """Parses JSON as Python's json module wrote it (NaN and Infinity tokens included)."""
    return parse_document(data)[0]


# The stdlib encoder for nested extras: its text (`{"a": 1e-05}`) is what the lake has always stored. One encoder,
# not json.dumps per value, which builds a new one for every call with these options.
_NESTED_ENCODER = json.JSONEncoder(allow_nan=True, sort_keys=True)


def nested_json_text(value: Any) -> str:
    """The JSON text stored for an extra that is neither a scalar nor a per-trajectory list; RecursionError when it
    is nested too deeply for Python's encoder (orjson parses deeper)."""
    return _NESTED_ENCODER.encode(value)


# A per-trajectory extra of objects or lists is typed, compared and encoded by recursive code (polars, json) well
# after decoding: a bound on its depth, checked here, keeps all of that within Python's recursion limit.
MAX_PER_TRAJECTORY_DEPTH = 64


def nesting_depth(value: Any) -> int:
    """How many objects and lists deep a value goes (a scalar: 0), without recursion."""
    depth, level = 0, [value]
    while containers := [item for item in level if type(item) in (dict, list)]:
        depth += 1
        level = [
            item for container in containers for item in (container.values() if type(container) is dict else container)
        ]
    return depth


def _number_list(doc: dict, key: str) -> list[float | None]:
    values = doc[key]
    if not isinstance(values, list):
        raise DecodeError("wrong_type", f"`{key}` should be a list of numbers, found {json_kind(values)}")
    kinds = set(map(type, values))  # one pass in C; the loop below only runs to name the bad entry
    if kinds <= NUMBER_TYPES:
        return values if int not in kinds else [None if v is None else _to_float(key, v) for v in values]
    for index, value in enumerate(values):
        if value is not None and not _is_number(value):
            raise DecodeError("wrong_type", f"`{key}[{index}]` should be a number, found {_found(value)}")
    return [None if v is None else _to_float(key, v) for v in values]


def _to_float(key: str, value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:
        raise DecodeError("wrong_type", f"`{key}` holds an integer too large for a float: {value!r:.40}") from None


def decode_epoch(data: bytes) -> EpochDoc:
    """Decodes the bytes of one epoch document; raises DecodeError when it cannot be loaded whole."""
    return decode_parsed(*parse_document(data))


def decode_parsed(doc: Any, parse_warnings: list[tuple[str, str]]) -> EpochDoc:
    """Checks a parsed epoch document (see parse_document) key by key and value by value."""
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object", f"the document is a JSON {json_kind(doc)}, not an object")
    missing = [key for key in REQUIRED_KEYS if key not in doc]
    if missing:
        raise DecodeError("missing_key", "required key(s) missing: " + ", ".join(f"`{k}`" for k in missing))

    epoch = doc["epoch"]
    if isinstance(epoch, float) and epoch.is_integer():
        epoch = int(epoch)
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise DecodeError("wrong_type", f"`epoch` should be an integer, found {_found(epoch)}")

    trajectory_ids = doc["trajectory_ids"]
    if not isinstance(trajectory_ids, list) or not set(map(type, trajectory_ids)) <= {str}:
        raise DecodeError("wrong_type", "`trajectory_ids` should be a list of strings")
    rewards = _number_list(doc, "rewards")
    advantages = _number_list(doc, "advantages")
    n = len(trajectory_ids)
    if not (len(rewards) == len(advantages) == n):
        raise DecodeError(
            "length_mismatch",
            f"`trajectory_ids` has {n} entries, `rewards` {len(rewards)}, `advantages` {len(advantages)}",
        )

    warnings: list[tuple[str, str]] = list(parse_warnings)
    scalars: dict[str, float | None] = {}
    for key in DOCUMENTED_SCALARS:
        value = doc.get(key)
        if key not in doc:
            warnings.append(("missing_key", f"documented key `{key}` is missing; loaded as null"))
        elif value is not None and not _is_number(value):
            raise DecodeError("wrong_type", f"`{key}` should be a number, found {_found(value)}")
        scalars[key] = None if value is None else _to_float(key, value)

    snapshot_id = doc.get("snapshot_id")
    if "snapshot_id" not in doc:
        warnings.append(("missing_key", "documented key `snapshot_id` is missing; loaded as null"))
    elif snapshot_id is not None and not isinstance(snapshot_id, str):
        raise DecodeError("wrong_type", f"`snapshot_id` should be a string, found {json_kind(snapshot_id)}")

    parsed = EpochDoc(epoch, trajectory_ids, rewards, advantages, scalars, snapshot_id, warnings=warnings)
    _add_extras(parsed, doc, n)
    return parsed


def _add_extras(parsed: EpochDoc, doc: dict, n: int) -> None:
    """The document's undocumented keys into parsed: scalars, per-trajectory lists (one value per trajectory), and
    the rest as JSON text."""
    for key, value in doc.items():
        if key in DOCUMENTED_KEYS:
            continue
        if _is_scalar(value):
            parsed.scalar_extras[key] = value
        elif isinstance(value, list) and len(value) == n and n > 0:
            if not set(map(type, value)) <= SCALAR_TYPES and nesting_depth(value) > MAX_PER_TRAJECTORY_DEPTH:
                raise DecodeError(
                    "invalid_json",
                    f"`{key}` is nested more than {MAX_PER_TRAJECTORY_DEPTH} levels "
                    "deep, too deeply to store per trajectory",
                )
            parsed.array_extras[key] = value
        else:
            try:
                parsed.json_extras[key] = nested_json_text(value)
            except RecursionError:  # parsed (orjson goes deeper than Python), but too deep to store as text
                raise DecodeError("invalid_json", f"`{key}` is nested too deeply to store") from None
