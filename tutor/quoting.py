"""A line of the learner's code, quoted in a review as inline code."""

from __future__ import annotations


def source_line(source: str, number: int | None) -> str:
    """Line number (1-based) of source, stripped; "" when there is no such line."""
    lines = source.splitlines()
    if number is None or not 1 <= number <= len(lines):
        return ""
    return lines[number - 1].strip()


def quote(line: str) -> str:
    # Inline code cannot hold a backtick run safely; such a line is described instead.
    return f"`{line}`" if line and "`" not in line and len(line) <= 120 else ""
