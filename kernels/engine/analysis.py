"""What a reviewer needs to know about a kernel's source, read in the replay worker.

The offline reviewer explains a run from its outcome alone: how many invocations a
workgroup has, which builtins index the work, where each output is written and which
loops there are. Reading that from the source costs time that grows with the source,
and the source is untrusted, so it is read here, in the worker under the job's deadline,
and travels in the outcome ("analysis"); the web process never parses a kernel.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from kernels.engine.harness import Harness, Pass
from kernels.engine.inputs import Memo, no_memo
from kernels.engine.outcome import BindingFacts, EntryPointFacts, SourceFacts
from kernels.engine.webgpu import workgroup_storage
from kernels.engine.wgsl import (
    IDENT,
    NUMBER,
    Function,
    Module,
    Token,
    Variable,
    bracket_pairs,
    parse,
    resource_numbers,
    tokenize,
    type_text,
    workgroup_dimensions,
)

# The outcome is stored with every run: a hostile source must not make it large.
MAX_ITEMS = 16
MAX_TEXT = 120
LLVMPIPE_LOOP_CAP = 65535
# What orders one invocation's write to workgroup memory before another's read.
WORKGROUP_BARRIERS = frozenset(("workgroupBarrier", "workgroupUniformLoad"))
# What can keep an invocation from a store, or its index within the buffer.
GUARDS = frozenset(("if", "return", "select", "min", "clamp", "switch", "for", "while", "loop"))
# Words followed by "(" that are not calls.
KEYWORDS = frozenset(("if", "for", "while", "switch", "return", "loop", "else"))
ASSIGNMENTS = frozenset(("=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "++", "--"))


def analyse(sources: Mapping[str, str], memo: Memo = no_memo) -> dict[str, SourceFacts]:
    """The facts about each source, by kernel name ("self" is the kernel replayed); a
    worker's memo keeps each source's (a version replayed again parses nothing)."""
    return {
        name: memo(
            ("source facts", hashlib.sha256(source.encode()).digest()),
            functools.partial(source_facts, source),
        )
        for name, source in list(sources.items())[:MAX_ITEMS]
    }


def source_facts(source: str) -> SourceFacts:
    module = parse(source)
    lines = source.split("\n")
    pairs = bracket_pairs(module.tokens)
    written = {
        v.name
        for v in module.variables
        if v.address_space == "storage" and v.access == "read_write"
    }
    entry_points = [f for f in module.functions if f.stage and f.name][:MAX_ITEMS]
    return {
        "entry_points": [_entry_point(module, f, lines, pairs, written) for f in entry_points],
        "bindings": [_binding(module, v) for v in module.variables if v.attributes][:MAX_ITEMS],
    }


def _entry_point(
    module: Module, function: Function, lines: list[str], pairs: dict[int, int], written: set[str]
) -> EntryPointFacts:
    builtins = {p.name: p.builtin for p in function.params if p.builtin}
    for param in function.params:
        members = module.structs.get(param.type[0].text, []) if len(param.type) == 1 else []
        builtins.update({f"{param.name}.{m.name}": m.builtin for m in members if m.builtin})
    return {
        "name": function.name,
        "stage": function.stage,
        "line": function.token.line,
        "workgroup_size": workgroup_dimensions(module, function),
        "workgroup_storage": workgroup_storage(module, function.name),
        "builtins": dict(list(builtins.items())[:MAX_ITEMS]),
        "writes": _writes(module, function, lines, pairs, written),
        "loops": [
            loop
            for f in (function, *_helpers(module, function))
            for loop in _loops(module, f, lines, pairs)
        ][:MAX_ITEMS],
        "shared": _shared(module, function, lines, pairs),
        "calls": _calls(module, function),
    }


def _helpers(module: Module, function: Function) -> list[Function]:
    """The functions the entry point calls, and those they call, each once: their loops
    run as its own do."""
    functions = {f.name: f for f in module.functions if not f.stage and f.name}
    found: dict[str, Function] = {}
    todo = [function]
    while todo and len(found) < MAX_ITEMS:
        for name in _calls(module, todo.pop()):
            if name in functions and name not in found:
                found[name] = functions[name]
                todo.append(functions[name])
    return list(found.values())


def _calls(module: Module, function: Function) -> list[str]:
    """The functions the body calls, by name, each once: arrayLength, workgroupBarrier…"""
    tokens = module.tokens
    found: dict[str, None] = {}
    for j in function.body:
        module.steps += 1
        text = tokens[j].text
        if tokens[j].kind == IDENT and _text(tokens, j + 1) == "(" and text not in KEYWORDS:
            found[text] = None
            if len(found) == 2 * MAX_ITEMS:
                break
    return list(found)


def _shared(
    module: Module, function: Function, lines: list[str], pairs: dict[int, int]
) -> dict[str, object]:
    """How the entry point uses var<workgroup> memory: each access to it (variable,
    index as written, line, "write" or "read"; `+=` is both), the lines of the workgroup
    barriers in its body, and how many barriers the rest of the module holds (a helper
    the entry point calls may hold them: then no line tells where they run)."""
    tokens = module.tokens
    names = {v.name for v in module.variables if v.address_space == "workgroup"}
    accesses: list[dict[str, object]] = []
    inside = set(function.body)
    barriers = [j for j, t in enumerate(tokens) if t.kind == IDENT and t.text in WORKGROUP_BARRIERS]
    module.steps += len(tokens)
    own = [tokens[j].line for j in barriers if j in inside]
    facts: dict[str, object] = {
        "accesses": accesses,
        "barriers": own[: 4 * MAX_ITEMS],
        # Barriers not listed: in other functions, or past the list's end.
        "barriers_elsewhere": len(barriers) - len(own[: 4 * MAX_ITEMS]),
    }
    if not names:
        return facts
    for j in function.body:
        module.steps += 1
        token = tokens[j]
        if token.kind != IDENT or token.text not in names or _text(tokens, j - 1) == ".":
            continue
        index = ""
        after = j + 1
        if _text(tokens, after) == "[" and after in pairs:
            close = pairs[after]
            index = _excerpt(lines, tokens[after + 1 : min(close, after + 1 + MAX_TEXT)])
            after = close + 1
        operator = _text(tokens, after)
        kinds = ["write"] if operator == "=" else []
        if operator in ASSIGNMENTS and operator != "=":
            kinds = ["read", "write"]
        for kind in kinds or ["read"]:
            accesses.append(
                {"variable": token.text, "index": index, "line": token.line, "kind": kind}
            )
        if len(accesses) >= 2 * MAX_ITEMS:
            break
    facts["accesses"] = accesses[: 2 * MAX_ITEMS]
    return facts


def _writes(
    module: Module, function: Function, lines: list[str], pairs: dict[int, int], written: set[str]
) -> list[dict[str, object]]:
    """Where the body stores into read_write buffers: `out[i] = …` gives out and i, and
    whether anything that could keep an invocation from the store or its index in range
    (an if, a return, a loop, select, min, clamp) comes before it ("guarded")."""
    tokens = module.tokens
    found: list[dict[str, object]] = []
    guarded = False
    for j in function.body:
        module.steps += 1
        token = tokens[j]
        guarded = guarded or (token.kind == IDENT and token.text in GUARDS)
        if token.kind != IDENT or token.text not in written or _text(tokens, j + 1) != "[":
            continue
        close = pairs[j + 1]
        after = close + 1
        while _text(tokens, after) in (".", "[") and after < function.body.stop:
            module.steps += 1
            after = pairs[after] + 1 if tokens[after].text == "[" else after + 2
        if _text(tokens, after) in ASSIGNMENTS:
            index = _excerpt(lines, tokens[j + 2 : min(close, j + 2 + MAX_TEXT)])
            found.append(
                {"buffer": token.text, "index": index, "line": token.line, "guarded": guarded}
            )
            if len(found) == MAX_ITEMS:
                break
    return found


def _loops(
    module: Module, function: Function, lines: list[str], pairs: dict[int, int]
) -> list[dict[str, object]]:
    """Each loop of the body with its condition as written ("" for loop {})."""
    tokens = module.tokens
    found: list[dict[str, object]] = []
    lets = _lets(module, function)
    for j in function.body:
        module.steps += 1
        token = tokens[j]
        if token.kind != IDENT or token.text not in ("for", "while", "loop"):
            continue
        condition: list[Token] = []
        count = None
        halves = False
        if token.text == "for" and _text(tokens, j + 1) == "(":
            header = tokens[j + 2 : pairs[j + 1]]
            semicolons = [k for k, t in enumerate(header) if t.text == ";"][:2]
            if len(semicolons) == 2:
                condition = header[semicolons[0] + 1 : semicolons[1]]
                count = _count(header[: semicolons[0]], condition, header[semicolons[1] + 1 :])
                halves = _halves(module, condition, header[semicolons[1] + 1 :])
        elif token.text == "while":
            k = j + 1
            while k < function.body.stop and tokens[k].text != "{" and len(condition) < 64:
                condition.append(tokens[k])
                k += 1
        loop: dict[str, object] = {
            "kind": token.text,
            "line": token.line,
            "condition": _excerpt(lines, condition),
            "iterations": iterations(module, count) if count else None,
        }
        if halves:
            # Whatever it starts from, a 64-bit counter halved reaches 0 within 64 steps.
            loop["at_most"] = 64
        elif count and loop["iterations"] is None:
            # Its count, as written, for the run to work out from what it bound.
            texts = {part: _spelled(count[part], lets, j) for part in PARTS}
            if all(0 < len(text) < MAX_TEXT for text in texts.values()):
                loop["count"] = {**texts, "inclusive": count["inclusive"]}
        found.append(loop)
        if len(found) == MAX_ITEMS:
            break
    return found


COUNTS_UP = {"<": 0, "<=": 1, "!=": 0}
PARTS = ("first", "bound", "step")


def _count(
    start: list[Token], condition: list[Token], update: list[Token]
) -> dict[str, Any] | None:
    """`for (var i = first; i < bound; i += step)`: the three expressions as tokens, and
    inclusive (1 for <=); None for a for loop that does not count up by a step."""
    texts = [t.text for t in condition[:3]]
    # The tokenizer reads `<=` as two punctuation tokens.
    split = texts[1:3] == ["<", "="]
    operator = "<=" if split else "".join(texts[1:2])
    bound = condition[3 if split else 2 :]
    if not bound or condition[0].kind != IDENT or operator not in COUNTS_UP:
        return None
    counter = condition[0].text
    texts = [t.text for t in start]
    step = _step(counter, update)
    if counter not in texts or "=" not in texts or not step:
        return None
    first = start[texts.index("=") + 1 :]
    return {"first": first, "bound": bound, "step": step, "inclusive": COUNTS_UP[operator]}


def iterations(
    module: Module, count: Mapping[str, Any], names: Callable[[str], int | None] | None = None
) -> int | None:
    """How many times the loop runs when first, bound and step are constant (literals,
    module-scope constants), else None. count's parts are tokens, or text as the facts
    carry them. With names (what a run bound: a uniform's fields as it wrote them), the
    most it can run: a first not known (an invocation's id) is taken as 0."""
    first, bound, step = (module.value(_tokens(count[part]), names=names) for part in PARTS)
    if first is None and names is not None:
        first = 0
    if first is None or bound is None or not step or step < 0:
        return None
    return max(0, (bound + int(count["inclusive"]) - first + step - 1) // step)


def _lets(module: Module, function: Function) -> dict[str, tuple[int, str]]:
    """The body's `let name = expression;` by name: where it is declared and its
    expression's text, the lets declared before it spelled out. A name declared twice (in
    two scopes) is left out, as its value depends on where it is read."""
    tokens = module.tokens
    found: dict[str, tuple[int, str]] = {}
    twice: set[str] = set()
    for j in function.body:
        module.steps += 1
        if tokens[j].text != "let" or tokens[j].kind != IDENT:
            continue
        name = _text(tokens, j + 1)
        k = j + 2
        while k < function.body.stop and tokens[k].text not in ("=", ";") and k < j + 8:
            k += 1
        end = k + 1
        while end < function.body.stop and tokens[end].text != ";" and end < k + 32:
            end += 1
        if _text(tokens, k) != "=" or _text(tokens, end) != ";":
            continue
        if name in found:
            twice.add(name)
        found[name] = (j, _spelled(tokens[k + 1 : end], found, j))
    return {name: let for name, let in found.items() if name not in twice}


def _spelled(part: list[Token], lets: Mapping[str, tuple[int, str]], before: int) -> str:
    """The expression's text with each let declared before it spelled out (their texts
    already spell out theirs); cut past MAX_TEXT, which no count is kept at."""
    words: list[str] = []
    size = 0
    for k, token in enumerate(part[:MAX_TEXT]):
        let = lets.get(token.text) if token.kind == IDENT else None
        if let is None or let[0] > before or (k and part[k - 1].text == "."):
            words.append(token.text)
        else:
            words.append(f"( {let[1]} )")
        size += len(words[-1]) + 1
        if size > MAX_TEXT:
            break
    return " ".join(words)[:MAX_TEXT]


def _halves(module: Module, condition: list[Token], update: list[Token]) -> bool:
    """Whether a for loop runs while its counter is above 0 and divides it by a constant
    of 2 or more each time: `s > 0u; s /= 2u`, `s > 0u; s = s >> 1u`."""
    texts = [t.text for t in condition]
    if len(texts) < 3 or texts[1] != ">" or module.value(condition[2:]) != 0:
        return False
    counter = texts[0]
    texts = [t.text for t in update]
    if texts[:2] == [counter, "/="]:
        return (module.value(update[2:]) or 0) >= 2
    if texts[:4] == [counter, "=", counter, "/"]:
        return (module.value(update[4:]) or 0) >= 2
    if texts[:4] == [counter, ">", ">", "="]:
        return (module.value(update[4:]) or 0) >= 1
    if texts[:5] == [counter, "=", counter, ">", ">"]:
        return (module.value(update[5:]) or 0) >= 1
    return False


def _tokens(part: list[Token] | str) -> list[Token]:
    return tokenize(part).tokens if isinstance(part, str) else part


def _step(counter: str, update: list[Token]) -> list[Token]:
    """What a for loop's update adds to its counter: i++, i += s, i = i + s."""
    texts = [t.text for t in update]
    if texts in ([counter, "++"], ["++", counter]):
        return [Token(NUMBER, "1", 0, 0)]
    if texts[:2] == [counter, "+="]:
        return update[2:]
    if texts[:4] == [counter, "=", counter, "+"]:
        return update[4:]
    return []


def long_loops(source: str, limit: int) -> list[dict[str, object]]:
    """The loops of the source's entry points known to run more than limit times."""
    return [
        loop
        for entry in source_facts(source)["entry_points"]
        for loop in entry["loops"]
        if (loop["iterations"] or 0) > limit
    ]


def misleading_on_cpu(harness: Harness, sources: Mapping[str, str]) -> str:
    """Why a run on llvmpipe would pass where a GPU would not, or "": a loop it cuts short
    (it ends every loop after LLVMPIPE_LOOP_CAP iterations), or invocations past the end
    of a buffer storing into it with nothing to stop them (it drops such writes)."""
    for name in sorted(harness.kernel_names()):
        for loop in long_loops(sources[name], LLVMPIPE_LOOP_CAP):
            return cut_loop_message(loop, LLVMPIPE_LOOP_CAP)
    for p in harness.passes:
        if found := _overrun(harness, p, sources[p.kernel]):
            return found
    return ""


def _overrun(harness: Harness, p: Pass, source: str) -> str:
    """A store at `buffer[id.x]` (id the global invocation id) in an entry point without
    any if, select, min or return, dispatched over more invocations along x than the
    buffer has cells: the extra invocations store past its end."""
    module = parse(source)
    function = module.entry_point(p.entry_point)
    if function is None:
        return ""
    body = [module.tokens[j].text for j in function.body]
    if any(word in body for word in ("if", "select", "min", "return", "switch", "for", "while")):
        return ""
    facts = source_facts(source)
    entry = next((e for e in facts["entry_points"] if e["name"] == function.name), None)
    if entry is None:
        return ""
    size = entry.get("workgroup_size") or []
    ids = [n for n, b in entry.get("builtins", {}).items() if b == "global_invocation_id"]
    if not size or not ids:
        return ""
    invocations = p.dispatch[0] * size[0]
    bound = {(b["group"], b["binding"]): b["name"] for b in facts["bindings"]}
    for binding in p.bind:
        buffer = harness.buffer(binding.buffer)
        variable = bound.get((binding.group, binding.binding))
        cells = math.prod(buffer.shape) if buffer.shape else 0
        for write in entry["writes"]:
            plain = write["index"] in (f"{ids[0]}.x", ids[0])
            if write["buffer"] == variable and plain and 0 < cells < invocations:
                return (
                    f"Not run: {invocations:,} invocations run along x ({p.dispatch[0]} "
                    f"workgroups × {size[0]}) for {cells:,} cells of `{variable}`, and nothing "
                    f"in {function.name} stops the last {invocations - cells:,} before they "
                    f"store into {variable}[{write['index']}] (line {write['line']}). This "
                    "server's CPU backend (llvmpipe) drops writes past the end of a buffer, "
                    "so the run would pass here; a GPU may write them elsewhere."
                )
    return ""


def cut_loop_message(loop: dict[str, object], cap: int) -> str:
    return (
        f"Not run: the loop on line {loop['line']} ({loop['condition']}) runs "
        f"{loop['iterations']:,} times per invocation. This server's CPU backend (llvmpipe) "
        f"stops every loop after {cap:,} iterations, so its result would not be what a GPU "
        "computes; on a GPU a loop this long takes seconds per invocation or trips the "
        "driver's watchdog."
    )


def _binding(module: Module, variable: Variable) -> BindingFacts:
    group, binding = resource_numbers(module, variable)
    return {
        "group": group,
        "binding": binding,
        "name": variable.name,
        "address_space": variable.address_space,
        "access": variable.access,
        "type": type_text(variable.type[:MAX_TEXT])[:MAX_TEXT],
    }


def _excerpt(lines: list[str], tokens: list[Token]) -> str:
    """The source text the tokens span, on one line, cut to MAX_TEXT characters."""
    if not tokens:
        return ""
    first, last = tokens[0], tokens[-1]
    if first.line == last.line and first.line <= len(lines):
        text = lines[first.line - 1][first.column - 1 : last.column - 1 + len(last.text)]
    else:
        text = " ".join(t.text for t in tokens[:MAX_TEXT])
    return text[:MAX_TEXT]


def _text(tokens: list[Token], j: int) -> str:
    return tokens[j].text if j < len(tokens) else ""


def used_bindings(source: str, entry_point: str) -> set[tuple[int, int]] | None:
    """The (group, binding) of each resource the entry point uses, itself or through the
    functions it calls: what a pipeline's "auto" layout holds. None where the module or the
    entry point cannot be read (then every binding is bound and WebGPU says what is wrong)."""
    module = parse(source)
    function = module.entry_point(entry_point)
    if function is None:
        return None
    helpers = _helpers(module, function)
    if len(helpers) >= MAX_ITEMS:
        return None  # more than _helpers follows: some may be missed
    tokens = module.tokens
    named = {
        tokens[j].text for f in (function, *helpers) for j in f.body if tokens[j].kind == IDENT
    }
    used = set()
    for variable in module.variables:
        group, binding = resource_numbers(module, variable)
        if variable.name in named and group is not None and binding is not None:
            used.add((group, binding))
    return used
