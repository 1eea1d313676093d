"""A run's records' scalar fields as columns (field_columns, worked out a key at a time over records of one shape)
equal each record's own walk (scalar_fields), transposed."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.release.transcript_fields import FIELD_CHARS, MAX_FIELDS, FieldColumns, field_columns, scalar_fields

# Few key names, some of them colliding once dotted (`a.b` beside `a: {b}`) or suffixed (`x_chars` beside a long x).
KEYS = st.sampled_from(["a", "b", "x", "a.b", "x_chars", "judge", "scores"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.integers(FIELD_CHARS - 1, FIELD_CHARS + 2).map(lambda n: "é" * n),  # either side of the length cut
    st.lists(st.integers(), max_size=2),
)
VALUES = st.recursive(SCALARS, lambda inner: st.dictionaries(KEYS, inner, max_size=4), max_leaves=12)
RECORDS = st.dictionaries(KEYS, VALUES, max_size=5)
SKIPS = st.sampled_from([("a", "messages"), ("a.b", None), ("judge.scores.x", "x")])


def transposed(records: list[dict], skips: list[tuple]) -> dict[str, list]:
    """Each record walked on its own, its fields put in columns: a value per record, None where it has none."""
    columns: dict[str, list] = {}
    for position, (record, skip) in enumerate(zip(records, skips, strict=True)):
        for name, value in scalar_fields(record, skip).items():
            columns.setdefault(name, [None] * len(records))[position] = value
    return columns


def same(found: dict[str, list], expected: dict[str, list]) -> bool:
    """Equal columns, value types included (True is not 1, 1.0 is not 1)."""
    return found.keys() == expected.keys() and all(
        list(map(type, found[name])) == list(map(type, values)) and found[name] == values
        for name, values in expected.items()
    )


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(RECORDS, SKIPS), max_size=6), st.integers(1, 3))
def test_columns_equal_each_record_walked_on_its_own(pairs, copies):
    # copies: records of one shape, which are worked out together
    records = [record for record, _ in pairs] * copies
    skips = [skip for _, skip in pairs] * copies
    assert same(field_columns(records, skips), transposed(records, skips))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(RECORDS, SKIPS), max_size=12), st.lists(st.integers(0, 4), max_size=6), st.integers(1, 5))
def test_columns_filled_a_batch_at_a_time_equal_each_record_walked(pairs, cuts, batch):
    # files of a run: its records cut into consecutive parts, taken one after another in batches of `batch` records
    records, skips = [record for record, _ in pairs], [skip for _, skip in pairs]
    fields, start = FieldColumns(), 0
    fields.BATCH = batch
    for size in [*cuts, len(records)]:
        fields.add(records[start : start + size], skips[start : start + size])
        start = min(start + size, len(records))
    assert same(fields.columns(), transposed(records, skips))


def test_a_shared_shape_gives_typed_columns_and_long_text_its_length():
    records = [
        {"trajectory_id": "t1", "metadata": {"judge": {"score": 7, "summary": "s" * (FIELD_CHARS + 1)}}},
        {"trajectory_id": "t2", "metadata": {"judge": {"score": 2.5, "summary": "short"}}},
    ]
    skips = [("trajectory_id", "messages")] * 2
    assert field_columns(records, skips) == {
        "metadata.judge.score": [7, 2.5],
        "metadata.judge.summary_chars": [FIELD_CHARS + 1, None],
        "metadata.judge.summary": [None, "short"],
    }


def test_records_past_the_field_limit_keep_their_first_fields():
    wide = [{f"f{i:03d}": i + k for i in range(MAX_FIELDS + 20)} for k in range(3)]
    columns = field_columns(wide, [()] * 3)
    assert sorted(columns) == [f"f{i:03d}" for i in range(MAX_FIELDS)]
    assert columns["f099"] == [99, 100, 101]


def test_one_name_by_two_paths_is_decided_as_each_record_decides_it():
    records = [{"a.b": 1, "a": {"b": 2}}, {"a.b": 3, "a": {"b": 4}}]
    assert field_columns(records, [()] * 2) == {"a.b": [2, 4]}  # the later of the two in the record wins
    long = [{"x": "y" * (FIELD_CHARS + 5), "x_chars": -1}] * 2
    assert field_columns(long, [()] * 2) == {"x_chars": [-1, -1]}


def test_objects_are_followed_four_deep():
    deep = {"a": {"b": {"c": {"d": {"e": 1}, "f": 2}}}}
    assert field_columns([deep, deep], [()] * 2) == {"a.b.c.f": [2, 2]}
