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

from kernels.engine.wgsl import IDENT, NUMBER, tokenize

MAX_NEW_UNITS = 2
MAX_CHARS = 32_000
# A line still arriving is read again on each delta only while it is this short; past
# it, it waits for its end.
MAX_PARTIAL = 400
# ... and only once it has grown by this much since.
PARTIAL_STEP = 16
MAX_NESTING = 32
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

# Words that start a statement or declaration, in WGSL and JavaScript.
DECLARATIONS = frozenset(("let", "var", "const", "override"))
HEADERS = frozenset(("fn", "function", "struct", "if", "while", "for", "loop", "else", "switch"))
KEYWORDS = DECLARATIONS | HEADERS | {"return"}
# Words that cannot be an operand (a statement word where an expression should be).
NOT_OPERANDS = KEYWORDS | {"break", "continue", "discard", "case", "default"}
# Words that may stand between two others inside code, so a pair with one of them is no
# sign of prose: `let i`, `return x`, `await device`, `new Float32Array`.
CODE_WORDS = KEYWORDS | {"await", "new", "async", "typeof", "of", "in", "instanceof", "else"}
PREFIX_OPERATORS = frozenset(("-", "!", "~", "&", "*", "+", "new", "await", "typeof", "void"))
BINARY = frozenset(("+", "-", "*", "/", "%", "&", "|", "^", "<", ">", "==", "!=", "&&", "||"))
BINARY |= {"?", ":", "instanceof", "in"}
ASSIGNMENTS = frozenset(("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="))
QUOTES = frozenset(("'", '"', "`"))
OPENERS = {"(": ")", "[": "]", "{": "}"}
# After these a "{" opens an object literal (a value), not a block.
VALUE_BEFORE = frozenset(("=", "(", ",", ":", "[", "return", "?", "&&", "||"))
# The GPU interface the learner writes: entry points and resources in a kernel, the
# WebGPU calls that create, fill, bind, dispatch and read back in a host program.
INTERFACE_ATTRIBUTES = frozenset(("compute", "vertex", "fragment", "group", "binding"))
INTERFACE_ATTRIBUTES |= {"workgroup_size"}
INTERFACE_CALLS = frozenset(
    (
        "createBuffer",
        "writeBuffer",
        "dispatchWorkgroups",
        "dispatchWorkgroupsIndirect",
        "mapAsync",
        "getMappedRange",
        "createComputePipeline",
        "createComputePipelineAsync",
        "createShaderModule",
        "createPipelineLayout",
        "createBindGroupLayout",
        "beginComputePass",
        "createBindGroup",
        "getBindGroupLayout",
        "setPipeline",
        "setBindGroup",
        "copyBufferToBuffer",
        "createCommandEncoder",
        "requestAdapter",
        "requestDevice",
        "submit",
        "unmap",
    )
)

SOFT = frozenset(("eol", "break", "cell"))
# What a table's cell border reads as: no character of code.
CELL = "\x1f"
PUNCTUATION_BETWEEN = " \t;,{}()"


class _Token(NamedTuple):
    text: str
    kind: str
    piece: int
    # Where it came from in its piece's raw text, and whether it starts a line.
    start: int
    end: int
    line_start: bool
    # Its place in the text it was read from (for adjacency: `<` `=` is `<=`).
    at: int
    # Whether it is the first of a code span (`out[i] = 1` may stand alone there).
    opens: bool = False


@dataclass
class Finding:
    rule: str
    text: str


@dataclass
class Unit:
    """A statement or declaration found in a reply."""

    key: str  # its tokens, one space apart: what it compiles to, whatever its spelling
    kind: str  # "function", "statement", "header"
    new: bool  # not in what the learner already has
    interface: bool


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


# -- recognising statements in a stream of tokens ----------------------------------------------


class _Reader:
    """Reads tokens as they come and recognises the statements and declarations they form.

    Tokens are split into segments at `;`, `{` and `}` outside parentheses and brackets,
    at code-span borders and at line ends outside them; a segment is classified once,
    when it ends. Blocks are tracked so that a statement inside a function is known as
    such, across pieces (a function split over several code blocks is still one)."""

    def __init__(self, known: frozenset[str]) -> None:
        self.known = known
        self.toks: list[_Token] = []
        self.open: list[int] = []  # indices of the open ( [ and object-literal {
        self.match: dict[int, int] = {}  # opener -> closer, and closer -> opener
        self.seg = 0  # where the segment being read starts
        # Whether it ends with attributes: those belong to the declaration on the next
        # line (@compute on its own line above fn main).
        self.attributes_last = False
        self.blocks: list[bool] = []  # open blocks: whether each is a function's
        self.in_function = 0
        self.units: list[Unit] = []
        self.ranges: list[tuple[int, int]] = []  # each unit's token range
        self.spans: list[tuple[int, int]] = []  # each new unit's
        self.function_body = False
        self.steps = 0

    # -- reading tokens --

    def feed(self, tokens: Iterable[_Token]) -> None:
        for token in tokens:
            self._push(token)

    def line_end(self) -> None:
        """The end of a line: a segment outside parentheses ends with it."""
        if not self.open and not self.attributes_last:
            self._end(len(self.toks), "eol", consumed=False)

    def hard_break(self) -> None:
        """A blank line, an encoded run's edge or the end: everything open ends here, what
        is still open closed where it stops (code cut off is still code)."""
        while self.open:
            last = self.toks[-1]
            closer = OPENERS[self.toks[self.open[-1]].text]
            at = last.at + len(last.text)
            self._push(_Token(closer, "punct", last.piece, last.end, last.end, False, at))
        self._end(len(self.toks), "break", consumed=False)

    def settled(self) -> int:
        """Tokens before this index will not be read again."""
        return self.seg

    def _push(self, token: _Token) -> None:
        self.steps += 1
        k = len(self.toks)
        if token.line_start and not self.open and not self.attributes_last:
            self._end(k, "eol", consumed=False)
        self.toks.append(token)
        text = token.text
        if not self.open:
            before = self.toks[k - 1].text if k > self.seg else ""
            self.attributes_last = (
                text == "@"
                or (token.kind == IDENT and before == "@")
                or (text == "(" and k - 2 >= self.seg and self.toks[k - 2].text == "@")
            )
        if text in ("(", "["):
            self.open.append(k)
        elif text == "{":
            before = self.toks[k - 1].text if k > self.seg else ""
            if before in VALUE_BEFORE or (self.open and self.toks[self.open[-1]].text == "{"):
                self.open.append(k)
            else:
                # A block: whatever parenthesis is still open around it was prose.
                self.open.clear()
                self._end(k, "{")
        elif text in (")", "]", "}"):
            if self.open and OPENERS[self.toks[self.open[-1]].text] == text:
                opener = self.open.pop()
                self.match[opener], self.match[k] = k, opener
            elif text == "}":
                self.open.clear()
                self._end(k, "}")
        elif text == ";":
            if not self.open or not self._in_for_header():
                self.open.clear()
                self._end(k, ";")
        elif text == CELL and not self.open:
            self._end(k, "cell")

    def _in_for_header(self) -> bool:
        opener = self.open[-1]
        return (
            len(self.open) == 1
            and self.toks[opener].text == "("
            and opener > 0
            and self.toks[opener - 1].text == "for"
        )

    def _end(self, end: int, term: str, consumed: bool = True) -> None:
        start = self.seg
        self.seg = end + 1 if consumed else end
        self.attributes_last = False
        kind = self._classify(start, end, term) if start < end else None
        if term == "{":
            function = kind == "function"
            self.blocks.append(function)
            self.in_function += function
        elif term == "}" and self.blocks:
            self.in_function -= self.blocks.pop()

    # -- classifying a segment --

    def _classify(self, s: int, e: int, term: str) -> str | None:
        """Record the statement tokens[s:e] form, if any; its kind."""
        toks = self.toks
        hard = term not in SOFT
        i = s
        while i < e:
            self.steps += 1
            token = toks[i]
            if token.kind == IDENT and token.text in KEYWORDS:
                kind = self._keyword_statement(i, e, term)
                if kind:
                    self._record(self._attributes_before(i, s), e, kind)
                    return kind
            i = self.match[i] + 1 if token.text in OPENERS and i in self.match else i + 1
        assign = self._assignment_at(s, e)
        if assign is not None:
            left = self._chain_start(assign - 1, s, calls=False)
            alone = left is not None and (left == s or toks[left].opens)
            if left is not None and (hard or alone) and self._expression(assign + 1, e, 0) == e:
                self._record(left, e, "statement")
                return "statement"
        if toks[e - 1].text == ")" and (e - 1) in self.match:
            left = self._chain_start(e - 1, s, calls=True)
            standalone = left == s and toks[s].line_start and term in ("eol", "break")
            if left is not None and (term == ";" or standalone) and self._operand(left, e, 0) == e:
                self._record(left, e, "statement")
                return "statement"
        return None

    def _keyword_statement(self, i: int, e: int, term: str) -> str | None:
        toks = self.toks
        word = toks[i].text
        if word in DECLARATIONS:
            return "statement" if self._declaration(i + 1, e) == e else None
        if word == "return":
            if term not in (";", "}"):
                return None
            return "statement" if i + 1 == e or self._expression(i + 1, e, 0) == e else None
        if term != "{":
            return None
        if word in ("fn", "function"):
            j = i + 1
            if j < e and toks[j].kind == IDENT:
                j += 1
            if j < e and toks[j].text == "(" and j in self.match:
                j = self.match[j] + 1
                if j == e or (toks[j].text in ("->", ":") and self._type(j + 1, e) == e):
                    return "function"
            return None
        if word == "struct":
            return "header" if i + 2 == e and toks[i + 1].kind == IDENT else None
        if word in ("loop", "else") and i + 1 == e:
            return "header"
        if word == "else" and i + 1 < e and toks[i + 1].text == "if":
            i += 1
        if word == "for":
            ok = i + 1 < e and toks[i + 1].text == "(" and self.match.get(i + 1) == e - 1
            return "header" if ok else None
        if word in ("if", "while", "switch", "else"):
            return "header" if self._expression(i + 1, e, 0) == e else None
        return None

    def _attributes_before(self, i: int, s: int) -> int:
        """Where the attributes right before token i start (@group(0) @binding(1) var ...)."""
        toks = self.toks
        while i - 2 >= s:
            self.steps += 1
            j = i - 1
            if toks[j].text == ")" and j in self.match:
                j = self.match[j] - 1
            if j - 1 >= s and toks[j].kind == IDENT and toks[j - 1].text == "@":
                i = j - 1
            else:
                break
        return i

    def _assignment_at(self, s: int, e: int) -> int | None:
        toks = self.toks
        i = s
        while i < e:
            self.steps += 1
            text = toks[i].text
            if text in OPENERS and i in self.match:
                i = self.match[i] + 1
                continue
            if text in ASSIGNMENTS and not self._comparison(i, e):
                return i
            i += 1
        return None

    def _adjacent(self, a: int, b: int) -> bool:
        left, right = self.toks[a], self.toks[b]
        return left.piece == right.piece and left.at + len(left.text) == right.at

    def _comparison(self, i: int, e: int) -> bool:
        """Whether the `=` at i is part of <=, >=, ===, !== or =>."""
        if self.toks[i].text != "=":
            return False
        before = i > 0 and self.toks[i - 1].text in ("<", ">", "!", "=", "==", "!=")
        after = i + 1 < e and self.toks[i + 1].text in (">", "=")
        return (before and self._adjacent(i - 1, i)) or (after and self._adjacent(i, i + 1))

    def _chain_start(self, j: int, s: int, calls: bool) -> int | None:
        """Where the chain that ends at token j starts: name(.name | [..] | (..))*; None
        when it is no chain. calls: whether (..) may be part of it."""
        toks = self.toks
        while j >= s:
            self.steps += 1
            text = toks[j].text
            if (text == "]" or (calls and text == ")")) and j in self.match:
                j = self.match[j] - 1
                continue
            if toks[j].kind != IDENT or text in NOT_OPERANDS:
                return None
            if j - 1 >= s and toks[j - 1].text == "." and j - 2 >= s:
                j -= 2
                continue
            if calls and j - 1 >= s and toks[j - 1].text in ("await", "new"):
                return j - 1
            return j
        return None

    def _declaration(self, i: int, e: int) -> int:
        """let/var/const name[: type][= value], from after the keyword; where it ends."""
        toks = self.toks
        if i < e and toks[i].text == "<":
            i = self._template_end(i, e)
            if i < 0:
                return -1
        if i < e and toks[i].text in ("{", "[") and i in self.match:
            i = self.match[i] + 1  # a destructuring pattern
        elif i < e and toks[i].kind == IDENT and toks[i].text not in NOT_OPERANDS:
            i += 1
        else:
            return -1
        if i < e and toks[i].text == ":":
            i = self._type(i + 1, e)
            if i < 0:
                return -1
        if i < e and toks[i].text == "=":
            return self._expression(i + 1, e, 0)
        return i

    def _type(self, i: int, e: int) -> int:
        toks = self.toks
        while i < e and toks[i].text == "@":
            i += 2  # an attribute on a return type
            if i < e and toks[i].text == "(" and i in self.match:
                i = self.match[i] + 1
        if i >= e or toks[i].kind != IDENT:
            return -1
        i += 1
        if i < e and toks[i].text == "<":
            i = self._template_end(i, e)
        return i

    def _template_end(self, i: int, e: int) -> int:
        """Past the template list opening at token i (`<f32>`, `<storage, read>`)."""
        depth = 0
        while i < e:
            self.steps += 1
            text = self.toks[i].text
            if text == "<":
                depth += 1
            elif text == ">":
                depth -= 1
                if depth == 0:
                    return i + 1
            elif text in (";", "{", "}", "="):
                return -1
            i += 1
        return -1

    def _expression(self, i: int, e: int, depth: int) -> int:
        """Where the expression starting at token i ends, or -1 if none starts there."""
        toks = self.toks
        while True:
            i = self._operand(i, e, depth)
            if i < 0 or i >= e:
                return i
            text = toks[i].text
            if text == "=" and i + 1 < e and toks[i + 1].text == ">" and self._adjacent(i, i + 1):
                i += 2  # an arrow function's body follows
            elif text in BINARY:
                i += 1
                follows = toks[i].text if i < e else ""
                if follows in ("<", ">", "=", "*", "?", "&", "|") and self._adjacent(i - 1, i):
                    i += 1  # <<, >>, <=, >=, ===, **, ??
            else:
                return i

    def _operand(self, i: int, e: int, depth: int) -> int:
        toks = self.toks
        while i < e and (toks[i].text in PREFIX_OPERATORS or toks[i].text == "."):
            self.steps += 1
            i += 1  # -x, !x, &x, *p, new X, await p, ...spread
        if i >= e:
            return -1
        token = toks[i]
        if token.kind == IDENT:
            if token.text in NOT_OPERANDS:
                return -1
            i += 1
            if i < e and toks[i].text == "<":  # vec3<u32>(...), array<f32, 4>(...)
                end = self._template_end(i, min(e, i + 16))
                if 0 < end < e and toks[end].text == "(":
                    i = end
        elif token.kind == NUMBER:
            i += 1
        elif token.text in QUOTES:
            i = self._string_end(i, e)
            if i < 0:
                return -1
        elif token.text in OPENERS and i in self.match and self.match[i] < e:
            if not self._group(i, depth):
                return -1
            i = self.match[i] + 1
        else:
            return -1
        while i < e:
            self.steps += 1
            text = toks[i].text
            if text in (".", "?.") and i + 1 < e and toks[i + 1].kind == IDENT:
                i += 2
            elif text == "?" and i + 2 < e and toks[i + 1].text == "." and self._adjacent(i, i + 1):
                i += 1
            elif text in ("(", "[") and i in self.match and self.match[i] < e:
                if not self._group(i, depth):
                    return -1
                i = self.match[i] + 1
            elif text in ("++", "--"):
                i += 1
            else:
                break
        return i

    def _string_end(self, i: int, e: int) -> int:
        quote = self.toks[i].text
        j = i + 1
        while j < e:
            self.steps += 1
            if self.toks[j].text == quote:
                return j + 1
            j += 1
        return -1

    def _group(self, opener: int, depth: int) -> bool:
        """Whether a matched ( or [ holds a list of expressions (a { holds anything: an
        object literal or a function's body)."""
        close = self.match[opener]
        if self.toks[opener].text == "{" or depth >= MAX_NESTING:
            return True
        i = opener + 1
        while i < close:
            end = self._expression(i, close, depth + 1)
            if end < 0:
                return False
            if end == close:
                return True
            if self.toks[end].text != ",":
                return False
            i = end + 1
        return True

    # -- what was found --

    def _record(self, start: int, end: int, kind: str) -> None:
        toks = self.toks[start:end]
        self.steps += len(toks)
        key = " ".join(t.text for t in toks)
        new = key not in self.known
        interface = any(
            t.text in INTERFACE_CALLS
            or (t.text == "@" and k + 1 < len(toks) and toks[k + 1].text in INTERFACE_ATTRIBUTES)
            for k, t in enumerate(toks)
        ) or any(name in text for text in _strings(toks) for name in INTERFACE_CALLS)
        self.units.append(Unit(key, kind, new, interface))
        self.ranges.append((start, end))
        if new:
            self.spans.append((start, end))
            if self.in_function and kind != "function":
                self.function_body = True


def _strings(toks: list[_Token]) -> list[str]:
    """The words of the string literals in tokens, those joined by + as one
    (`device["create" + "Buffer"]` calls createBuffer)."""
    found: list[str] = []
    words: list[str] = []
    quote = ""
    for token in toks:
        if quote:
            if token.text == quote:
                quote = ""
            else:
                words.append(token.text)
        elif token.text in QUOTES:
            quote = token.text
        elif token.text != "+" and words:
            found.append("".join(words))
            words = []
    if words:
        found.append("".join(words))
    return found


# -- the pieces of a reply -------------------------------------------------------------------


@dataclass
class _Piece:
    raw: str
    kind: str  # "prose", "fence", "blank"
    # The character ranges of new code in raw; (-1, -1): the whole piece (a code block).
    marks: list[tuple[int, int]] = field(default_factory=list)


def _tokens(
    text: str,
    piece: int,
    where: list[int] | None,
    span: tuple[int, int] | None = None,
    opening: set[int] | None = None,
) -> list[_Token]:
    """The tokens of a text read from a piece. Where each came from in the piece's raw
    text: where[i] for character i of text (a line of prose), else span (an encoded run),
    else (-1, -1) (a code block, withheld whole)."""
    found = []
    offsets = [0]
    position = text.find("\n")
    while position >= 0:
        offsets.append(position + 1)
        position = text.find("\n", position + 1)
    line = 0
    for token in tokenize(text).tokens:
        at = offsets[token.line - 1] + token.column - 1
        if span is not None:
            start, end = span
        elif where is not None:
            start, end = where[at], where[at + len(token.text) - 1] + 1
        else:
            start, end = -1, -1
        opens = False
        if opening:
            before = at - 1
            while before >= 0 and text[before] == " " and before not in opening:
                before -= 1
            opens = before in opening
        found.append(
            _Token(token.text, token.kind, piece, start, end, token.line != line, at, opens)
        )
        line = token.line
    return found


class StreamGuard:
    """Feed it text deltas; it returns what may be shown now.

    known: the statements of what the learner already has (known_units of their kernel
    and host program and the starter code); they count for nothing."""

    def __init__(self, known: frozenset[str] = frozenset()) -> None:
        self.known = known
        # Two readings of every piece: comments dropped, and comment markers blanked.
        self.readers = (_Reader(self.known), _Reader(self.known))
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
            reader.feed(_tokens(variant, index, where, span, opening))

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
            probe = _Reader(self.known)
            probe.feed(_tokens(variant, -1, view.where, opening=view.opening))
            probe.hard_break()
            self.readers[0].steps += probe.steps
            for start, _ in probe.ranges:
                limit = min(limit, probe.toks[start].start)
        tokens = _tokens(view.text, -1, view.where)
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
            reader = _Reader(frozenset())
            reader.feed(_tokens(variant, 0, None))
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
