"""What the engine reads from WGSL source text without compiling it.

One tokenizer and a reader of the module's declarations on its tokens: enough for the
limits' pre-check, the words of a binding error, the backend warnings, the reviewer's
facts and the checks a browser makes that naga does not (uniformity.py, webgpu.py).
naga compiles the source for real.

The source is untrusted, and a kernel that compiles can still be hostile: every function
here makes one pass over the text or its tokens and counts its steps, so a test can prove
that the work grows linearly with the input (tests/kernels/test_wgsl_tokens.py). Block
comments nest, as the WGSL spec says; an unclosed one runs to the end.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

IDENT, NUMBER, PUNCT = "ident", "number", "punct"

# WGSL's blankspace; only "\n" starts a new line, as in naga's line numbers.
BLANK = frozenset(" \t\n\r\v\f\u0085\u200e\u200f\u2028\u2029")
# Each pattern is one run of a character class: a match never backtracks.
IDENT_RUN = re.compile(r"[^\W\d]\w*")
NUMBER_RUN = re.compile(r"[0-9A-Za-z_.]+")
COMMENT_STOPS = re.compile(r"[/*\n]")
# "<" and ">" stay single tokens: "array<vec4<f32>>" closes two template lists.
TWO_CHAR_PUNCT = frozenset(
    ("->", "&&", "||", "==", "!=", "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=")
)
# Expressions in constant arguments are short; anything nested deeper is not evaluated.
MAX_EXPRESSION_DEPTH = 32


class Token(NamedTuple):
    kind: str
    text: str
    line: int  # 1-based
    column: int  # 1-based, in characters


@dataclass
class Tokens:
    tokens: list[Token]
    steps: int


def tokenize(source: str) -> Tokens:
    """The source's tokens in one pass; comments and blankspace dropped."""
    tokens: list[Token] = []
    steps = 0
    i, n = 0, len(source)
    line, line_start = 1, 0
    while i < n:
        steps += 1
        c = source[i]
        start = i
        if c == "\n":
            line, line_start = line + 1, i + 1
            i += 1
        elif c in BLANK:
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            i, line, line_start = _block_comment(source, i, line, line_start)
        elif c == "_" or c.isalpha():
            run = IDENT_RUN.match(source, i)
            i = run.end() if run else i + 1
            tokens.append(Token(IDENT, source[start:i], line, start - line_start + 1))
        elif "0" <= c <= "9" or (c == "." and i + 1 < n and "0" <= source[i + 1] <= "9"):
            i = _number_end(source, i)
            tokens.append(Token(NUMBER, source[start:i], line, start - line_start + 1))
        else:
            text = source[i : i + 2] if source[i : i + 2] in TWO_CHAR_PUNCT else c
            i += len(text)
            tokens.append(Token(PUNCT, text, line, start - line_start + 1))
        steps += max(i - start - 1, 0)  # one step per character
    return Tokens(tokens, steps)


def _number_end(source: str, i: int) -> int:
    """Past a number: decimal or hex, with a fraction, an exponent and a suffix."""
    hex_number = source.startswith(("0x", "0X"), i)
    exponents = "pP" if hex_number else "eE"
    end = _run_end(source, i)
    # A sign continues the number only right after its exponent letter: 1e-3, 0x1p+4.
    while (
        end + 1 < len(source)
        and source[end] in "+-"
        and source[end - 1] in exponents
        and "0" <= source[end + 1] <= "9"
    ):
        end = _run_end(source, end + 1)
    return end


def _run_end(source: str, i: int) -> int:
    run = NUMBER_RUN.match(source, i)
    return run.end() if run else i


def _block_comment(source: str, i: int, line: int, line_start: int) -> tuple[int, int, int]:
    """Past a block comment starting at i, nested ones included: (index, line, line start)."""
    depth = 0
    while True:
        stop = COMMENT_STOPS.search(source, i)
        if stop is None:
            return len(source), line, line_start
        i = stop.start()
        if source.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif source.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i, line, line_start
        else:
            if source[i] == "\n":
                line, line_start = line + 1, i + 1
            i += 1


# -- the module's declarations ---------------------------------------------------------------


@dataclass
class Attribute:
    name: str
    args: list[list[Token]]
    token: Token  # the "@"


@dataclass
class Param:
    name: str
    token: Token | None
    type: list[Token]
    attributes: list[Attribute]

    @property
    def builtin(self) -> str:
        return attribute_word(self.attributes, "builtin")


@dataclass
class Function:
    name: str
    token: Token  # the "fn"
    attributes: list[Attribute]
    params: list[Param]
    body: range  # token indexes inside the braces

    @property
    def stage(self) -> str:
        names = {a.name for a in self.attributes}
        return next((s for s in ("compute", "vertex", "fragment") if s in names), "")


@dataclass
class Variable:
    name: str
    token: Token
    attributes: list[Attribute]
    address_space: str  # "" for a handle (texture, sampler)
    access: str
    type: list[Token]


@dataclass
class Constant:
    kind: str  # "const" or "override"
    expression: list[Token]  # empty without an initializer


@dataclass
class Module:
    tokens: list[Token]
    functions: list[Function] = field(default_factory=list)
    variables: list[Variable] = field(default_factory=list)
    constants: dict[str, Constant] = field(default_factory=dict)
    # struct name -> its members, as parameters are: name, type, attributes
    structs: dict[str, list[Param]] = field(default_factory=dict)
    aliases: dict[str, list[Token]] = field(default_factory=dict)
    steps: int = 0
    _values: dict[str, int | None] = field(default_factory=dict, repr=False)

    def entry_point(self, name: str) -> Function | None:
        """The function named, or for "" the first compute entry point (a pipeline that
        names none uses the module's only one)."""
        if not name:
            return next((f for f in self.functions if f.stage == "compute"), None)
        return next((f for f in self.functions if f.name == name), None)

    def type_parts(self, tokens: list[Token]) -> tuple[str, list[list[Token]]]:
        """A type's name and its template arguments: "array<f32, N>" -> array, [f32], [N]."""
        if not tokens:
            return "", []
        if len(tokens) == 1 or tokens[1].text != "<":
            return tokens[0].text, []
        return tokens[0].text, _Reader(tokens, self).split(1, angles=True)[0]

    def value(
        self,
        expression: list[Token],
        depth: int = 0,
        names: Callable[[str], int | None] | None = None,
    ) -> int | None:
        """An integer constant expression's value: literals, module-scope const and
        override names (an override's default), + - * / % and parentheses; else None.
        names gives the values of other names, `a.b.c` and `arrayLength(&a)` as written."""
        value, end = _Evaluator(self, expression, names).expression(0, depth)
        return value if end == len(expression) else None

    def named_value(self, name: str, depth: int = 0) -> int | None:
        if depth > MAX_EXPRESSION_DEPTH:
            return None  # a chain of names this long is not worth following
        if name not in self._values:
            self._values[name] = None  # a cycle ends here
            constant = self.constants.get(name)
            if constant is not None and constant.expression:
                self._values[name] = self.value(constant.expression, depth)
        return self._values[name]


def attribute_word(attributes: list[Attribute], name: str) -> str:
    """The first word of an attribute's argument: "builtin" -> "global_invocation_id"."""
    for attribute in attributes:
        if attribute.name == name and attribute.args and attribute.args[0]:
            return attribute.args[0][0].text
    return ""


@functools.lru_cache(maxsize=16)
def parse(source: str) -> Module:
    """The module's declarations, read from its tokens (cached: a run asks several times)."""
    lexed = tokenize(source)
    return _Reader(lexed.tokens, Module(lexed.tokens, steps=lexed.steps)).module()


OPENING, CLOSING = frozenset("([{"), frozenset(")]}")
# Declarations start here; in broken code, a scan for the end of another one stops here.
DECLARATION_WORDS = frozenset(("fn", "var", "const", "override", "struct", "alias"))


class _Reader:
    """Reads module-scope declarations; every loop over tokens counts a step."""

    def __init__(self, tokens: list[Token], result: Module) -> None:
        self.tokens = tokens
        self.result = result

    def text(self, j: int) -> str:
        return self.tokens[j].text if j < len(self.tokens) else ""

    def module(self) -> Module:
        declarations = {
            "fn": self.function,
            "var": self.variable,
            "const": self.constant,
            "override": self.constant,
            "struct": self.struct,
            "alias": self.alias,
        }
        pending: list[Attribute] = []
        j = 0
        while j < len(self.tokens):
            self.result.steps += 1
            token = self.tokens[j]
            if token.text == "@":
                attribute, j = self.attribute(j)
                pending.append(attribute)
                continue
            read = declarations.get(token.text) if token.kind == IDENT else None
            j = read(j, pending) if read else j + 1
            # Attributes belong to the declaration right after them, or to nothing.
            pending = []
        return self.result

    def attribute(self, j: int) -> tuple[Attribute, int]:
        at, j = self.tokens[j], j + 1
        name = ""
        if j < len(self.tokens) and self.tokens[j].kind == IDENT:
            name, j = self.tokens[j].text, j + 1
        args: list[list[Token]] = []
        if self.text(j) == "(":
            args, j = self.split(j)
        return Attribute(name, args, at), j

    def split(self, j: int, angles: bool = False) -> tuple[list[list[Token]], int]:
        """The comma-separated parts inside the bracket at j, and the index past its match.
        With angles, "<" and ">" nest too (types); an unclosed bracket runs to the end."""
        parts: list[list[Token]] = [[]]
        depth = 0
        while j < len(self.tokens):
            self.result.steps += 1
            token = self.tokens[j]
            j += 1
            if token.text in OPENING or (angles and token.text == "<"):
                depth += 1
                if depth == 1:
                    continue
            elif token.text in CLOSING or (angles and token.text == ">"):
                depth -= 1
                if depth == 0:
                    break
            if depth == 1 and token.text == ",":
                parts.append([])
            else:
                parts[-1].append(token)
        return [part for part in parts if part], j

    def until(
        self, j: int, stops: tuple[str, ...], also: frozenset[str]
    ) -> tuple[list[Token], int]:
        """The tokens from j up to one of stops, or up to one of also (broken code)."""
        found: list[Token] = []
        while j < len(self.tokens) and self.tokens[j].text not in stops:
            self.result.steps += 1
            if self.tokens[j].text in also:
                break
            found.append(self.tokens[j])
            j += 1
        return found, j

    def expression_until(self, j: int, stops: tuple[str, ...]) -> tuple[list[Token], int]:
        return self.until(j, stops, DECLARATION_WORDS | {"@", "{", "}"})

    def name(self, j: int) -> tuple[str, Token | None, int]:
        if j < len(self.tokens) and self.tokens[j].kind == IDENT:
            return self.tokens[j].text, self.tokens[j], j + 1
        return "", None, j

    def typed_name(self, part: list[Token]) -> Param:
        """ "@builtin(x) name: type" as written in a parameter list or a struct."""
        reader = _Reader(part, self.result)
        attributes: list[Attribute] = []
        k = 0
        while reader.text(k) == "@":
            attribute, k = reader.attribute(k)
            attributes.append(attribute)
        name, token, k = reader.name(k)
        return Param(name, token, part[k + 1 :] if reader.text(k) == ":" else [], attributes)

    def function(self, j: int, attributes: list[Attribute]) -> int:
        token = self.tokens[j]
        name, _, j = self.name(j + 1)
        params: list[Param] = []
        if self.text(j) == "(":
            parts, j = self.split(j, angles=True)
            params = [self.typed_name(part) for part in parts]
        # The return type, its attributes included, runs up to the body.
        _, j = self.until(j, (";", "{"), DECLARATION_WORDS | {"}"})
        body = range(j, j)
        if self.text(j) == "{":
            end = self.matching_brace(j)
            body, j = range(j + 1, end), end + 1
        self.result.functions.append(Function(name, token, attributes, params, body))
        return j

    def matching_brace(self, j: int) -> int:
        depth = 0
        while j < len(self.tokens):
            self.result.steps += 1
            text = self.tokens[j].text
            depth += (text == "{") - (text == "}")
            if depth == 0:
                return j
            j += 1
        return j

    def variable(self, j: int, attributes: list[Attribute]) -> int:
        token = self.tokens[j]
        template: list[list[Token]] = []
        if self.text(j + 1) == "<":
            template, j = self.split(j + 1, angles=True)
        else:
            j += 1
        space, access = ([part[0].text for part in template] + ["", ""])[:2]
        name, _, j = self.name(j)
        kind: list[Token] = []
        if self.text(j) == ":":
            kind, j = self.expression_until(j + 1, (";", "="))
        _, j = self.expression_until(j, (";",))
        self.result.variables.append(Variable(name, token, attributes, space, access, kind))
        return j + 1

    def constant(self, j: int, attributes: list[Attribute]) -> int:
        kind = self.tokens[j].text
        name, _, j = self.name(j + 1)
        _, j = self.expression_until(j, (";", "="))
        expression: list[Token] = []
        if self.text(j) == "=":
            expression, j = self.expression_until(j + 1, (";",))
        if name:
            self.result.constants[name] = Constant(kind, expression)
        return j + 1

    def struct(self, j: int, attributes: list[Attribute]) -> int:
        name, _, j = self.name(j + 1)
        if self.text(j) != "{":
            return j
        parts, j = self.split(j, angles=True)
        self.result.structs[name] = [self.typed_name(part) for part in parts]
        return j

    def alias(self, j: int, attributes: list[Attribute]) -> int:
        name, _, j = self.name(j + 1)
        if self.text(j) != "=":
            return j
        kind, j = self.expression_until(j + 1, (";",))
        self.result.aliases[name] = kind
        return j + 1


class _Evaluator:
    """Integer constant expressions by recursive descent, nested at most
    MAX_EXPRESSION_DEPTH deep (parentheses, unary minus and names all count)."""

    LEVELS = (("+", "-"), ("*", "/", "%"))

    def __init__(
        self, module: Module, tokens: list[Token], names: Callable[[str], int | None] | None
    ) -> None:
        self.module = module
        self.tokens = tokens
        self.names = names

    def text(self, j: int) -> str:
        return self.tokens[j].text if j < len(self.tokens) else ""

    def expression(self, j: int, depth: int, level: int = 0) -> tuple[int | None, int]:
        if level == len(self.LEVELS):
            return self.operand(j, depth)
        left, j = self.expression(j, depth, level + 1)
        while self.text(j) in self.LEVELS[level]:
            operator = self.tokens[j].text
            self.module.steps += 1
            right, j = self.expression(j + 1, depth, level + 1)
            left = _apply(operator, left, right)
        return left, j

    def operand(self, j: int, depth: int) -> tuple[int | None, int]:
        self.module.steps += 1
        if depth > MAX_EXPRESSION_DEPTH or j >= len(self.tokens):
            return None, len(self.tokens)
        token = self.tokens[j]
        if token.text == "-":
            value, j = self.operand(j + 1, depth + 1)
            return (None if value is None else -value), j
        conversion = token.text in ("u32", "i32") and self.text(j + 1) == "("
        if token.text == "(" or conversion:
            value, j = self.expression(j + 2 if conversion else j + 1, depth + 1)
            return (value if self.text(j) == ")" else None), j + 1
        if token.kind == NUMBER:
            return int_literal(token.text), j + 1
        if token.kind == IDENT and self.names is not None:
            return self.named(j, depth)
        if token.kind == IDENT:
            return self.module.named_value(token.text, depth + 1), j + 1
        return None, len(self.tokens)

    def named(self, j: int, depth: int) -> tuple[int | None, int]:
        """A constant's value, else the value names gives `a.b.c` or `arrayLength(&a)`."""
        assert self.names is not None
        texts = [self.text(k) for k in range(j, j + 5)]
        if texts[:3] == ["arrayLength", "(", "&"] and texts[4] == ")":
            return self.names("".join(texts)), j + 5
        end = j + 1
        while self.text(end) == "." and end + 1 < len(self.tokens):
            self.module.steps += 1
            if self.tokens[end + 1].kind != IDENT:
                break
            end += 2
        if end == j + 1 and self.module.named_value(self.tokens[j].text, depth + 1) is not None:
            return self.module.named_value(self.tokens[j].text, depth + 1), end
        return self.names("".join(self.text(k) for k in range(j, end))), end


# WGSL's integers are at most 64 bits wide (AbstractInt is i64, u32 fits below): a value
# outside this range is not a valid constant, and keeping it would let a chain of
# constants that square each other grow Python integers without bound.
INT_RANGE = range(-(2**63), 2**64)
MAX_LITERAL_DIGITS = 20


def _in_range(value: int) -> int | None:
    return value if value in INT_RANGE else None


def _apply(operator: str, left: int | None, right: int | None) -> int | None:
    if left is None or right is None:
        return None
    if operator in "/%" and right == 0:
        return None
    if operator == "/":
        return abs(left) // abs(right) * (1 if (left < 0) == (right < 0) else -1)
    if operator == "%":
        quotient = _apply("/", left, right)
        return None if quotient is None else left - right * quotient
    return _in_range({"+": left + right, "-": left - right, "*": left * right}[operator])


def int_literal(text: str) -> int | None:
    """An integer literal's value ("64", "64u", "0x40i"), or None for anything else
    (including one too wide for 64 bits)."""
    digits = text[:-1] if text[-1:] in ("i", "u") else text
    hexadecimal = digits[:2] in ("0x", "0X")
    if hexadecimal:
        digits = digits[2:]
    if not digits.isascii() or not digits.isalnum() or len(digits) > MAX_LITERAL_DIGITS:
        return None
    try:
        return _in_range(int(digits, 16) if hexadecimal else int(digits))
    except ValueError:
        return None


# -- what the engine asks ------------------------------------------------------------------


def entry_points(source: str) -> list[str]:
    """The names of the @compute functions in a WGSL module, in order."""
    return [f.name for f in parse(source).functions if f.stage == "compute" and f.name]


def workgroup_dimensions(module: Module, function: Function) -> list[int] | None:
    """An entry point's @workgroup_size as [x, y, z], or None when it cannot be told."""
    for attribute in function.attributes:
        if attribute.name == "workgroup_size":
            sizes = [module.value(arg) for arg in attribute.args]
            if not sizes or len(sizes) > 3 or any(s is None for s in sizes):
                return None
            return [s or 0 for s in sizes] + [1] * (3 - len(sizes))
    return None


def workgroup_size(source: str, entry_point: str) -> int:
    """Invocations per workgroup of an entry point ("" for the only one), read from its
    @workgroup_size.

    Understands integer constant expressions of literals and module-scope const/override
    names. When it cannot tell, it says 1: the pre-check then under-counts, and the
    wall-clock deadline in the pool is what stops an oversized run.
    """
    module = parse(source)
    function = module.entry_point(entry_point)
    dimensions = workgroup_dimensions(module, function) if function else None
    if dimensions is None:
        return 1
    return dimensions[0] * dimensions[1] * dimensions[2]


def resource_numbers(module: Module, variable: Variable) -> tuple[int | None, int | None]:
    group = binding = None
    for attribute in variable.attributes:
        if attribute.name in ("group", "binding") and len(attribute.args) == 1:
            value = module.value(attribute.args[0])
            group, binding = (value, binding) if attribute.name == "group" else (group, value)
    return group, binding


def declared_bindings(source: str) -> list[tuple[int, int, str]]:
    """(group, binding, variable name) of every resource the module declares."""
    module = parse(source)
    found = []
    for variable in module.variables:
        group, binding = resource_numbers(module, variable)
        if group is not None and binding is not None:
            found.append((group, binding, variable.name))
    return found


def bracket_pairs(tokens: list[Token]) -> dict[int, int]:
    """The index of each bracket's match (len(tokens) for an unclosed one), by one stack."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    closers = {")": "(", "]": "[", "}": "{"}
    for j, token in enumerate(tokens):
        if token.text in ("(", "[", "{"):
            stack.append(j)
        elif token.text in closers and stack and tokens[stack[-1]].text == closers[token.text]:
            pairs[stack.pop()] = j
    for j in stack:
        pairs[j] = len(tokens)
    return pairs


def type_text(tokens: list[Token]) -> str:
    """A type as written, without the blankspace: "array<vec4<f32>, 16>"."""
    return "".join(t.text + (" " if t.text == "," else "") for t in tokens)
