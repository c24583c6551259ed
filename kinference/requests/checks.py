"""Type checks on parsed JSON values, failing with a reason that names the offending field.

Every reader of request fields goes through these, so that whatever a client sends, the only
exception that leaves the package is `MalformedRequest`, and its message says where and what:
`"messages[2].content" must be a string or an array, got a number`.
"""

from __future__ import annotations

from typing import Any, NoReturn

from kinference.requests.fields import LargeValue, MalformedRequest

_LARGE_TYPES = {"{": "an object", "[": "an array", '"': "a string"}
_TYPES: dict[type, str] = {bool: "a boolean", int: "a number", float: "a number"}
_TYPES.update({str: "a string", list: "an array", dict: "an object", type(None): "null"})


def json_type(value: object) -> str:
    """The JSON type of a parsed value, as a phrase: "an array", "null"."""
    if isinstance(value, LargeValue):
        return _LARGE_TYPES.get(value.first_byte, "a value")
    return _TYPES.get(type(value), type(value).__name__)


def wrong(where: str, wanted: str, value: object) -> NoReturn:
    raise MalformedRequest(f'"{where}" must be {wanted}, got {json_type(value)}')


def expect(value: object, where: str, kinds: tuple[type, ...], wanted: str) -> None:
    """Check a top-level value, which may be a LargeValue known only by its first byte."""
    if isinstance(value, LargeValue):
        ok = (value.first_byte == "[" and list in kinds) or (
            value.first_byte == '"' and str in kinds
        )
    else:
        ok = isinstance(value, kinds)
    if not ok:
        wrong(where, wanted, value)


def as_dict(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        wrong(where, "an object", value)
    return value


def as_list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        wrong(where, "an array", value)
    return value


def as_str(value: object, where: str) -> str:
    if not isinstance(value, str):
        wrong(where, "a string", value)
    return value


def str_or_none(value: object, where: str) -> str | None:
    if value is not None and not isinstance(value, str):
        wrong(where, "a string", value)
    return value


def type_of(part: dict[str, Any], where: str) -> str:
    """The `type` member of a content part or item, which must be a string."""
    return as_str(part.get("type"), f"{where}.type")


def token_ids(value: list[Any], where: str) -> list[int]:
    """A list of token ids (non-negative integers)."""
    for index, item in enumerate(value):
        if type(item) is not int or item < 0:
            wrong(f"{where}[{index}]", "a token id (an integer >= 0)", item)
    return value
