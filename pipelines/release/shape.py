"""A run's document shape, as flatten's fast path takes it: every key with its value's type, and a typed decoder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Annotated, Any, Union

import msgspec

from pipelines.release.decode import DOCUMENTED_SCALARS, SCALAR_TYPES

INT64_RANGE = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Shape:
    """What the fast path knows of a run's documents: every key, in order, with its value's type, and where it goes."""

    keys: tuple[str, ...]
    types: tuple[type, ...]
    row: Callable[[dict], tuple]  # the epoch row's values, in the order of row_columns
    row_columns: tuple[tuple[str, str], ...]  # ("epoch" | "extra", column) for each value of row
    n_nested: int  # the row's last n_nested values are nested extras, stored as JSON text
    lists: Callable[[dict], tuple]  # trajectory_ids, rewards, advantages and the per-trajectory extras
    list_columns: tuple[str, ...]  # the column each of those lists extends (the extras' columns)
    short_lists: tuple[str, ...]  # list-valued keys kept as JSON text because their length is not n
    typed: TypedShape | None  # the same shape as a typed decoder of a document's bytes, when one can be made


@dataclass(frozen=True)
class TypedShape:
    """A run's shape as a msgspec decoder: a document's bytes decoded and type-checked in one pass, in C.

    Every key is a field (none missing, none unknown). Numbers are declared as decode_epoch takes them: a documented
    number's float field takes an integer as a float, as decode_epoch does, and refuses a boolean; an extra's
    integer stays an integer, beside floats too, and holds 64 bits at most, beyond which the one-by-one path keeps
    JSON text. Nested extras are kept raw and parsed by orjson, as the one-by-one path parses them.
    """

    decoder: msgspec.json.Decoder
    epoch: Callable[[tuple], int]
    row: Callable[[tuple], tuple]  # as Shape.row, over the decoded values in key order (nested extras raw)
    lists: Callable[[tuple], tuple]
    nested: tuple[tuple[int, type], ...]  # (index in row, dict or list) of each nested extra, in row order
    short: tuple[int, ...]  # indexes in row of the short lists, which must not have n values
    n_keys: int


_INT64_FIELD = Annotated[int, msgspec.Meta(ge=INT64_RANGE[0], le=INT64_RANGE[1])]
_FIELD_TYPES = {bool: bool, int: _INT64_FIELD, float: float, str: str, type(None): type(None)}
_DOCUMENTED_FIELDS = {
    "epoch": int,
    "snapshot_id": str | None,
    "trajectory_ids": list[str],
    "rewards": list[float | None],
    "advantages": list[float | None],
    **{key: float | None for key in DOCUMENTED_SCALARS},
}


def _field_type(types: set[type]):
    """The field type of an extra's values of these types. Beside a float, an integer stays an integer, as
    decode_parsed keeps it, and one beyond 64 bits is refused: typed_series keeps such a column as JSON text."""
    if float in types:
        types = types | {int}
    return Union[tuple(_FIELD_TYPES[t] for t in types)]  # noqa: UP007 (a union of a computed set has no `|` spelling)


def typed_shape(
    doc: dict, row_keys: list[str], list_keys: list[str], nested: list[str], short: list[str]
) -> TypedShape | None:
    """The typed decoder of a shape (see TypedShape), or None when a value of the document has no field type."""
    fields: list[tuple[str, Any]] = []
    for i, (key, value) in enumerate(doc.items()):
        if key in _DOCUMENTED_FIELDS:
            kind = _DOCUMENTED_FIELDS[key]
        elif key in nested:
            kind = msgspec.Raw
        elif key in list_keys:
            element_types = set(map(type, value))
            if not element_types <= SCALAR_TYPES:
                return None
            kind = list[_field_type(element_types)]
        else:
            kind = _field_type({type(value)})
        fields.append((f"f{i}", kind))
    position = {key: i for i, key in enumerate(doc)}
    try:
        struct = msgspec.defstruct(
            "EpochDocument",
            fields,
            rename={f"f{i}": key for i, key in enumerate(doc)},
            forbid_unknown_fields=True,
            gc=False,
        )
        decoder = msgspec.json.Decoder(struct)
    except (TypeError, ValueError):  # a key or a mix of types msgspec cannot declare
        return None
    row_index = [position[key] for key in row_keys]
    n_plain = len(row_keys) - len(nested)
    return TypedShape(
        decoder,
        itemgetter(position["epoch"]),
        itemgetter(*row_index),
        itemgetter(*(position[k] for k in list_keys)),
        tuple((n_plain + j, type(doc[key])) for j, key in enumerate(nested)),
        tuple(n_plain + nested.index(key) for key in short),
        len(doc),
    )
