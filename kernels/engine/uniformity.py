"""Barriers in non-uniform control flow, reported as Chrome's Tint reports them.

naga 0.32 (in wgpu-native, under wgpu-py 0.32) accepts a workgroupBarrier() inside
`if (lid.x < 32u)`; Tint, the compiler in Chrome, refuses the module: "'workgroupBarrier'
must only be called from uniform control flow". This is the common part of WGSL's
uniformity analysis, on the tokens of wgsl.py:

- non-uniform values: the builtins that differ between the invocations of a workgroup
  (local/global_invocation_id, local_invocation_index, subgroup_invocation_id), reads of
  private, workgroup and read_write storage variables, the results of atomics, and every
  value computed from those or assigned under non-uniform control;
- non-uniform control: the body of an if, switch or loop whose condition is non-uniform,
  the rest of a function after a return that only some invocations take, the rest of a
  loop after such a break or continue;
- what must be called in uniform control: workgroupBarrier, storageBarrier,
  textureBarrier, workgroupUniformLoad, and every function that calls one of them.

Values flow through one graph per module (an edge says "if this is non-uniform, so is
that"), built in one pass over each function and searched once: linear in the tokens.
Where it is unsure it says nothing (a false alarm would fail a kernel a browser runs):
values are tracked per variable, not per assignment, and a function's parameters count
as uniform.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from kernels.engine.outcome import CompileError
from kernels.engine.wgsl import (
    IDENT,
    Function,
    Module,
    Param,
    Token,
    Variable,
    bracket_pairs,
    parse,
)

NON_UNIFORM_BUILTINS = frozenset(
    (
        "local_invocation_id",
        "local_invocation_index",
        "global_invocation_id",
        "subgroup_invocation_id",
    )
)
NEEDS_UNIFORM_CONTROL = frozenset(
    ("workgroupBarrier", "storageBarrier", "textureBarrier", "workgroupUniformLoad")
)
ASSIGNMENTS = frozenset(("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^="))
# Deeper nesting than this is not analysed (no report): every level costs a stack frame.
MAX_NESTING = 64


class _TooDeep(Exception):
    pass


@dataclass
class Node:
    note: str = ""  # for a source of non-uniformity: Tint's note
    condition: Token | None = None  # for the control of a branch or loop: its keyword


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[list[tuple[int, Token | None]]] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    steps: int = 0

    def node(self, note: str = "", condition: Token | None = None) -> int:
        self.nodes.append(Node(note, condition))
        self.edges.append([])
        return len(self.nodes) - 1

    def source(self, note: str) -> int:
        self.sources.append(self.node(note))
        return self.sources[-1]

    def edge(self, source: int, target: int, via: Token | None = None) -> None:
        self.edges[source].append((target, via))

    def reach(self) -> dict[int, tuple[int, Token | None]]:
        """Every node a source reaches, with the node and token it was reached from."""
        reached: dict[int, tuple[int, Token | None]] = {s: (-1, None) for s in self.sources}
        queue = deque(self.sources)
        while queue:
            node = queue.popleft()
            for target, via in self.edges[node]:
                self.steps += 1
                if target not in reached:
                    reached[target] = (node, via)
                    queue.append(target)
        return reached


@dataclass
class Exits:
    """Nodes that are non-uniform when some invocations may leave early."""

    returns: int | None = None
    breaks: int | None = None
    continues: int | None = None


@dataclass
class Call:
    control: int  # the node of the control the call is made under
    token: Token  # the called name
    caller: str


@dataclass
class Analysis:
    graph: Graph
    function_names: set[str]
    calls: list[Call] = field(default_factory=list)  # of what may need uniform control
    steps: int = 0


def uniformity_error(kernel: str, source: str) -> CompileError | None:
    """Tint's error for the first call that needs uniform control but may not have it."""
    return find_error(kernel, source)[0]


def find_error(kernel: str, source: str) -> tuple[CompileError | None, int]:
    """The error (or None) and the steps it took, for the tests of linear growth."""
    module = parse(source)
    analysis = Analysis(Graph(), {f.name for f in module.functions})
    sources = _global_sources(module, analysis.graph)
    pairs = bracket_pairs(module.tokens)
    try:
        for function in module.functions:
            _Walker(module, function, pairs, sources, analysis).run()
    except _TooDeep:
        return None, analysis.steps
    needing = _needing_uniform_control(analysis)
    reached = analysis.graph.reach()
    steps = analysis.steps + analysis.graph.steps + len(module.tokens)
    for call in analysis.calls:
        if call.token.text in needing and call.control in reached:
            return _error(kernel, source, analysis.graph, reached, call), steps
    return None, steps


def _global_sources(module: Module, graph: Graph) -> dict[str, int]:
    """A source node for each module-scope variable whose reads may differ per invocation."""
    found = {}
    for variable in module.variables:
        kind = _mutable_kind(variable)
        if kind and variable.name:
            found[variable.name] = graph.source(
                f"reading from {kind} '{variable.name}' may result in a non-uniform value"
            )
    return found


def _mutable_kind(variable: Variable) -> str:
    if variable.address_space == "private":
        return "module-scope private variable"
    if variable.address_space == "workgroup":
        return "workgroup storage variable"
    if variable.address_space == "storage" and variable.access == "read_write":
        return "read_write storage buffer"
    return ""


def _needing_uniform_control(analysis: Analysis) -> set[str]:
    """The builtins that need uniform control, and the functions that call them."""
    callers: dict[str, set[str]] = {}
    for call in analysis.calls:
        callers.setdefault(call.token.text, set()).add(call.caller)
    needing = set(NEEDS_UNIFORM_CONTROL)
    queue = deque(NEEDS_UNIFORM_CONTROL)
    while queue:
        for caller in callers.get(queue.popleft(), ()):
            analysis.steps += 1
            if caller not in needing:
                needing.add(caller)
                queue.append(caller)
    return needing


def _error(
    kernel: str,
    source: str,
    graph: Graph,
    reached: dict[int, tuple[int, Token | None]],
    call: Call,
) -> CompileError:
    """Tint's words: the call, the branch that made control non-uniform, the value it read."""
    condition: Token | None = None
    read: Token | None = None
    node = call.control
    while True:
        condition = graph.nodes[node].condition or condition
        parent, via = reached[node]
        if parent < 0:
            break
        node, read = parent, via
    lines = source.split("\n")
    message = f"'{call.token.text}' must only be called from uniform control flow"
    places = [(call.token, "error", message)]
    if condition is not None:
        places.append((condition, "note", "control flow depends on possibly non-uniform value"))
    if read is not None:
        places.append((read, "note", graph.nodes[node].note))
    return {
        "kernel": kernel,
        "line": call.token.line,
        "column": call.token.column,
        "message": message,
        "label": "",
        "notes": [f"line {t.line}, column {t.column}: {text}" for t, _, text in places[1:]],
        "text": "\n\n".join(_excerpt(lines, *place) for place in places),
    }


def _excerpt(lines: list[str], token: Token, severity: str, text: str) -> str:
    """One diagnostic as Tint prints it: position, the source line, carets under the token."""
    row = lines[token.line - 1].rstrip("\r") if token.line <= len(lines) else ""
    carets = " " * (token.column - 1) + "^" * len(token.text)
    return f":{token.line}:{token.column} {severity}: {text}\n{row}\n{carets}"


class _Walker:
    """One function's statements into the graph: which values and which control may be
    non-uniform. Every token of the body is visited a bounded number of times."""

    def __init__(
        self,
        module: Module,
        function: Function,
        pairs: dict[int, int],
        sources: dict[str, int],
        analysis: Analysis,
    ) -> None:
        self.module = module
        self.tokens = module.tokens
        self.function = function
        self.pairs = pairs
        self.globals = sources
        self.analysis = analysis
        self.graph = analysis.graph
        self.locals: dict[str, list[int]] = {}
        self.params = self.parameter_sources()

    def parameter_sources(self) -> dict[str, int]:
        """Nodes for an entry point's non-uniform builtins, direct or in a struct."""
        found: dict[str, int] = {}
        if not self.function.stage:
            return found
        for param in self.function.params:
            note = f"builtin '{param.name}' of '{self.function.name}' may be non-uniform"
            if param.builtin in NON_UNIFORM_BUILTINS:
                found[param.name] = self.graph.source(note)
            for member in self._members(param):
                if member.builtin in NON_UNIFORM_BUILTINS:
                    found[f"{param.name}.{member.name}"] = self.graph.source(note)
        return found

    def _members(self, param: Param) -> list[Param]:
        return self.module.structs.get(param.type[0].text, []) if len(param.type) == 1 else []

    def text(self, j: int) -> str:
        return self.tokens[j].text if 0 <= j < len(self.tokens) else ""

    def step(self) -> None:
        self.analysis.steps += 1

    def run(self) -> None:
        body = self.function.body
        self.statements(body.start, body.stop, self.graph.node(), 0)

    # -- statements ----------------------------------------------------------------------

    def statements(self, j: int, end: int, control: int, depth: int) -> Exits:
        """The statements in tokens[j:end] under control; the early exits they may take."""
        if depth > MAX_NESTING:
            raise _TooDeep
        exits = Exits()
        declared: list[str] = []
        while j < end:
            self.step()
            word = self.text(j)
            if word == "@":
                j = self.past_attribute(j)
            elif word == ";":
                j += 1
            elif word in ("{", "continuing", "if", "switch", "for", "while", "loop"):
                j, inner = self.compound(j, end, control, depth)
                if inner != Exits():
                    # What follows runs only in the invocations that did not leave.
                    control = self.after(control, inner)
                    self.merge(exits, inner)
            else:
                stop = self.statement_end(j, end)
                self.simple(j, stop, control, exits, declared)
                j = stop + 1
        for name in declared:
            self.locals[name].pop()
        return exits

    def simple(self, j: int, stop: int, control: int, exits: Exits, declared: list[str]) -> None:
        word = self.text(j)
        if word in ("let", "var", "const"):
            self.declaration(j, stop, control, declared)
        elif word == "return":
            self.reads(j + 1, stop, control)
            exits.returns = self.join(exits.returns, control)
        elif word == "break" and self.text(j + 1) == "if":
            exits.breaks = self.join(exits.breaks, self.condition(j, j + 2, stop, control))
        elif word == "break":
            exits.breaks = self.join(exits.breaks, control)
        elif word == "continue":
            exits.continues = self.join(exits.continues, control)
        else:
            self.assignment(j, stop, control)

    def compound(self, j: int, end: int, control: int, depth: int) -> tuple[int, Exits]:
        """A statement with a body: (the index past it, the exits that leave it)."""
        word = self.text(j)
        if word == "if":
            return self.if_chain(j, end, control, depth)
        if word == "switch":
            return self.switch(j, end, control, depth)
        if word == "for":
            return self.for_loop(j, end, control, depth)
        if word in ("while", "loop"):
            brace = self.find_brace(j + 1, end)
            if word == "while":
                loop = self.condition(j, j + 1, brace, control)
            else:
                loop = self.graph.node(condition=self.tokens[j])
                self.graph.edge(control, loop)
            close = self.close(brace, end)
            return close + 1, self.absorb(loop, self.body(brace, close, loop, depth))
        brace = j if word == "{" else self.find_brace(j + 1, end)
        close = self.close(brace, end)
        return close + 1, self.body(brace, close, control, depth)

    def body(self, brace: int, close: int, control: int, depth: int) -> Exits:
        if self.text(brace) != "{":
            return Exits()
        return self.statements(brace + 1, close, control, depth + 1)

    def if_chain(self, j: int, end: int, control: int, depth: int) -> tuple[int, Exits]:
        exits = Exits()
        deciding = control  # an "else if" is decided under the conditions before it
        while True:
            brace = self.find_brace(j + 1, end)
            branch = self.condition(j, j + 1, brace, deciding)
            close = self.close(brace, end)
            self.merge(exits, self.body(brace, close, branch, depth))
            j = close + 1
            if self.text(j) != "else":
                return j, exits
            if self.text(j + 1) == "if":
                j, deciding = j + 1, branch
                continue
            close = self.close(j + 1, end)
            self.merge(exits, self.body(j + 1, close, branch, depth))
            return close + 1, exits

    def switch(self, j: int, end: int, control: int, depth: int) -> tuple[int, Exits]:
        brace = self.find_brace(j + 1, end)
        selected = self.condition(j, j + 1, brace, control)
        close = self.close(brace, end)
        exits = Exits()
        k = brace + 1
        while k < close:
            self.step()
            if self.text(k) == "{":
                clause = self.close(k, close)
                self.merge(exits, self.body(k, clause, selected, depth + 1))
                k = clause + 1
            else:
                k = self.pairs.get(k, k) + 1 if self.text(k) in ("(", "[") else k + 1
        # A break leaves the switch only.
        return close + 1, Exits(returns=exits.returns, continues=exits.continues)

    def for_loop(self, j: int, end: int, control: int, depth: int) -> tuple[int, Exits]:
        if self.text(j + 1) != "(":
            return self.statement_end(j, end) + 1, Exits()
        header_end = self.close(j + 1, end)
        init, test, update = self.header_parts(j + 2, header_end)
        declared: list[str] = []
        if init[0] < init[1]:
            self.simple(init[0], init[1], control, Exits(), declared)
        loop = self.condition(j, test[0], test[1], control)
        brace = header_end + 1
        close = self.close(brace, end)
        exits = self.absorb(loop, self.body(brace, close, loop, depth))
        if update[0] < update[1]:
            self.assignment(update[0], update[1], loop)
        for name in declared:
            self.locals[name].pop()
        return close + 1, exits

    def header_parts(self, j: int, end: int) -> list[tuple[int, int]]:
        """The ranges of a for loop's initializer, condition and update."""
        parts: list[tuple[int, int]] = []
        start = j
        for k in self.top_level(j, end):
            if self.text(k) == ";" and len(parts) < 2:
                parts.append((start, k))
                start = k + 1
        parts.append((start, end))
        return [*parts, (end, end), (end, end)][:3]

    def absorb(self, loop: int, inner: Exits) -> Exits:
        """A loop takes its own breaks and continues: once some invocations leave an
        iteration, every later iteration, and the rest of this one, is non-uniform."""
        for node in (inner.breaks, inner.continues):
            if node is not None:
                self.graph.edge(node, loop)
        return Exits(returns=inner.returns)

    # -- values ------------------------------------------------------------------------

    def declaration(self, j: int, stop: int, control: int, declared: list[str]) -> None:
        k = j + 1
        if self.text(k) == "<":  # var<function>
            while k < stop and self.text(k) != ">":
                self.step()
                k += 1
            k += 1
        name = self.text(k) if k < stop and self.tokens[k].kind == IDENT else ""
        value = self.graph.node()
        self.graph.edge(control, value)
        equals = next((m for m in self.top_level(k, stop) if self.text(m) == "="), stop)
        for source, token in self.reads(equals + 1, stop, control):
            self.graph.edge(source, value, token)
        if name:
            self.locals.setdefault(name, []).append(value)
            declared.append(name)

    def assignment(self, j: int, stop: int, control: int) -> None:
        """An assignment, increment or call: the target local depends on the value, on
        the indexes written through, and on the control it happens under."""
        operator = next((m for m in self.top_level(j, stop) if self.text(m) in ASSIGNMENTS), None)
        increment = operator is None and self.text(stop - 1) in ("++", "--")
        if operator is None and not increment:
            self.reads(j, stop, control)
            return
        left_end = operator if operator is not None else stop - 1
        root = next((m for m in range(j, left_end) if self.tokens[m].kind == IDENT), None)
        target = self.local(self.text(root)) if root is not None else None
        found = self.reads((root if root is not None else j) + 1, left_end, control)
        if operator is not None:
            found += self.reads(operator + 1, stop, control)
        if target is not None:
            self.graph.edge(control, target)
            for source, token in found:
                self.graph.edge(source, target, token)

    def condition(self, keyword: int, j: int, end: int, control: int) -> int:
        """A node for the control inside a branch or loop decided by tokens[j:end]."""
        node = self.graph.node(condition=self.tokens[keyword])
        self.graph.edge(control, node)
        for source, token in self.reads(j, end, control):
            self.graph.edge(source, node, token)
        return node

    def reads(self, j: int, end: int, control: int) -> list[tuple[int, Token]]:
        """The non-uniform values that tokens[j:end] may read, and where; calls of
        anything that may need uniform control are recorded on the way."""
        found: list[tuple[int, Token]] = []
        for k in range(j, end):
            self.step()
            token = self.tokens[k]
            if token.kind != IDENT or self.text(k - 1) in (".", "&"):
                continue  # a member name, or a pointer taken (not a read)
            if self.text(k + 1) == "(":
                self.call(token, control, found)
                continue
            member = f"{token.text}.{self.text(k + 2)}" if self.text(k + 1) == "." else ""
            node = self.local(token.text)
            if node is None:
                node = self.params.get(member) or self.params.get(token.text)
            if node is None:
                node = self.globals.get(token.text)
            if node is not None:
                found.append((node, token))
        return found

    def call(self, token: Token, control: int, found: list[tuple[int, Token]]) -> None:
        name = token.text
        if name in NEEDS_UNIFORM_CONTROL or name in self.analysis.function_names:
            self.analysis.calls.append(Call(control, token, self.function.name))
        if name.startswith("atomic") and name != "atomicStore":
            note = f"return value of '{name}' may be non-uniform"
            found.append((self.graph.source(note), token))

    def local(self, name: str) -> int | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    # -- structure ---------------------------------------------------------------------

    def join(self, node: int | None, control: int) -> int:
        if node is None:
            node = self.graph.node()
        self.graph.edge(control, node)
        return node

    def merge(self, exits: Exits, inner: Exits) -> None:
        if inner.returns is not None:
            exits.returns = self.join(exits.returns, inner.returns)
        if inner.breaks is not None:
            exits.breaks = self.join(exits.breaks, inner.breaks)
        if inner.continues is not None:
            exits.continues = self.join(exits.continues, inner.continues)

    def after(self, control: int, inner: Exits) -> int:
        node = self.join(None, control)
        for exit_node in (inner.returns, inner.breaks, inner.continues):
            if exit_node is not None:
                self.graph.edge(exit_node, node)
        return node

    def top_level(self, j: int, end: int) -> Iterator[int]:
        """The indexes in [j, end) outside any bracket, each bracketed group skipped whole."""
        while j < end:
            self.step()
            yield j
            j = self.pairs[j] + 1 if j in self.pairs else j + 1

    def statement_end(self, j: int, end: int) -> int:
        return next((k for k in self.top_level(j, end) if self.text(k) == ";"), end)

    def find_brace(self, j: int, end: int) -> int:
        return next((k for k in self.top_level(j, end) if self.text(k) == "{"), end)

    def close(self, brace: int, end: int) -> int:
        return min(self.pairs.get(brace, end), end)

    def past_attribute(self, j: int) -> int:
        j += 2 if j + 1 < len(self.tokens) and self.tokens[j + 1].kind == IDENT else 1
        return self.pairs[j] + 1 if self.text(j) == "(" else j
