"""What the engine reads from WGSL source text without compiling it.

Regular expressions, not a parser: enough for the limits' pre-check, the backend
warnings and the words of a binding error. naga compiles the source for real.
"""

from __future__ import annotations

import re

COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
LOOP = re.compile(r"\b(?:for|loop|while)\b")
# An attribute run followed by a function: "@compute @workgroup_size(8, 8) fn main(".
FUNCTION = re.compile(r"((?:@\w+\s*(?:\([^()]*\))?\s*)+)fn\s+(\w+)")
WORKGROUP_SIZE = re.compile(r"@workgroup_size\s*\(([^()]*)\)")
INT_LITERAL = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[iu]?")
DECLARATION = re.compile(
    r"(?:@group\s*\(\s*(\d+)\s*\)\s*@binding\s*\(\s*(\d+)\s*\)"
    r"|@binding\s*\(\s*(\d+)\s*\)\s*@group\s*\(\s*(\d+)\s*\))"
    r"\s*var\s*(?:<[^>]*>)?\s*(\w+)"
)


def strip_comments(source: str) -> str:
    return COMMENTS.sub(" ", source)


def workgroup_size(source: str, entry_point: str) -> int:
    """Invocations per workgroup of an entry point, read from its @workgroup_size.

    Understands literals and module-scope const/override names with a literal value. When
    it cannot tell, it says 1: the pre-check then under-counts, and the wall-clock
    deadline in the pool is what stops an oversized run.
    """
    text = strip_comments(source)
    for attrs, name in FUNCTION.findall(text):
        if name != entry_point:
            continue
        size = WORKGROUP_SIZE.search(attrs)
        if size is None:
            return 1
        total = 1
        for arg in size.group(1).split(","):
            value = _int_value(arg.strip(), text)
            if value is None:
                return 1
            total *= value
        return total
    return 1


def _int_value(expr: str, text: str) -> int | None:
    if not expr:
        return 1
    if INT_LITERAL.fullmatch(expr):
        return int(expr.rstrip("iu"), 0)
    if re.fullmatch(r"\w+", expr):
        match = re.search(
            rf"\b(?:const|override)\s+{expr}\s*(?::\s*\w+\s*)?=\s*([0-9a-fA-FxX]+[iu]?)\s*;", text
        )
        if match and INT_LITERAL.fullmatch(match.group(1)):
            return int(match.group(1).rstrip("iu"), 0)
    return None


def declared_bindings(source: str) -> list[tuple[int, int, str]]:
    """(group, binding, variable name) of every resource the module declares."""
    found = []
    for g1, b1, b2, g2, name in DECLARATION.findall(strip_comments(source)):
        found.append((int(g1 or g2), int(b1 or b2), name))
    return found
