"""How alike two versions of a shader are: the share of the lines they have in common, by
which a shader module keeps its kernel across states when its name does not say."""

from __future__ import annotations

import re
from collections import Counter

_WORD = re.compile(r"\w")


def _lines(source: str) -> Counter[str]:
    return Counter(
        line
        for raw in source.splitlines()
        if (line := raw.strip()) and not line.startswith("//") and _WORD.search(line)
    )


def likeness(old: str, new: str) -> float:
    """The share of lines two shaders have in common (0 to 1); one pass over each."""
    a, b = _lines(old), _lines(new)
    total = sum(a.values()) + sum(b.values())
    return 2 * sum((a & b).values()) / total if total else 1.0
