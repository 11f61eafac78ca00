"""Discord ids as JSON strings (SPEC 11): snowflakes exceed what many JSON readers keep exactly.

A field holds an id when its name is `id` or ends in `_id` / `_ids`; integers there become
their decimal text. Readers accept either form, so lines written before this rule still read.
"""

from __future__ import annotations

from typing import Final

_SUFFIXES: Final = ("_id", "_ids")
# Names that hold a Discord id without saying so.
_ID_NAMES: Final = frozenset({"id", "requester", "target", "posted"})


def is_id_key(key: str) -> bool:
    """True when a field of this name holds a Discord id (or a list of them)."""
    return key in _ID_NAMES or key.endswith(_SUFFIXES)


def _id_value(value: object) -> object:
    if type(value) is int:
        return str(value)
    if type(value) is list or type(value) is tuple:
        return [str(v) if type(v) is int else ids_as_strings(v) for v in value]
    return ids_as_strings(value)


def ids_as_strings(obj: object) -> object:
    """`obj` with every id field's integers as strings, at any depth; other values kept."""
    if type(obj) is dict:
        return {
            k: _id_value(v) if type(k) is str and is_id_key(k) else ids_as_strings(v)
            for k, v in obj.items()
        }
    if type(obj) is list or type(obj) is tuple:
        return [ids_as_strings(v) for v in obj]
    return obj


def fields_ids_as_strings(fields: dict[str, object]) -> None:
    """Turn the id fields of one log event's keyword fields into strings, in place.

    The action log's hot path: only top-level names are checked, and nested containers are
    converted only when they are there.
    """
    for key, value in fields.items():
        kind = type(value)
        if kind is int:
            if key in _ID_NAMES or key.endswith(_SUFFIXES):
                fields[key] = str(value)
        elif kind is list or kind is tuple or kind is dict:
            fields[key] = _id_value(value) if is_id_key(key) else ids_as_strings(value)


def as_int_id(value: object) -> int | None:
    """An id read back from JSON, written as a string (now) or a number (older lines)."""
    if type(value) is int:
        return value
    if type(value) is str and value.isdigit():
        return int(value)
    return None
