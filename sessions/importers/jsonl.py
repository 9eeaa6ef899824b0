"""Reading JSON Lines files of any size with bounded memory.

Claude Code transcripts reach a hundred megabytes, and single lines of tens of
megabytes occur (a pasted image, a huge tool result). Lines are found by scanning
fixed-size chunks; a line over the cap is measured and skipped without ever being held
whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class Line:
    number: int  # 1-based, as editors count
    offset: int  # byte offset of the line's first byte
    length: int  # bytes, without the newline
    data: bytes | None  # None when the line is over the cap
    ended: bool  # False for a last line without its newline (possibly truncated)


def iter_lines(stream: BinaryIO, max_line: int, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Line]:
    """Every line of the stream from its current position, blank ones included."""
    number = 0
    start = stream.tell() if stream.seekable() else 0
    parts: list[bytes] = []
    held = 0  # bytes of the current line seen so far
    over = False
    while chunk := stream.read(chunk_bytes):
        pos = 0
        while (end := chunk.find(b"\n", pos)) != -1:
            size = held + end - pos
            number += 1
            if over or size > max_line:
                yield Line(number, start, size, None, True)
            else:
                data = b"".join([*parts, chunk[pos:end]]) if parts else chunk[pos:end]
                yield Line(number, start, size, data, True)
            start += size + 1
            parts, held, over = [], 0, False
            pos = end + 1
        rest = len(chunk) - pos
        if rest:
            held += rest
            if not over and held > max_line:
                parts, over = [], True
            elif not over:
                parts.append(chunk[pos:])
    if held:
        number += 1
        yield Line(number, start, held, None if over else b"".join(parts), False)


def read_at(stream: BinaryIO, offset: int, length: int) -> bytes:
    stream.seek(offset)
    return stream.read(length)
