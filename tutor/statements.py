"""The statements and declarations a stream of code tokens forms: the guardrail's reading.

Tokens come from the engine's WGSL tokenizer, which reads JavaScript closely enough for
this: a reply's code spans are read as either language would be. The reading is linear:
tokens are split into segments at `;`, `{` and `}` outside groups, each segment is
classified once when it ends, groups are matched once, and nesting deeper than
MAX_NESTING is not examined.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from kernels.engine.wgsl import IDENT, NUMBER, tokenize

MAX_NESTING = 32

# Words that start a statement or declaration, in WGSL and JavaScript.
DECLARATIONS = frozenset(("let", "var", "const", "override"))
HEADERS = frozenset(("fn", "function", "struct", "if", "while", "for", "loop", "else", "switch"))
KEYWORDS = DECLARATIONS | HEADERS | {"return"}
# Words that cannot be an operand (a statement word where an expression should be).
NOT_OPERANDS = KEYWORDS | {"break", "continue", "discard", "case", "default"}
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


class Token(NamedTuple):
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
class Unit:
    """A statement or declaration found in a reply."""

    key: str  # its tokens, one space apart: what it compiles to, whatever its spelling
    kind: str  # "function", "statement", "header"
    new: bool  # not in what the learner already has
    interface: bool


# -- recognising statements in a stream of tokens ----------------------------------------------


class Reader:
    """Reads tokens as they come and recognises the statements and declarations they form.

    Tokens are split into segments at `;`, `{` and `}` outside parentheses and brackets,
    at code-span borders and at line ends outside them; a segment is classified once,
    when it ends. Blocks are tracked so that a statement inside a function is known as
    such, across pieces (a function split over several code blocks is still one)."""

    def __init__(self, known: frozenset[str]) -> None:
        self.known = known
        self.toks: list[Token] = []
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

    def feed(self, tokens: Iterable[Token]) -> None:
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
            self._push(Token(closer, "punct", last.piece, last.end, last.end, False, at))
        self._end(len(self.toks), "break", consumed=False)

    def settled(self) -> int:
        """Tokens before this index will not be read again."""
        return self.seg

    def _push(self, token: Token) -> None:
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


def _strings(toks: list[Token]) -> list[str]:
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


def read_tokens(
    text: str,
    piece: int,
    where: list[int] | None,
    span: tuple[int, int] | None = None,
    opening: set[int] | None = None,
) -> list[Token]:
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
            Token(token.text, token.kind, piece, start, end, token.line != line, at, opens)
        )
        line = token.line
    return found
