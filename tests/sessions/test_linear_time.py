"""Nothing that reads untrusted text backtracks (issue 13, point 8): the redaction
patterns, the ANSI and typed-text renderers, the diff marker.

Two checks. The patterns' structure is read from Python's own regex parser and must
hold no quantifier inside another, no alternation under a quantifier whose branches can
begin with the same character, and no leading unbounded run without a lookbehind that
lets an attempt start only at the start of a run (else every position restarts the run:
quadratic). Then each scanner is fed hostile inputs of growing size: the work must grow
in proportion (tests/growth.py).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

# re's parser, private: typeshed has no types for it.
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

from sessions import ansi
from sessions.diffs import to_html as diff_html
from sessions.importers import redact
from sessions.importers.claude_code.scripts import html_scripts
from sessions.importers.redact import Scrubber
from sessions.markdown import render_typed
from tests.base import BaseTestCase
from tests.growth import growth_problem

REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
ASCII = {chr(c) for c in range(128)}
CATEGORIES = {
    sre.CATEGORY_DIGIT: set(string.digits),
    sre.CATEGORY_WORD: set(string.ascii_letters + string.digits + "_"),
    sre.CATEGORY_SPACE: set(" \t\n\r\f\v"),
}


def first_chars(items: list) -> set[str]:
    """The ASCII characters a parsed pattern can begin with (all, when unsure)."""
    for op, av in items:
        if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            continue
        if op == sre.LITERAL:
            return {chr(av)}
        if op == sre.SUBPATTERN:
            return first_chars(list(av[3]))
        if op == sre.IN:
            found: set[str] = set()
            negate = False
            for kind, value in av:
                if kind == sre.NEGATE:
                    negate = True
                elif kind == sre.LITERAL:
                    found.add(chr(value))
                elif kind == sre.RANGE:
                    found |= {chr(c) for c in range(value[0], min(value[1], 127) + 1)}
                elif kind == sre.CATEGORY:
                    found |= CATEGORIES.get(value, ASCII)
            return ASCII - found if negate else found
        return ASCII
    return ASCII


def problems(items: list, inside_repeat: bool = False) -> list[str]:
    found: list[str] = []
    for op, av in items:
        if op in REPEATS:
            _low, high, body = av
            many = high > 1
            if inside_repeat and many:
                found.append("a quantifier inside another")
            found += problems(list(body), inside_repeat or many)
        elif op == sre.BRANCH:
            branches = [list(b) for b in av[1]]
            starts = [first_chars(b) for b in branches]
            overlap = any(a & b for i, a in enumerate(starts) for b in starts[i + 1 :])
            if inside_repeat and overlap:
                found.append("an alternation under a quantifier whose branches overlap")
            for branch in branches:
                found += problems(branch, inside_repeat)
        elif op == sre.SUBPATTERN:
            found += problems(list(av[3]), inside_repeat)
        elif op == sre.ATOMIC_GROUP:
            found += problems(list(av), inside_repeat)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            found += problems(list(av[1]), inside_repeat)
    return found


def unguarded_leading_run(items: list, followed: bool = False, guarded: bool = False) -> bool:
    """Whether the pattern begins with an unbounded run that something must follow,
    without a lookbehind to keep attempts from starting inside a run."""
    for k, (op, av) in enumerate(items):
        after = followed or k + 1 < len(items)
        if op == sre.ASSERT_NOT and av[0] == -1:
            guarded = True
        elif op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            continue
        elif op == sre.SUBPATTERN:
            return unguarded_leading_run(list(av[3]), after, guarded)
        elif op == sre.BRANCH:
            return any(unguarded_leading_run(list(b), after, guarded) for b in av[1])
        elif op in REPEATS:
            return av[1] == sre.MAXREPEAT and after and not guarded
        else:
            return False
    return False


def check(pattern: str, flags: int = 0) -> list[str]:
    items = list(sre_parse.parse(pattern, flags))
    found = problems(items)
    if unguarded_leading_run(items):
        found.append("a leading unbounded run without a lookbehind")
    return found


class PatternShapeTestCase(BaseTestCase):
    def test_the_growth_check_catches_a_backtracking_pattern(self) -> None:
        # The url-password pattern this module replaced: runs restart at every dot.
        before = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@]+:[^\s@/]+@")
        with self.assertRaises(AssertionError):
            GrowthTestCase().assert_linear("old", before.search, HOSTILE["scheme runs"], 1000)

    def test_the_checker_finds_what_it_looks_for(self) -> None:
        self.assertIn("a quantifier inside another", check(r"(?:a+ )*x"))
        self.assertIn(
            "an alternation under a quantifier whose branches overlap", check(r"x(?:ab|\wc)+")
        )
        self.assertIn("a leading unbounded run without a lookbehind", check(r"[a-z]+@"))
        self.assertEqual(check(r"(?<![a-z])[a-z]+@"), [])
        self.assertEqual(check(r"\bsk-[a-z]{20,}+"), [])

    def test_every_redaction_pattern_is_linear_by_shape(self) -> None:
        patterns = [(kind, p) for kind, p in redact._PATTERNS]
        patterns += [
            ("email", redact._EMAIL_AT.pattern),
            ("local part", redact._LOCAL_PART.pattern),
        ]
        for kind, pattern in patterns:
            with self.subTest(kind=kind):
                self.assertEqual(check(pattern, re.S), [], pattern)

    def test_the_renderers_patterns_are_linear_by_shape(self) -> None:
        from sessions import markdown

        for compiled in (
            ansi._SEQUENCE,
            markdown._FENCE_LINE,
            markdown._URL,
            markdown._EMPHASIS,
            markdown._BACKTICK_RUN,
        ):
            with self.subTest(pattern=compiled.pattern):
                self.assertEqual(check(compiled.pattern, compiled.flags & re.S), [])


HOSTILE: dict[str, Callable[[int], str]] = {
    "scheme runs": lambda n: "a." * n + " ://",
    "unclosed key blocks": lambda n: "-----BEGIN RSA PRIVATE KEY-----" * (n // 30),
    "env names": lambda n: "A_" * n + "KEY=",
    "home paths": lambda n: "/home/" * (n // 6),
    "jwt heads": lambda n: "eyJ" + "a" * n + ".",
    "at signs": lambda n: "a@" * n,
    "a long local part": lambda n: "a" * n + "@",
    "bearer runs": lambda n: "bearer " * (n // 7),
    "token prefixes": lambda n: "sk-ant-" * (n // 7),
    "url users": lambda n: "x://" + "u" * n,
    "password names": lambda n: "password:" * (n // 9),
    "password values": lambda n: "pwd=" + "a1" * n,
}


class GrowthTestCase(BaseTestCase):
    def assert_linear(
        self, name: str, work: Callable[[str], object], make: Callable[[int], str], n: int = 8_000
    ) -> None:
        problem = growth_problem(name, work, make, n)
        self.assertFalse(problem, problem)

    def test_redaction_grows_linearly_on_hostile_input(self) -> None:
        for name, make in HOSTILE.items():
            with self.subTest(input=name):
                self.assert_linear(name, Scrubber().text, make)
            with self.subTest(input=name, learning=True):
                self.assert_linear(name, Scrubber().learn, make)

    def test_renderers_grow_linearly_on_hostile_input(self) -> None:
        cases: dict[str, tuple[Callable[[str], object], Callable[[int], str]]] = {
            "escape runs": (ansi.to_html, lambda n: "\x1b[" + "1;" * n),
            "many escapes": (ansi.to_html, lambda n: "\x1b]" * n),
            "backticks": (render_typed, lambda n: "``` `" * (n // 5)),
            "asterisks": (render_typed, lambda n: "*a " * (n // 3)),
            "fence lines": (render_typed, lambda n: "~" * n + "`"),
            "long changed lines": (diff_html, lambda n: f"-{'a ' * n}\n+{'b ' * n}"),
            "unclosed script tags": (html_scripts, lambda n: "<script " * (n // 8)),
        }
        for name, (work, make) in cases.items():
            with self.subTest(input=name):
                self.assert_linear(name, work, make)
