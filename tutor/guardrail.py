"""The guardrail: a tutor reply never hands the learner the code they must write.

The system prompt asks Claude not to write the kernel or the host code; this module makes
sure, in code, on every reply. It judges what the text would give the learner, not its
shape: every span of the reply (fenced in any language, inline, a table cell, a quote, a
list item, a heading, link text, split over several blocks, base64) is read as WGSL or
JavaScript would be, with the engine's WGSL tokenizer (comments and blankspace count for
nothing, so `@ compute` and `fn/**/main` read as `@compute` and `fn main`; commented-out
code is read too), and the statements and declarations it forms are counted together
across the whole reply. What the learner already has (their kernel and host program, the
lesson's starter code) counts for nothing: quoting it back gives nothing away.

The rule, the same for kernel and host code: the code spans of a reply are withheld when,
together, they
- define a function with a body (a `fn` or `function` header whose block holds a new
  statement), or
- hold a new statement of the GPU interface the learner writes: a declaration with
  @compute, @group, @binding or another entry-point or resource attribute, or a call of a
  WebGPU method that creates, fills, binds, dispatches or reads back (however it is
  called: `device.createBuffer(...)`, `device["createBuffer"](...)`), or
- hold more than MAX_NEW_UNITS other new statements and declarations (up to two generic
  lines pass: the tutor may show syntax, as CodeHelp allows).
Explanation, pseudo-code (`y[j] = exp(x[j]) / (the sum of ...)` is no expression) and
page scaffolding (HTML and CSS that form no statement) pass.

Streaming: nothing is shown and then taken away. A line is released once its fate is
settled: at once when it holds no new code; a block that holds new code waits until the
reply's verdict is known (it passes only when the whole reply has been read, and is
withheld as soon as the reply crosses the rule), and so does everything after it. A
prose line still arriving is released up to where no statement can begin any more (two
plain words in a row outside quotes). redact() on the full text is the same reading.

Claude's text is untrusted (a learner can ask for anything) and this runs in the web
process, so the work is linear: each line is tokenized once per reading (two readings:
comments dropped and comment markers blanked), each token is looked at a bounded number
of times when statements are recognised (groups are matched once, statements are parsed
from left to right without backtracking, nesting deeper than MAX_NESTING is not
examined), a stream re-reads only a short line still arriving, and a reply is read up to
MAX_CHARS (Claude's replies stop at TUTOR_MAX_TOKENS, far below it); the rest is withheld.
"""

from __future__ import annotations

import base64
import binascii
import html
import itertools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from kernels.engine.wgsl import IDENT
from tutor.statements import (
    CELL,
    KEYWORDS,
    Reader,
    Unit,
    read_tokens,
)

MAX_NEW_UNITS = 2
MAX_CHARS = 32_000
# A line still arriving is read again on each delta only while it is this short; past
# it, it waits for its end.
MAX_PARTIAL = 400
# ... and only once it has grown by this much since.
PARTIAL_STEP = 16
# The shortest base64 run worth decoding, and how deep encodings are unwrapped.
MIN_BASE64 = 16
MAX_DECODINGS = 2

NOTE = (
    "*(Code withheld: the tutor explains and reviews, but the code is yours to write. "
    "Ask for the next hint if you are stuck.)*"
)
INLINE_NOTE = "(code withheld)"
TOO_LONG = "\n\n*(The rest of this reply was withheld: it is too long to check.)*"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)")
# What starts a Markdown line without being part of its text: indentation, quote markers,
# list markers, heading hashes.
CONTAINER = re.compile(r"^[ \t>]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+|#{1,6}[ \t]+)?[ \t>]*")
ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{0,31});")
BASE64 = re.compile(rf"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{{{MIN_BASE64},}}={{0,2}}")
EMPHASIS_RUNS = ("**", "__", "~~")
MARKDOWN_ESCAPABLE = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")

# Words that may stand between two others inside code, so a pair with one of them is no
# sign of prose: `let i`, `return x`, `await device`, `new Float32Array`.
CODE_WORDS = KEYWORDS | {"await", "new", "async", "typeof", "of", "in", "instanceof", "else"}
PUNCTUATION_BETWEEN = " \t;,{}()"


@dataclass
class Finding:
    rule: str
    text: str


@dataclass
class Guarded:
    text: str
    findings: list[Finding] = field(default_factory=list)
    # Characters and tokens looked at, for the tests of linear growth.
    steps: int = 0
    units: list[Unit] = field(default_factory=list)

    @property
    def redacted(self) -> bool:
        return bool(self.findings)

    @property
    def rules(self) -> list[str]:
        return sorted({f.rule for f in self.findings})

    @property
    def withheld(self) -> str:
        return "\n\n".join(f.text for f in self.findings)


# -- what a line of prose shows, as text to read as code -------------------------------------


class _View(NamedTuple):
    text: str
    where: list[int]  # each character's place in the line
    opening: set[int]  # where code spans open (a blank in text)


def _prose_view(line: str, table: bool) -> _View:
    """The text a Markdown line shows, with, for each character, where it is in the line:
    container markers blanked, entities and escapes decoded, emphasis runs dropped,
    compatibility forms folded (a fullwidth `；` is a `;`), invisible characters dropped,
    code-span borders blank; in a table row the cell borders become CELL, and so does a
    semicolon right after a code span (prose punctuation: `requestAdapter()`;)."""
    out: list[str] = []
    where: list[int] = []
    opening: set[int] = set()
    in_span = False
    after_span = False  # nothing but blanks since a code span closed
    head = CONTAINER.match(line)
    i = head.end() if head else 0
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\" and i + 1 < n and line[i + 1] in MARKDOWN_ESCAPABLE:
            out.append(line[i + 1])
            where.append(i + 1)
            i += 2
            continue
        if c == "&" and (entity := ENTITY.match(line, i)):
            for decoded in html.unescape(entity.group()):
                out.append(decoded)
                where.append(i)
            i = entity.end()
            continue
        if line.startswith(EMPHASIS_RUNS, i):
            i += 2
            continue
        if c == "`":
            c = " "  # a statement split over several code spans is still one
            if not (i > 0 and line[i - 1] == "`"):
                in_span = not in_span
                if in_span:
                    opening.add(len(out))
                after_span = not in_span
        elif (c == "|" and table) or (c == ";" and after_span):
            c = CELL
        if c not in " \t":
            after_span = False
        if c.isascii():
            out.append(c)
            where.append(i)
        elif unicodedata.category(c) != "Cf":
            for folded in unicodedata.normalize("NFKC", c):
                out.append(folded)
                where.append(i)
        i += 1
    return _View("".join(out), where, opening)


def _blank_comments(text: str) -> str:
    """The text with comment markers blanked, so commented-out code is read as code (and a
    URL's // hides nothing after it)."""
    return text.replace("//", "  ").replace("/*", "  ").replace("*/", "  ")


def _decoded(run: str) -> str | None:
    """A base64 run's text, when it decodes to readable text."""
    try:
        raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    printable = sum(1 for c in text if c.isprintable() or c in "\n\t")
    return text if text and printable >= 0.9 * len(text) else None


# -- the pieces of a reply -------------------------------------------------------------------


@dataclass
class _Piece:
    raw: str
    kind: str  # "prose", "fence", "blank"
    # The character ranges of new code in raw; (-1, -1): the whole piece (a code block).
    marks: list[tuple[int, int]] = field(default_factory=list)


class StreamGuard:
    """Feed it text deltas; it returns what may be shown now.

    known: the statements of what the learner already has (known_units of their kernel
    and host program and the starter code); they count for nothing."""

    def __init__(self, known: frozenset[str] = frozenset()) -> None:
        self.known = known
        # Two readings of every piece: comments dropped, and comment markers blanked.
        self.readers = (Reader(self.known), Reader(self.known))
        self.counted = [0, 0]  # units of each reader taken into the verdict
        self.new_keys: set[str] = set()
        self.rule = ""  # the rule the reply crosses, once it does
        self.pieces: list[_Piece] = []
        self.marked = [0, 0]  # spans of each reader marked on the pieces
        self.released = 0  # pieces shown
        self.shown = ""  # what they became
        self.partial: list[str] = []  # the line still arriving
        self.partial_length = 0
        self.partial_shown = 0  # of it, the characters shown
        self.partial_read = 0  # and how much of it was read last time
        self.fence: tuple[str, str, list[str]] | None = None  # opener line, marker, lines
        self.received = 0
        self.deltas: list[str] = []
        self.finished = False
        self.final = ""
        self.sent = ""
        self.stalled = False
        self.tokenized = 0

    @property
    def steps(self) -> int:
        return self.tokenized + sum(reader.steps for reader in self.readers)

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return "".join(self.deltas)

    # -- reading --

    def feed(self, delta: str) -> str:
        room = MAX_CHARS - self.received
        self.received += len(delta)
        self.deltas.append(delta)
        if room <= 0:
            return ""
        delta = delta[:room]
        if "\n" in delta:
            lines = ("".join(self.partial) + delta).split("\n")
            rest = lines.pop()
            self.partial, self.partial_length, self.partial_shown = [rest], len(rest), 0
            self.partial_read = 0
            for line in lines:
                self._line(line + "\n")
        else:
            self.partial.append(delta)
            self.partial_length += len(delta)
        return self._advance(self._release())

    def finish(self) -> str:
        if self.partial_length:
            self._line("".join(self.partial))
            self.partial, self.partial_length = [], 0
        if self.fence is not None:
            opener, _, lines = self.fence
            self.fence = None
            self._piece(opener + "".join(lines), "fence", "".join(lines))
        for reader in self.readers:
            reader.hard_break()
        self.finished = True
        self.final = self._release()
        if self.received > MAX_CHARS:
            self.final += TOO_LONG
        return self._advance(self.final)

    def _line(self, line: str) -> None:
        self.tokenized += len(line)
        if self.fence is not None:
            opener, marker, lines = self.fence
            stripped = line.strip()
            if (
                len(stripped) >= len(marker)
                and set(stripped) == {marker[0]}
                and len(line) - len(line.lstrip(" ")) <= 3
            ):
                self.fence = None
                self._piece(opener + "".join(lines) + line, "fence", "".join(lines))
            else:
                lines.append(line)
            return
        if fence := FENCE.match(line):
            self.fence = (line, fence.group(1), [])
        elif not line.strip():
            self._piece(line, "blank", "")
        else:
            self._piece(line, "prose", line.rstrip("\n"))

    def _piece(self, raw: str, kind: str, text: str) -> None:
        index = len(self.pieces)
        self.pieces.append(_Piece(raw, kind))
        if kind == "blank":
            for reader in self.readers:
                reader.hard_break()
            return
        if kind == "prose":
            view = _prose_view(text, table=text.lstrip().startswith("|"))
            self._read(view.text, index, view.where, opening=view.opening)
        else:
            self._read(text, index, None)
        self._read_encoded(text, index, None if kind == "prose" else (-1, -1), 0)
        for reader in self.readers:
            reader.line_end()

    def _read(
        self,
        text: str,
        index: int,
        where: list[int] | None,
        span: tuple[int, int] | None = None,
        opening: set[int] | None = None,
    ) -> None:
        self.tokenized += 2 * len(text)
        for reader, variant in zip(self.readers, (text, _blank_comments(text)), strict=True):
            reader.feed(read_tokens(variant, index, where, span, opening))

    def _read_encoded(
        self, text: str, index: int, span: tuple[int, int] | None, depth: int
    ) -> None:
        """Read what base64 runs in text decode to, as code of their own."""
        if depth >= MAX_DECODINGS:
            return
        for run in BASE64.finditer(text):
            decoded = _decoded(run.group())
            if decoded is None:
                continue
            where = span or (run.start(), run.end())
            for reader in self.readers:
                reader.hard_break()
            self._read(decoded, index, None, where)
            self._read_encoded(decoded, index, where, depth + 1)
            for reader in self.readers:
                reader.hard_break()

    # -- the verdict --

    def _judge(self) -> None:
        """Take the units found since last time into the verdict, and mark new code on
        its pieces."""
        for r, reader in enumerate(self.readers):
            for unit in reader.units[self.counted[r] :]:
                if unit.new:
                    self.new_keys.add(unit.key)
                    if unit.interface and not self.rule:
                        self.rule = "interface"
            self.counted[r] = len(reader.units)
            if reader.function_body and not self.rule:
                self.rule = "function"
            for start, end in reader.spans[self.marked[r] :]:
                marks: dict[int, tuple[int, int]] = {}
                for token in reader.toks[start:end]:
                    a, b = marks.get(token.piece, (token.start, token.end))
                    marks[token.piece] = (min(a, token.start), max(b, token.end))
                for index, mark in marks.items():
                    self.pieces[index].marks.append(mark)
            self.marked[r] = len(reader.spans)
        if len(self.new_keys) > MAX_NEW_UNITS and not self.rule:
            self.rule = "statements"

    # -- showing --

    def _settled(self, index: int) -> bool:
        """Whether no statement still being read reaches into piece index."""
        for reader in self.readers:
            waiting = reader.settled()
            if waiting < len(reader.toks) and reader.toks[waiting].piece <= index:
                return False
        return True

    def _release(self) -> str:
        """What may be shown of everything read so far."""
        self._judge()
        while self.released < len(self.pieces):
            piece = self.pieces[self.released]
            if not self.finished and not self._settled(self.released):
                return self.shown
            if piece.marks and self.rule:
                self.shown += self._withheld(piece)
            elif piece.marks and not self.finished:
                return self.shown  # it may yet be withheld: wait for the verdict
            else:
                self.shown += piece.raw
            self.released += 1
        if not self.finished and self.fence is None and self.partial_length:
            return self.shown + self._partial_prefix()
        return self.shown

    def _withheld(self, piece: _Piece) -> str:
        end = "\n" if piece.raw.endswith("\n") else ""
        if piece.kind == "fence" or any(a < 0 for a, _ in piece.marks):
            return NOTE + end
        # Marks with nothing but punctuation between them (`{`, `;`) are one.
        merged: list[list[int]] = []
        for a, b in sorted(piece.marks):
            if merged and not piece.raw[merged[-1][1] : a].strip(PUNCTUATION_BETWEEN):
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        out, done = [], 0
        for a, b in merged:
            # and the punctuation that closes it
            rest = piece.raw[b:]
            closing = len(rest) - len(rest.lstrip(PUNCTUATION_BETWEEN))
            if rest[:closing].strip(" \t"):
                b += closing
            out.append(piece.raw[done:a])
            out.append(INLINE_NOTE)
            done = b
        out.append(piece.raw[done:])
        if not any(part.isalnum() for part in out[::2] for part in part):
            # A line of nothing but code: one note for a run of them.
            return "" if self.shown.endswith(NOTE + "\n") else NOTE + end
        return "".join(out)

    def _partial_prefix(self) -> str:
        """What may be shown of the line still arriving: up to the last place no statement
        can reach back over (two plain words in a row, outside quotes), and never past a
        statement or an encoded run."""
        line = "".join(self.partial)
        self.partial = [line]
        if (
            len(line) > MAX_PARTIAL
            or len(line) < self.partial_read + PARTIAL_STEP
            or line.lstrip().startswith(("`", "~"))
            or any(reader.open or reader.settled() < len(reader.toks) for reader in self.readers)
        ):
            return line[: self.partial_shown]
        self.partial_read = len(line)
        self.tokenized += 4 * len(line)
        view = _prose_view(line, table=line.lstrip().startswith("|"))
        limit = len(line)
        if run := BASE64.search(line):
            limit = run.start()
        for variant in (view.text, _blank_comments(view.text)):
            probe = Reader(self.known)
            probe.feed(read_tokens(variant, -1, view.where, opening=view.opening))
            probe.hard_break()
            self.readers[0].steps += probe.steps
            for start, _ in probe.ranges:
                limit = min(limit, probe.toks[start].start)
        tokens = read_tokens(view.text, -1, view.where)
        for left, right in itertools.pairwise(tokens):
            if right.start > limit:
                break
            if (
                left.kind == IDENT
                and right.kind == IDENT
                and left.text not in CODE_WORDS
                and right.text not in CODE_WORDS
                and not line[left.end : right.start].strip()
                and right.start > self.partial_shown
                and _quotes_closed(line[: right.start])
            ):
                self.partial_shown = right.start
        return line[: self.partial_shown]

    def _advance(self, shown: str) -> str:
        if self.stalled or not shown.startswith(self.sent):
            # Never contradict what is on screen; the stored reply replaces it at the end.
            self.stalled = True
            return ""
        new = shown[len(self.sent) :]
        self.sent = shown
        return new

    def result(self) -> Guarded:
        """The verdict on the whole reply (after finish)."""
        findings = []
        if self.rule:
            for piece in self.pieces:
                whole = piece.kind == "fence" or any(a < 0 for a, _ in piece.marks)
                if whole and piece.marks:
                    findings.append(Finding(self.rule, piece.raw))
                elif piece.marks:
                    findings.extend(Finding(self.rule, piece.raw[a:b]) for a, b in piece.marks)
        if self.received > MAX_CHARS:
            findings.append(Finding("too long", self.text[MAX_CHARS:]))
        units = [unit for reader in self.readers for unit in reader.units]
        return Guarded(self.final, findings, self.steps, units)


APOSTROPHE = re.compile(r"(?<=[^\W\d_])'(?=[^\W\d_])")


def _quotes_closed(text: str) -> bool:
    """Whether no string is open at the end of text (an apostrophe between letters is
    no quote)."""
    singles = text.count("'") - len(APOSTROPHE.findall(text))
    return text.count('"') % 2 == 0 and singles % 2 == 0


def known_units(sources: Iterable[str]) -> frozenset[str]:
    """The statements and declarations in the code the learner already has."""
    keys: set[str] = set()
    for source in sources:
        if not source:
            continue
        for variant in (source, _blank_comments(source)):
            reader = Reader(frozenset())
            reader.feed(read_tokens(variant, 0, None))
            reader.hard_break()
            keys.update(unit.key for unit in reader.units)
    return frozenset(keys)


def redact(text: str, known: frozenset[str] = frozenset()) -> Guarded:
    """The reply as the learner may see it, and what was withheld; known as StreamGuard's."""
    guard = StreamGuard(known)
    guard.feed(text)
    guard.finish()
    return guard.result()


ANSWER_REQUEST = re.compile(
    r"\b(?:write|give|show|send|paste|do|fix|solve|finish|complete)\b[^.?!\n]{0,40}\bfor me\b"
    r"|\b(?:give|show|send|paste|tell)\s+me\s+the\s+"
    r"(?:whole\s+|full\s+|complete\s+|entire\s+|working\s+|correct\s+|final\s+|fixed\s+)?"
    r"(?:kernel|code|solution|answer|shader)\b"
    r"|\bjust\s+(?:write|give|show|tell|fix|do)\b"
    r"|\b(?:what(?:'s|\s+is)|tell\s+me)\s+the\s+(?:answer|solution)\b"
    r"|\bwrite\s+(?:the|my|this)\s+(?:whole\s+|full\s+|complete\s+|entire\s+)?"
    r"(?:kernel|shader|solution)\b",
    re.IGNORECASE,
)


def asks_for_answer(message: str) -> bool:
    """Whether a learner's message asks the tutor to write the kernel for them."""
    return bool(ANSWER_REQUEST.search(message))
