"""Reading JSON Lines files of any size with bounded memory.

Claude Code transcripts reach a hundred megabytes, and single lines of tens of
megabytes occur (a pasted image, a huge tool result). Lines are found by scanning
fixed-size chunks; a line over the cap is measured and skipped without ever being held
whole.
"""

from __future__ import annotations

import bisect
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

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


class JoinedFiles(io.RawIOBase):
    """Several files read as one stream, each ending in a newline, so that one index
    covers a session and its sub-agents' transcripts (offsets are into the whole)."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.parts: list[tuple[Path, int, int]] = []  # (path, start, size with newline)
        self.newline_added: list[bool] = []
        start = 0
        for path in paths:
            size = path.stat().st_size
            with path.open("rb") as handle:
                ends_in_newline = size == 0 or (handle.seek(size - 1), handle.read(1))[1] == b"\n"
            self.parts.append((path, start, size + (not ends_in_newline)))
            self.newline_added.append(not ends_in_newline)
            start += size + (not ends_in_newline)
        self.size = start
        self.starts = [start for _, start, _ in self.parts]
        self.position = 0
        self.open_part: tuple[int, BinaryIO] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        """Reads from one part at a time (a line never spans two)."""
        if self.position >= self.size:
            return 0
        k = bisect.bisect_right(self.starts, self.position) - 1
        path, start, size = self.parts[k]
        within = self.position - start
        want = min(len(buffer), size - within)
        real = size - self.newline_added[k]
        data = b""
        if within < real:
            handle = self._handle(k, path)
            handle.seek(within)
            data = handle.read(min(want, real - within))
        if len(data) < want:
            data += b"\n"  # the newline added after a last line without one
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)

    def _handle(self, k: int, path: Path) -> BinaryIO:
        if self.open_part is None or self.open_part[0] != k:
            self.close_part()
            self.open_part = (k, path.open("rb"))
        return self.open_part[1]

    def close_part(self) -> None:
        if self.open_part is not None:
            self.open_part[1].close()
            self.open_part = None

    def close(self) -> None:
        self.close_part()
        super().close()
