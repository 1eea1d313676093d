"""grpo-warehouse show: a trajectory's transcript, read from its release file where the warehouse indexed it."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import duckdb
import orjson

from pipelines.release.transcript_fields import scalar_fields
from pipelines.release.transcripts import (
    FILE_NAME_ID,
    content_text,
    find_messages,
    loads,
    message_tool_calls,
    read_span,
    record_id,
)

# Characters a terminal would act on rather than show (control characters, bidirectional overrides): written as
# escapes, so that a transcript's content is shown as written and never drives the terminal.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
FIELDS_SHOWN = 20

_LOOKUP = """
select
    t.run_id, t.epoch, t.traj_index, f.group_index, f.reward, f.advantage, e.snapshot_id, r.release_root,
    t.transcript_path, t.transcript_format, t.line, t.byte_offset, t.byte_length, t.id_source,
    (select any_value(left(s.model_name, length(s.model_name) - length(s.snapshot_id))) from snapshots as s
     where s.run_id = t.run_id and s.snapshot_id is not null) as model_prefix
from trajectory_transcripts as t
inner join fact_trajectories as f using (run_id, epoch, traj_index)
inner join fact_epochs as e using (run_id, epoch)
inner join dim_runs as r using (run_id)
where t.trajectory_id = ? and (? is null or t.run_id = ?)
order by t.run_id, t.epoch, t.traj_index
"""


class ShowError(Exception):
    """Why a transcript cannot be shown, in one line."""


@dataclass
class Trajectory:
    """A trajectory as the warehouse knows it, and where its transcript is (transcript_path None: it has none)."""

    run_id: str
    epoch: int
    traj_index: int
    group_index: int
    reward: float | None
    advantage: float | None
    snapshot_id: str | None
    release_root: str
    transcript_path: str | None
    transcript_format: str | None
    line: int | None
    byte_offset: int | None
    byte_length: int | None
    id_source: str | None
    model_prefix: str | None

    @property
    def model_name(self) -> str | None:
        if self.snapshot_id is None or self.model_prefix is None:
            return None
        return self.model_prefix + self.snapshot_id


def _named(text: str) -> str:
    """An id as a message names it; the empty id as "", or the message would read as if a word were missing."""
    return shown(text) or '""'


def find_trajectory(database: Path, trajectory_id: str, run_id: str | None = None) -> Trajectory:
    """The one trajectory of that id (of that run, if given) in the published warehouse; ShowError when there is
    none, or when the id is in several runs and no run is given."""
    config = {"enable_external_access": False, "lock_configuration": True}
    with duckdb.connect(str(database), read_only=True, config=config) as con:
        rows = con.execute(_LOOKUP, [trajectory_id, run_id, run_id]).fetchall()
    where = f" in run {_named(run_id)}" if run_id is not None else ""
    if not rows:
        raise ShowError(f"no trajectory {_named(trajectory_id)}{where} in the warehouse")
    runs = sorted({row[0] for row in rows})
    if len(rows) > 1:
        named = ", ".join(shown(run) for run in runs[:5]) + (" ..." if len(runs) > 5 else "")
        hint = "give --run" if len(runs) > 1 else "it is in several epochs of that run"
        raise ShowError(f"trajectory id {shown(trajectory_id)} is in {len(rows)} places ({named}): {hint}")
    return Trajectory(*rows[0])


def read_record(trajectory: Trajectory, trajectory_id: str) -> tuple[bytes, dict]:
    """The transcript record's JSON text, read at its place in its file, and the record; ShowError when the file is
    gone or changed since the warehouse indexed it."""
    root, path = trajectory.release_root, trajectory.transcript_path
    try:
        data = read_span(root, path, trajectory.byte_offset, trajectory.byte_length)
        record = loads(data)
    except (OSError, ValueError) as exc:
        raise ShowError(f"cannot read the transcript in {shown(path)}: {shown(str(exc))}; build again") from None
    found = record_id(record) if isinstance(record, dict) else None
    named = trajectory.id_source == FILE_NAME_ID and isinstance(record, dict)
    if not named and (found is None or found[0] != trajectory_id):
        raise ShowError(f"{shown(path)} has changed since the warehouse was built: build again")
    return data, record


def shown(text: str | None) -> str:
    """Text with the characters a terminal would act on written as escapes (\\x1b, \\u202e)."""
    if text is None:
        return ""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text)


def _number(value: float | None) -> str:
    return "null" if value is None else f"{value:.6g}"


def render(trajectory: Trajectory, trajectory_id: str, record: dict | None, width: int) -> str:
    """The transcript as text: a header (run, epoch, group, reward, advantage, the snapshot's model name, the file),
    the record's scalar fields, then each message: its role, its content wrapped, its tool calls."""
    t = trajectory
    lines = [
        f"trajectory {shown(trajectory_id)}",
        f"run {shown(t.run_id)} · epoch {t.epoch} · group {t.group_index} (position {t.traj_index})",
        f"reward {_number(t.reward)} · advantage {_number(t.advantage)}",
        f"model (the snapshot after this epoch): {shown(t.model_name) or 'unknown'}",
    ]
    if record is None:
        return "\n".join([*lines, "no transcript of this trajectory was found in its run's files"]) + "\n"
    place = f"line {t.line}" if t.line is not None else f"bytes {t.byte_offset}-{t.byte_offset + t.byte_length}"
    lines.append(f"transcript: {shown(t.transcript_path)}, {place} ({t.transcript_format})")
    messages_key, messages = find_messages(record)
    fields = scalar_fields(record, {messages_key, t.id_source}, max_chars=None)
    for name, value in list(fields.items())[:FIELDS_SHOWN]:
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        lines += _wrapped(f"{name}: {text}", width, "  ")
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        lines += ["", f"── {shown(role if isinstance(role, str) else orjson.dumps(role).decode())} ──"]
        for paragraph in content_text(message.get("content")).split("\n"):
            lines += _wrapped(paragraph, width, "  ")
        for call in message_tool_calls(message):
            lines += _wrapped(f"→ tool call {_call_text(call)}", width, "  ")
    return "\n".join(lines) + "\n"


def _call_text(call: dict) -> str:
    """A tool call as `name {arguments}`, whichever writer's shape it has (OpenAI's function object, Anthropic's
    tool_use block, a plain function name)."""
    function = call.get("function")
    name = call.get("name") or (function if isinstance(function, str) else None)
    if name is None and isinstance(function, dict):
        name = function.get("name")
    arguments = call.get("arguments", call.get("input"))
    if arguments is None and isinstance(function, dict):
        arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode() if arguments is not None else ""
    return f"{name if isinstance(name, str) else '?'} {arguments}".rstrip()


def _wrapped(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(shown(text), max(width, 20), initial_indent=indent, subsequent_indent=indent) or [indent]
