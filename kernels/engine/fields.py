"""Reading a harness spec's JSON values, each error naming the path of the field at fault.

A harness is untrusted input (learners, lesson plans, imported sessions): these helpers
check a value's type before it is used, and say where and what went wrong.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class HarnessError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


class Missing:
    pass


MISSING = Missing()


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def as_object(value: object, path: str, known: tuple[str, ...]) -> dict[str, Any]:
    if isinstance(value, Missing):
        raise HarnessError(path, "is required")
    if not isinstance(value, Mapping):
        raise HarnessError(path, f"must be an object (got {describe(value)})")
    for key in value:
        if not isinstance(key, str):
            raise HarnessError(path, f"keys must be strings (got {key!r})")
        if key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            allowed = ", ".join(known)
            raise HarnessError(
                join(path, key), f"unknown field{suggestion}; known fields: {allowed}"
            )
    return dict(value)


def describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"{value!r}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    return is_int(value) or isinstance(value, float)


def identifier(value: object, path: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise HarnessError(
            path, f"must be an identifier like main or matmul_2 (got {describe(value)})"
        )
    return value


def as_list(value: object, path: str) -> list[Any]:
    if isinstance(value, Missing):
        raise HarnessError(path, "is required")
    if not isinstance(value, list | tuple):
        raise HarnessError(path, f"must be a list (got {describe(value)})")
    return list(value)


def choice(value: object, path: str, choices: tuple[str, ...]) -> str:
    if value not in choices or not isinstance(value, str):
        raise HarnessError(path, f"must be one of {', '.join(choices)} (got {describe(value)})")
    return value


def buffer_name(value: object, path: str, names: Mapping[str, object]) -> str:
    """A buffer's name, one of names; an unknown one gets the closest as a suggestion."""
    if not isinstance(value, str):
        raise HarnessError(path, f"must be a buffer name (got {describe(value)})")
    if value not in names:
        hint = difflib.get_close_matches(value, list(names), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise HarnessError(path, f"no buffer named {value!r}{suggestion}")
    return value
