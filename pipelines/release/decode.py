"""Decodes one epoch document into a typed EpochDoc, or says precisely why it cannot be loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

REQUIRED_KEYS = ("epoch", "trajectory_ids", "rewards", "advantages")
DOCUMENTED_SCALARS = ("loss", "mean_reward", "kl_sample_train", "sample_entropy", "train_entropy")
DOCUMENTED_KEYS = (*REQUIRED_KEYS, *DOCUMENTED_SCALARS, "snapshot_id")

Scalar = bool | int | float | str | None


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
    array_extras: dict[str, list[Scalar]] = field(default_factory=dict)
    json_extras: dict[str, str] = field(default_factory=dict)  # nested extras, kept as JSON text
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (error_kind, message) of a loaded document

    @property
    def n_trajectories(self) -> int:
        return len(self.trajectory_ids)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def parse_json(data: bytes) -> Any:
    """Parses JSON as Python's json module wrote it (NaN and Infinity tokens included)."""
    if not data.strip():
        raise DecodeError("empty_file", "the file is empty")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass  # orjson rejects NaN/Infinity tokens and gives no line numbers; the standard parser does both
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("invalid_utf8", f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        kind = "truncated_json" if exc.pos >= len(text.rstrip()) else "invalid_json"
        raise DecodeError(kind, f"{exc.msg} at line {exc.lineno}, column {exc.colno} (char {exc.pos})") from None


def _number_list(doc: dict, key: str) -> list[float | None]:
    values = doc[key]
    if not isinstance(values, list):
        raise DecodeError("wrong_type", f"`{key}` should be a list of numbers, found {type(values).__name__}")
    for index, value in enumerate(values):
        if value is not None and not _is_number(value):
            raise DecodeError(
                "wrong_type", f"`{key}[{index}]` should be a number, found {type(value).__name__} {value!r:.40}"
            )
    return [None if v is None else float(v) for v in values]


def decode_epoch(data: bytes) -> EpochDoc:
    """Decodes the bytes of one epoch document; raises DecodeError when it cannot be loaded whole."""
    doc = parse_json(data)
    if not isinstance(doc, dict):
        raise DecodeError("not_an_object", f"the document is a JSON {type(doc).__name__}, not an object")
    missing = [key for key in REQUIRED_KEYS if key not in doc]
    if missing:
        raise DecodeError("missing_key", "required key(s) missing: " + ", ".join(f"`{k}`" for k in missing))

    epoch = doc["epoch"]
    if isinstance(epoch, float) and epoch.is_integer():
        epoch = int(epoch)
    if not isinstance(epoch, int) or isinstance(epoch, bool):
        raise DecodeError("wrong_type", f"`epoch` should be an integer, found {type(epoch).__name__} {epoch!r:.40}")

    trajectory_ids = doc["trajectory_ids"]
    if not isinstance(trajectory_ids, list) or not all(isinstance(t, str) for t in trajectory_ids):
        raise DecodeError("wrong_type", "`trajectory_ids` should be a list of strings")
    rewards = _number_list(doc, "rewards")
    advantages = _number_list(doc, "advantages")
    n = len(trajectory_ids)
    if not (len(rewards) == len(advantages) == n):
        raise DecodeError(
            "length_mismatch",
            f"`trajectory_ids` has {n} entries, `rewards` {len(rewards)}, `advantages` {len(advantages)}",
        )

    warnings: list[tuple[str, str]] = []
    scalars: dict[str, float | None] = {}
    for key in DOCUMENTED_SCALARS:
        value = doc.get(key)
        if key not in doc:
            warnings.append(("missing_key", f"documented key `{key}` is missing; loaded as null"))
        elif value is not None and not _is_number(value):
            raise DecodeError("wrong_type", f"`{key}` should be a number, found {type(value).__name__} {value!r:.40}")
        scalars[key] = None if value is None else float(value)

    snapshot_id = doc.get("snapshot_id")
    if "snapshot_id" not in doc:
        warnings.append(("missing_key", "documented key `snapshot_id` is missing; loaded as null"))
    elif snapshot_id is not None and not isinstance(snapshot_id, str):
        raise DecodeError("wrong_type", f"`snapshot_id` should be a string, found {type(snapshot_id).__name__}")

    parsed = EpochDoc(epoch, trajectory_ids, rewards, advantages, scalars, snapshot_id, warnings=warnings)
    for key, value in doc.items():
        if key in DOCUMENTED_KEYS:
            continue
        if _is_scalar(value):
            parsed.scalar_extras[key] = value
        elif isinstance(value, list) and len(value) == n and n > 0 and all(_is_scalar(v) for v in value):
            parsed.array_extras[key] = value
        else:
            parsed.json_extras[key] = json.dumps(value, allow_nan=True, sort_keys=True)
    return parsed
