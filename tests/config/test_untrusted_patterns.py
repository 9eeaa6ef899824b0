"""The regular expressions that read untrusted text outside the importer's redaction and
the renderers (tests/sessions/test_linear_time.py has those): kernels and naga's errors
in the engine, host programs, Claude Code transcripts, the tutor's guardrail.

Each is checked by shape with the checker of test_linear_time, where a pattern anchored
at the start of the text or of a line may begin with a run (no attempt starts inside a
run); then the ones that were quadratic are fed growing hostile input.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# re's parser, private: typeshed has no types for it.
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

import pytest

from kernels.engine import fields, harness, naga, wgsl
from kernels.engine.host import js
from sessions.importers.claude_code import kernels, lines, tools
from tests.growth import growth_problem
from tests.sessions.test_linear_time import problems, unguarded_leading_run
from tutor import guardrail

# Matched only at the start of one stripped line, and its repeated parts each begin with
# "." or "[", so no two ways of matching overlap: linear though quantifiers nest.
NESTED_BUT_DELIMITED: set[re.Pattern] = set()

PATTERNS = {
    f"{module.__name__}.{name}": value
    for module in (naga, js, wgsl, harness, fields, kernels, lines, tools, guardrail)
    for name, value in vars(module).items()
    if isinstance(value, re.Pattern)
}


def anchored(items: list) -> bool:
    """Whether the pattern may only start at the start of the text or of a line."""
    first = items[0] if items else None
    return (
        first is not None
        and first[0] == sre.AT
        and first[1]
        in (
            sre.AT_BEGINNING,
            sre.AT_BEGINNING_STRING,
        )
    )


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_every_pattern_is_linear_by_shape(name: str) -> None:
    pattern = PATTERNS[name]
    items = list(sre_parse.parse(pattern.pattern, pattern.flags & re.S))
    found = [] if pattern in NESTED_BUT_DELIMITED else problems(items)
    if not anchored(items) and unguarded_leading_run(items):
        found.append("a leading unbounded run without a lookbehind")
    assert found == [], pattern.pattern


def test_the_call_patterns_built_at_run_time_are_linear_by_shape() -> None:
    source = "async function main() {}\n"
    assert js.drop_bare_calls(source + "  main();\n") == source + "  __host.floating(main());\n"
    for pattern in (r"\bmain\s*\(", r"\bfn\s+\w+\s*\("):
        assert problems(list(sre_parse.parse(pattern))) == []


HOSTILE: dict[str, tuple[Callable[[str], object], Callable[[int], str]]] = {
    "unclosed IDE tags": (lambda s: lines._IDE_TAGS.sub("", s), lambda n: "<ide_selection " * n),
    "naga headlines": (naga.HEADLINE.search, lambda n: "Shader '" * n),
    "naga spans": (naga.SPAN.search, lambda n: "┌─ " * n),
    "blank lines after an async main": (
        js.drop_bare_calls,
        lambda n: "async function main() {}\n" + "\n" * (8 * n) + "x",
    ),
    "blanks after a call": (
        js.drop_bare_calls,
        lambda n: "async function main() {}\nmain()" + " " * (8 * n) + "x",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_patterns_that_were_quadratic_grow_linearly(name: str) -> None:
    work, make = HOSTILE[name]
    problem = growth_problem(name, work, make, 1000)
    assert not problem, problem
