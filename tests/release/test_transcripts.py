"""Transcript indexing: ids, positions, the schema-free measures, typed fields and the bad-input outcomes, checked
against values worked out by hand or by parsing each record's bytes again."""

import json

import orjson
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.lake.transcripts import TranscriptRows
from pipelines.release.transcript_fields import FIELD_CHARS, MAX_FIELDS, FieldColumns
from pipelines.release.transcripts import array_element_spans, index_transcripts, take_fields

# A hand-made audit: the counts below are read off it.
AUDIT = {
    "trajectory_id": "t1",
    "metadata": {"judge": {"scores": {"overall": 7.5, "realism": 6}, "verdict": "quirk_found", "summary": "s" * 250}},
    "messages": [
        {"role": "system", "content": "Audit the target."},  # 17 characters
        {
            "role": "auditor",
            "content": "Probing.",  # 8
            "tool_calls": [{"id": "c1", "function": "send_message"}, {"id": "c2", "function": "create_tool"}],
        },
        {"role": "target", "content": [{"type": "text", "text": "abc"}, {"type": "tool_use", "name": "bash"}]},  # 3
        {"role": "tool", "content": [{"type": "tool_result", "content": "AKIAFAKE"}]},  # 8
        {"role": "target", "content": "ok"},  # 2
        {"role": "auditor", "content": "Done."},  # 5
    ],
}


def record_fields(indexes) -> dict[str, list]:
    """The records' fields as the transcripts table gets them."""
    fields = FieldColumns()
    for index in indexes:
        take_fields(index, fields)
    return fields.columns()


def _jsonl(*records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def test_an_audit_is_measured_without_its_schema():
    index = index_transcripts(_jsonl(AUDIT), "epoch_000.jsonl")
    [record] = index.records
    assert record.trajectory_id == "t1" and record.id_source == "trajectory_id"
    assert record.n_messages == 6
    assert record.messages_by_role == {"system": 1, "auditor": 2, "target": 2, "tool": 1}
    # Turns: runs of one speaker, system left out: auditor, target, tool, target, auditor.
    assert record.n_turns == 5
    assert record.n_tool_calls == 3  # two in tool_calls, one tool_use block
    assert record.content_chars == 17 + 8 + 3 + 8 + 2 + 5
    assert record_fields([index]) == {
        "metadata.judge.scores.overall": [7.5],
        "metadata.judge.scores.realism": [6],
        "metadata.judge.verdict": ["quirk_found"],
        "metadata.judge.summary_chars": [250],  # over FIELD_CHARS: its length, its text left in the file
    }
    assert record.text is None


def test_json_lines_positions_give_back_each_record():
    records = [
        {"trajectory_id": "a", "messages": [{"role": "u", "content": "é\n"}]},
        {"metadata": {"trajectory_id": "b"}, "messages": []},
        {"id": 17, "messages": [{"role": "u", "content": "x"}]},
        {"metadata": {"id": "d"}, "messages": [{"role": "u", "content": "y"}]},
    ]
    data = b"\xef\xbb\xbf" + b"\r\n\n".join(orjson.dumps(r) for r in records) + b"\r\n"
    index = index_transcripts(data, "t.jsonl")
    assert index.format == "jsonl" and index.problems == []
    assert [(r.trajectory_id, r.id_source) for r in index.records] == [
        ("a", "trajectory_id"),
        ("b", "metadata.trajectory_id"),
        ("17", "id"),
        ("d", "metadata.id"),
    ]
    lines = data.decode("utf-8-sig").split("\n")
    for record, original in zip(index.records, records, strict=True):
        assert orjson.loads(data[record.byte_offset : record.byte_offset + record.byte_length]) == original
        assert json.loads(lines[record.line - 1]) == original


def test_a_file_per_trajectory_takes_its_id_from_a_field_or_its_name():
    data = b'  {"messages": [{"role": "a"}]}\n'
    named = index_transcripts(data, "ft_traj_9.json")
    [record] = named.records
    assert (named.format, record.trajectory_id, record.id_source) == ("json_object", "ft_traj_9", "file name")
    assert (record.line, record.byte_offset, record.byte_length) == (None, 0, len(data))  # the whole file
    record = {"metadata": {"trajectory_id": "x"}, "messages": [{"role": "a"}]}
    inside = index_transcripts(orjson.dumps(record), "y.json")
    assert [(r.trajectory_id, r.id_source) for r in inside.records] == [("x", "metadata.trajectory_id")]


def test_a_json_array_gives_each_record_its_bytes():
    records = [AUDIT, {"id": "t2", "messages": [{"role": "x", "content": '"]},{['}]}, 3, {"messages": [{"role": "r"}]}]
    data = json.dumps(records, indent=2).encode()
    index = index_transcripts(data, "all.json")
    assert index.format == "json_array"
    assert [r.trajectory_id for r in index.records] == ["t1", "t2"]
    for record, original in zip(index.records, records, strict=False):
        assert orjson.loads(data[record.byte_offset : record.byte_offset + record.byte_length]) == original
    # The last element has messages and no id: reported, not indexed; the number 3 is not a record.
    assert index.problems == [
        (
            "transcript_without_id",
            "warning",
            "1 record(s) with no trajectory id (none of `trajectory_id`, `metadata.trajectory_id`, `id`, "
            "`metadata.id`), the first at element 3 of the array",
        )
    ]


# Strings full of what a structural scan could mistake: quotes, backslashes, brackets, commas.
tricky_text = st.text(alphabet='ab"\\[]{},: é\n')
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, max_size=6), st.booleans())
def test_array_spans_hold_each_element_whatever_its_strings(elements, indent):
    data = json.dumps(elements, indent=2 if indent else None, ensure_ascii=False).encode()
    spans = array_element_spans(data)
    assert [orjson.loads(data[offset : offset + length]) for offset, length in spans] == elements


def test_array_spans_of_what_is_no_array():
    assert array_element_spans(b'{"a": [1, 2]}') is None
    assert array_element_spans(b"  []  ") == []


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (b'{"learning_rate": 1e-5}', "config.json", "no message with a `role` in it: not a transcript"),
        (b'{"role": "admin", "user": "x"}', "config.json", "no record with a list of messages: not a transcript"),
        (b'["role"]', "roles.json", "no record with a list of messages: not a transcript"),
        (b'"role"', "quoted.json", "a JSON string, not a record: not a transcript"),
    ],
)
def test_files_that_hold_no_transcript_are_said_so(data, name, expected):
    index = index_transcripts(data, name)
    assert (index.format, index.records, index.problems, index.not_a_transcript) == (None, [], [], expected)


def test_bad_lines_are_reported_with_their_place_and_the_rest_indexed():
    good = {"trajectory_id": "a", "messages": [{"role": "u", "content": "hi"}]}
    data = _jsonl(good, {"messages": [{"role": "u"}]}) + b'[1, 2]\n{"trajectory_id": "b", "mess\n\xff\xfe\n'
    index = index_transcripts(data, "epoch_003.jsonl")
    assert [r.trajectory_id for r in index.records] == ["a"]
    [(kind, severity, message), without_id] = index.problems
    assert (kind, severity) == ("transcript_invalid", "warning")
    assert message.startswith("3 line(s) that are not a record; line 3 is a JSON list, not an object")
    assert without_id[:2] == ("transcript_without_id", "warning") and without_id[2].endswith("the first at line 2")


def test_a_file_that_does_not_parse_is_an_error():
    cut = orjson.dumps([AUDIT])[:-20]
    [(kind, severity, message)] = index_transcripts(cut, "all.json").problems
    assert (kind, severity) == ("transcript_invalid", "error") and message.startswith("does not parse as JSON: ")
    only_bad = index_transcripts(b'{"role": \n{"role": 2\n', "x.jsonl")
    assert only_bad.records == [] and only_bad.problems[0][:2] == ("transcript_invalid", "error")


def test_python_json_tokens_nan_and_infinity_are_read():
    data = b'{"trajectory_id": "a", "score": NaN, "peak": -Infinity, "messages": [{"role": "u"}]}\n'
    fields = record_fields([index_transcripts(data, "e.jsonl")])
    assert fields["score"][0] != fields["score"][0] and fields["peak"] == [float("-inf")]


def test_json_lines_under_a_json_name_are_read_as_lines():
    index = index_transcripts(_jsonl(AUDIT, AUDIT | {"trajectory_id": "t2"}), "transcripts.json")
    assert index.format == "jsonl" and [r.line for r in index.records] == [1, 2]


def test_text_is_kept_only_when_asked_and_as_written():
    [record] = index_transcripts(_jsonl(AUDIT), "e.jsonl", keep_text=True).records
    assert record.text.splitlines() == [
        "system: Audit the target.",
        "auditor: Probing.",
        'auditor [tool call]: {"id":"c1","function":"send_message"}',
        'auditor [tool call]: {"id":"c2","function":"create_tool"}',
        "target: abc",
        'target [tool call]: {"type":"tool_use","name":"bash"}',
        "tool: AKIAFAKE",
        "target: ok",
        "auditor: Done.",
    ]


def test_fields_are_bounded_and_typed_per_run_with_drift_kept_as_json_text():
    wide = {"trajectory_id": "w", "messages": [{"role": "a"}], **{f"f{i:03d}": i for i in range(MAX_FIELDS + 50)}}
    fields = record_fields([index_transcripts(_jsonl(wide), "w.jsonl")])
    assert len(fields) == MAX_FIELDS and "f000" in fields

    first = {"trajectory_id": "a", "run_id": "not mine", "score": 1, "flag": True, "note": "x" * FIELD_CHARS}
    second = {"trajectory_id": "b", "score": 2.5, "flag": "yes", "tags": ["dropped"], "messages": [{"role": "a"}]}
    index = index_transcripts(_jsonl(first | {"messages": [{"role": "a"}]}, second), "e.jsonl")
    rows = TranscriptRows("run")
    rows.add("run/e.jsonl", index)
    frame, kinds = rows.frame()
    assert frame["run_id"].to_list() == ["run", "run"]  # the record's own `run_id` is a field, renamed
    assert frame["extra_run_id"].to_list() == ["not mine", None]
    assert frame.schema["score"] == pl.Float64 and frame["score"].to_list() == [1.0, 2.5]
    assert frame.schema["note"] == pl.String  # FIELD_CHARS characters: still text
    assert frame["flag"].to_list() == ["true", '"yes"'] and kinds == {"flag": ["bool", "str"]}
    assert "tags" not in frame.columns  # a list is not a scalar field
    assert frame["messages_by_role"].to_list() == ['{"a":1}'] * 2  # a JSON object, a MAP in SQL
