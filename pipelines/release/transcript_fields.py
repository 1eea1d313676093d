"""A transcript record's scalar fields (judge scores, a summary's length, metadata) by dotted name: one record's, and
a run's records' as columns."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from operator import itemgetter
from typing import TypeAlias

# A record's scalar fields become columns: at most this many, from objects at most this deep; a string longer than
# FIELD_CHARS gives its length instead (`<name>_chars`), its text being in the transcript.
MAX_FIELDS = 100
FIELD_DEPTH = 4
FIELD_CHARS = 200
_SCALARS = (int, float, bool)
Found: TypeAlias = dict[str, tuple[list, list]]  # a field's name: the positions of the records it has, its values


def scalar_fields(record: dict, skip: Collection[str], max_chars: int | None = FIELD_CHARS) -> dict[str, object]:
    """The record's scalar values by dotted name (`metadata.judge.scores.realism`), its objects followed up to
    FIELD_DEPTH deep and lists left out, at most MAX_FIELDS of them; a string over max_chars gives its length, as
    `<name>_chars`."""
    fields: dict[str, object] = {}
    _add_fields(record, "", 1, skip, max_chars, fields)
    return fields


def _add_fields(
    holder: dict, prefix: str, depth: int, skip: Collection[str], max_chars: int | None, fields: dict
) -> None:
    for key, value in holder.items():
        if len(fields) >= MAX_FIELDS:
            return
        name = prefix + key
        if name in skip:
            continue
        kind = type(value)
        if kind is str:
            if max_chars is not None and len(value) > max_chars:
                fields[name + "_chars"] = len(value)
            else:
                fields[name] = value
        elif kind is dict:
            if depth < FIELD_DEPTH:
                _add_fields(value, name + ".", depth + 1, skip, max_chars, fields)
        elif kind is int or kind is float or kind is bool:
            fields[name] = value


def field_columns(records: Sequence[dict], skips: Sequence[Collection[str]]) -> dict[str, list]:
    """Each record's scalar_fields (skipping the names in its skips entry) as columns: by name, a value per record,
    None where the record has none.

    Worked out a key at a time over the records of one shape (the same keys in the same order), in C-level maps,
    not a field at a time per record: a run's records mostly share a shape. Values are put in place in the order a
    record's own walk finds them, so that of one name by two paths (`a.b` beside `a: {b}`) the later is kept, as
    there. Records that may give more than MAX_FIELDS fields together are walked record by record."""
    if len(records) == 1:
        return {name: [value] for name, value in scalar_fields(records[0], skips[0]).items()}
    everyone = list(range(len(records)))
    if len(set(skips)) == 1:  # mostly: one writer's records
        by_skip = {skips[0]: everyone}
    else:
        by_skip = {}
        for position, skip in enumerate(skips):
            by_skip.setdefault(skip, []).append(position)
    columns: dict[str, list] = {}
    for skip, positions in by_skip.items():
        found: Found = {}
        _object_columns(positions, [records[position] for position in positions], "", 1, skip, found)
        if len(found) > MAX_FIELDS:
            found = _walked(records, positions, skip)
        for name, (where, values) in found.items():
            if where is everyone:  # every record's, in order: the column as it is
                columns[name] = values
                continue
            column = columns.setdefault(name, [None] * len(records))
            for position, value in zip(where, values, strict=True):
                column[position] = value
    return columns


def _walked(records: Sequence[dict], positions: list[int], skip: Collection[str]) -> Found:
    """The fields of these records, walked record by record."""
    found: Found = {}
    for position in positions:
        for name, value in scalar_fields(records[position], skip).items():
            where, values = found.setdefault(name, ([], []))
            where.append(position)
            values.append(value)
    return found


def _key_columns(holders: list[dict], positions: list[int], keys: tuple, prefix: str, depth: int, skip, found: Found):
    """Adds to found the fields of these objects of one shape (their keys), a key at a time."""
    for key in keys:
        name = prefix + key
        if name in skip:
            continue
        values = list(map(itemgetter(key), holders))
        kinds = set(map(type, values))
        if len(kinds) == 1:
            parts = [(kinds.pop(), positions, values)]
        else:  # a key whose type differs between records: each type's records apart
            parts = [(kind, *_picked([type(value) is kind for value in values], positions, values)) for kind in kinds]
        for kind, where, part in parts:
            if kind is dict:
                if depth < FIELD_DEPTH:
                    _object_columns(where, part, name + ".", depth + 1, skip, found)
            elif kind is str:
                _string_columns(name, where, part, found)
            elif kind in _SCALARS:
                _add(found, name, where, part)


def _object_columns(positions: list[int], objects: list[dict], prefix: str, depth: int, skip, found: Found) -> None:
    """The fields of objects at one place (records, at the top), a shape at a time."""
    keys = list(map(tuple, objects))
    distinct = set(keys)
    if len(distinct) == 1:  # mostly: one writer's objects
        _key_columns(objects, positions, distinct.pop(), prefix, depth, skip, found)
        return
    shapes: dict[tuple, tuple[list, list]] = {}
    for position, holder, shape in zip(positions, objects, keys, strict=True):
        where, holders = shapes.setdefault(shape, ([], []))
        where.append(position)
        holders.append(holder)
    for shape, (where, holders) in shapes.items():
        _key_columns(holders, where, shape, prefix, depth, skip, found)


def _string_columns(name: str, positions: list[int], values: list[str], found: Found) -> None:
    """A string field: the strings of at most FIELD_CHARS as they are, the longer ones' lengths as `<name>_chars`."""
    lengths = list(map(len, values))
    if max(lengths) <= FIELD_CHARS:
        _add(found, name, positions, values)
        return
    if min(lengths) > FIELD_CHARS:
        _add(found, name + "_chars", positions, lengths)
        return
    long = [length > FIELD_CHARS for length in lengths]
    _add(found, name + "_chars", *_picked(long, positions, lengths))
    _add(found, name, *_picked([not is_long for is_long in long], positions, values))


def _picked(keep: list[bool], positions: list[int], values: list) -> tuple[list[int], list]:
    return [p for p, k in zip(positions, keep, strict=True) if k], [v for v, k in zip(values, keep, strict=True) if k]


def _add(found: Found, name: str, positions: list[int], values: list) -> None:
    """Adds a field's values at these positions (the lists themselves, when the name is new)."""
    if name in found:
        where, column = found[name]
        found[name] = (where + positions, column + values)
    else:
        found[name] = (positions, values)


class FieldColumns:
    """A run's record fields as columns (field_columns), filled a batch of records at a time as its files are
    indexed: records held to the run's end would cost the garbage collector more than their walk does."""

    BATCH = 256

    def __init__(self):
        self._columns: dict[str, list] = {}
        self._size = 0
        self._records: list[dict] = []
        self._skips: list[Collection[str]] = []

    def add(self, records: list[dict], skips: list[Collection[str]]) -> None:
        """Adds records, after those added before, and the names of each one not to make fields of."""
        if len(records) != len(skips):
            raise ValueError(f"{len(records)} records with {len(skips)} skips")
        self._records += records
        self._skips += skips
        if len(self._records) >= self.BATCH:
            self._flush()

    def columns(self) -> dict[str, list]:
        """The fields of every record added, by name: a value per record, None where it has none."""
        self._flush()
        for column in self._columns.values():
            column += [None] * (self._size - len(column))
        return self._columns

    def _flush(self) -> None:
        for name, values in field_columns(self._records, self._skips).items():
            column = self._columns.setdefault(name, [])
            column += [None] * (self._size - len(column))
            column += values
        self._size += len(self._records)
        self._records, self._skips = [], []
