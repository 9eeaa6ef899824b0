"""The messages between a replay worker and its pool (worker.py says which): each one a
4-byte big-endian length, then its UTF-8 JSON."""

from __future__ import annotations

import re
import struct
from typing import Any, BinaryIO

import orjson

HEADER = struct.Struct(">I")
MAX_FRAME = 256 * 1024 * 1024


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    """The next message, or None at a clean end of input."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise EOFError("input ended inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ValueError(f"frame of {length} bytes is over the {MAX_FRAME} byte cap")
    body = stream.read(length)
    if len(body) < length:
        raise EOFError("input ended inside a frame")
    return loads(body)


def loads(body: bytes | bytearray) -> dict[str, Any]:
    message: dict[str, Any] = orjson.loads(body)
    return message


MESSAGE_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(message: Any) -> bytes:
    """A message's JSON. orjson, not the json module: an outcome is mostly floats, which
    json writes one at a time in Python (an 8x8 replay's outcome, written and read on the
    H100's host: 0.48 to 0.59 ms with json, 0.06 ms with orjson; bench/worker_messages.py).
    Keys that are not strings become strings, as with json, and numpy's numbers become
    numbers (json took its float64, a float, and refused the others); NaN and the
    infinities become null where json refused them (outcomes carry them as strings:
    outcome.pack_values).

    Text a program made may hold a lone surrogate (console.log("\\ud800")), which UTF-8
    cannot: each becomes U+FFFD, as a browser shows it, and the message is written again.
    """
    try:
        return orjson.dumps(message, option=MESSAGE_OPTIONS)
    except orjson.JSONEncodeError:
        return orjson.dumps(_encodable(message), option=MESSAGE_OPTIONS)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _encodable(value: Any) -> Any:
    """value with every lone surrogate in its strings, keys too, replaced by U+FFFD."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_encodable(key): _encodable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(item) for item in value]
    return value


def encode_frame(message: dict[str, Any]) -> bytes:
    body = dumps(message)
    return HEADER.pack(len(body)) + body
