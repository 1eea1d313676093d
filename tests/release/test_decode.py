"""Decoding one document: every way a file can be bad gives a stable error_kind and a message saying where."""

import json

import pytest
from helpers import epoch_document

from pipelines.release.decode import DecodeError, decode_epoch, parse_document

GOOD = json.dumps(epoch_document(3, n=2))


def refused(data: bytes | str) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode_epoch(data.encode() if isinstance(data, str) else data)
    return info.value


def test_valid_document_decodes():
    doc = decode_epoch(GOOD.encode())
    assert (doc.epoch, doc.trajectory_ids, doc.rewards, doc.warnings) == (
        3,
        ["ft_traj_003_0", "ft_traj_003_1"],
        [0.0, 0.25],
        [],
    )


@pytest.mark.parametrize(
    "data, kind, where",
    [
        (GOOD[:40], "truncated_json", "line 1, column 41"),
        ("", "empty_file", None),
        ("  \n", "empty_file", None),
        ('{"epoch": 3,\n "loss": 0.5,,}', "invalid_json", "line 2, column 14"),
        (GOOD + GOOD, "invalid_json", f"char {len(GOOD)}"),  # a restarted job appended a second document
        ("[1, 2]", "not_an_object", None),
        ('"text"', "not_an_object", None),
    ],
)
def test_unparseable_documents(data, kind, where):
    error = refused(data)
    assert error.error_kind == kind
    if where:
        assert where in error.message


def test_an_unterminated_string_says_where_it_starts_in_plain_words():
    text = '{"epoch": 3, "snapshot_id": "ft_sn'  # the string opens at char 28, the 29th of line 1
    assert refused(text).message == "Unterminated string starting at line 1, column 29 (char 28)"


def test_invalid_utf8_says_which_byte():
    data = GOOD.encode().replace(b"ft_snap_003", b"ft_snap_\xff03")
    error = refused(data)
    assert error.error_kind == "invalid_utf8"
    position = data.index(b"\xff")
    assert f"char {position}" in error.message


def test_unpaired_surrogate_is_refused_not_crashing_later():
    error = refused(GOOD.replace('"ft_snap_003"', '"ft_snap_\\ud800"'))
    assert error.error_kind == "invalid_utf8"


@pytest.mark.parametrize("key", ["epoch", "trajectory_ids", "rewards", "advantages"])
def test_required_key_missing(key):
    doc = epoch_document(3, n=2)
    del doc[key]
    error = refused(json.dumps(doc))
    assert (error.error_kind, f"`{key}`" in error.message) == ("missing_key", True)


@pytest.mark.parametrize(
    "key", ["loss", "mean_reward", "kl_sample_train", "sample_entropy", "train_entropy", "snapshot_id"]
)
def test_documented_optional_key_missing_loads_with_a_warning(key):
    doc = epoch_document(3, n=2)
    del doc[key]
    decoded = decode_epoch(json.dumps(doc).encode())
    assert [kind for kind, _ in decoded.warnings] == ["missing_key"]
    assert f"`{key}`" in decoded.warnings[0][1]


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"loss": "0.5"}, "`loss` should be a number"),
        ({"epoch": "3"}, "`epoch` should be an integer"),
        ({"epoch": 3.5}, "`epoch` should be an integer"),
        ({"rewards": 0.5}, "`rewards` should be a list"),
        ({"rewards": [0.0, "x"]}, "`rewards[1]`"),
        ({"advantages": [True, 0.0]}, "`advantages[0]`"),
        ({"trajectory_ids": "ft_traj"}, "`trajectory_ids` should be a list of strings"),
        ({"trajectory_ids": [1, 2]}, "`trajectory_ids` should be a list of strings"),
        ({"snapshot_id": 7}, "`snapshot_id` should be a string"),
        ({"rewards": [10**400, 0.0]}, "too large"),
    ],
)
def test_wrong_types(change, fragment):
    error = refused(json.dumps(epoch_document(3, n=2) | change))
    assert error.error_kind == "wrong_type"
    assert fragment in error.message


@pytest.mark.parametrize("key", ["rewards", "advantages", "trajectory_ids"])
def test_arrays_of_different_lengths(key):
    doc = epoch_document(3, n=2)
    doc[key] = doc[key][:1]
    error = refused(json.dumps(doc))
    assert error.error_kind == "length_mismatch"
    assert "`trajectory_ids` has" in error.message


def test_duplicate_key_with_different_values_is_refused_with_its_position():
    text = GOOD[:-1] + ', "loss": 99.0}'
    error = refused(text)
    assert error.error_kind == "duplicate_key"
    assert "`loss`" in error.message and "different values" in error.message
    position = text.index('"loss": 99.0')
    assert f"char {position}" in error.message


def test_duplicate_key_with_equal_values_loads_with_a_warning():
    text = GOOD[:-1] + ', "loss": 3.5}'
    doc = decode_epoch(text.encode())
    assert doc.scalars["loss"] == 3.5
    assert [kind for kind, _ in doc.warnings] == ["duplicate_key"]


def test_duplicate_key_in_a_nested_object_and_in_a_nan_document():
    nested = GOOD[:-1] + ', "config": {"lr": 1, "lr": 2}}'
    assert refused(nested).error_kind == "duplicate_key"
    with_nan = GOOD.replace('"loss": 3.5', '"loss": NaN')[:-1] + ', "epoch": 4}'
    assert refused(with_nan).error_kind == "duplicate_key"


def test_duplicate_key_hidden_behind_escapes_is_still_found():
    # "\u0022" spells a quote: the cheap test cannot count on quotes, so the exact check runs.
    text = GOOD[:-1] + ', "note": "say \\u0022hi\\u0022", "note": "other"}'
    assert refused(text).error_kind == "duplicate_key"


def test_strings_that_look_like_keys_are_not_duplicates():
    text = GOOD[:-1] + ', "note": "\\"loss\\": 1", "note2": "a\\u0022: b"}'
    doc = decode_epoch(text.encode())
    assert doc.warnings == [] and doc.scalar_extras == {"note": '"loss": 1', "note2": 'a": b'}


@pytest.mark.parametrize(
    "tail, repeated",
    [
        (', "items": [{"k": 1, "k": 2}]}', True),  # in an object inside a list, which the colon count leaves out
        (', "note": "12:30", "loss": 9.0}', True),  # a colon in a string beside a repeated key
        (', "note": "12:30"}', False),  # a colon in a string alone: more colons than keys, and no key twice
        (', "loss" : 9.0}', True),  # a space before the colon
    ],
)
def test_duplicate_keys_found_however_the_colons_fall(tail, repeated):
    text = GOOD[:-1] + tail
    if repeated:
        assert refused(text).error_kind == "duplicate_key"
    else:
        assert decode_epoch(text.encode()).warnings == []


def test_deeply_nested_document_is_refused():
    assert refused(GOOD[:-1] + ', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}").error_kind == "invalid_json"


@pytest.mark.parametrize("integer", [-(2**63) - 1, -(2**63), 2**63, 2**64 - 1, 2**64, 2**70])
@pytest.mark.parametrize("indent", [None, 2])
def test_an_integer_of_any_size_parses_exactly(integer, indent):
    """orjson reads an integer beyond 64 bits as a float; the parse must not, wherever the integer sits."""
    data = json.dumps({"a": integer, "b": [0.5, integer], "c": {"d": integer}}, indent=indent).encode()
    doc, warnings = parse_document(data)
    assert not warnings
    assert [type(doc["a"]), type(doc["b"][1]), type(doc["c"]["d"])] == [int] * 3
    assert doc == {"a": integer, "b": [0.5, integer], "c": {"d": integer}}
