"""How many values each invocation of a pass stores into the buffer it writes.

A dispatch of more or fewer invocations than its output has elements leaves the host
panel guessing which invocations write what (kernels/trace_pictures.py). The run answers
instead: it dispatches the pass once more on a copy of its kernel that counts, one
atomic<u32> per invocation in a storage buffer at a group the kernel does not use,
every assignment to the output variable its entry point makes, and keeps a histogram
{stores per invocation: invocations}.

instrument() rewrites the WGSL on the tokens of kernels/engine/wgsl.py in one pass and
gives up (None: the panel keeps its general words) on anything it cannot count for sure:
the output reached through a pointer or from another function, a name shadowed in the
entry point, an assignment in a for-loop's header, no free bind group.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kernels.engine.harness import Harness, Pass
from kernels.engine.wgsl import (
    IDENT,
    Function,
    Module,
    parse,
    resource_numbers,
    workgroup_dimensions,
)

COUNTERS = "_kb_store_counts"
GID = "_kb_gid"
MAX_GROUPS = 4  # WebGPU's default maxBindGroups
MAX_COUNTED = 1 << 20  # invocations: a 4 MiB counter buffer at most
MAX_SHOWN = 4  # histogram bars; the rest are summed as others
STATEMENT_START = frozenset((";", "{", "}"))


@dataclass(frozen=True)
class Instrumented:
    """The counting copy of a kernel: its WGSL, and the group of its counter buffer."""

    source: str
    group: int
    invocations: int
    buffer: str = ""  # the harness buffer whose stores it counts


def for_pass(harness: Harness, p: Pass, source: str) -> Instrumented | None:
    """The counting copy of a harness pass's kernel, when its dispatch runs a different
    number of invocations than the buffer it writes has 4-byte elements (what the host
    panel's note is about, kernels/trace_pictures.py); None otherwise."""
    module = parse(source)
    function = module.entry_point(p.entry_point)
    size = workgroup_dimensions(module, function) if function else None
    if size is None:
        return None
    writable = {
        resource_numbers(module, v)
        for v in module.variables
        if v.address_space == "storage" and v.access == "read_write"
    }
    written = [b for b in p.bind if (b.group, b.binding) in writable]
    if not written:
        return None
    output = written[-1]
    buffer = harness.buffer(output.buffer)
    if not buffer.shape:  # a struct
        return None
    elements = buffer.nbytes // 4
    x, y, z = (count * per for count, per in zip(p.dispatch, size, strict=True))
    if x * y * z == elements:
        return None
    counting = instrument(
        source, p.entry_point, (output.group, output.binding), (x, y, z), set(p.groups())
    )
    return counting and replace(counting, buffer=output.buffer)


def instrument(
    source: str,
    entry_point: str,
    output: tuple[int, int],
    grid: tuple[int, int, int],
    taken_groups: set[int],
) -> Instrumented | None:
    """The kernel with a counter added after each store to the variable at output
    (group, binding) in entry_point, for a dispatch of grid invocations (x, y, z); None
    when it cannot be counted for sure. taken_groups: groups the pass binds anyway."""
    invocations = math.prod(grid)
    if not 0 < invocations <= MAX_COUNTED or COUNTERS in source or GID in source:
        return None
    module = parse(source)
    function = module.entry_point(entry_point)
    written = [v for v in module.variables if resource_numbers(module, v) == output]
    if function is None or function.stage != "compute" or len(written) != 1:
        return None
    used = {
        resource_numbers(module, v)[0]
        for v in module.variables
        if v.address_space not in ("workgroup", "private")
    }
    if None in used:
        return None
    group = next((g for g in range(MAX_GROUPS) if g not in used | taken_groups), None)
    if group is None:
        return None
    gid = _gid_name(function)
    stores = _store_ends(module, function, written[0].name, gid or GID)
    if stores is None:
        return None
    index = _linear_index(gid or GID, grid)
    count = f" atomicAdd(&{COUNTERS}[{index}], 1u);"
    starts = _line_starts(source)

    def after(j: int) -> int:
        token = module.tokens[j]
        return starts[token.line - 1] + token.column - 1 + len(token.text)

    edits = [(after(end), count) for end in stores]
    if gid is None:
        gap = ", " if function.params else ""
        param = f"@builtin(global_invocation_id) {GID}: vec3<u32>{gap}"
        edits.append((after(_params_open(module, function)), param))
    out = []
    last = 0
    for at, text in sorted(edits):
        out += [source[last:at], text]
        last = at
    declaration = (
        f"\n@group({group}) @binding(0) var<storage, read_write> {COUNTERS}: array<atomic<u32>>;\n"
    )
    return Instrumented("".join([*out, source[last:], declaration]), group, invocations)


def histogram(counts: np.ndarray) -> dict[str, Any]:
    """{"stores": [[stores, invocations], ...], "others": the invocations of the counts
    not listed} from one counter per invocation: the invocations that store first, most
    invocations first, then those that store none."""
    tally = Counter(counts.tolist())
    ranked = sorted(tally.items(), key=lambda item: (item[0] == 0, -item[1], item[0]))
    return {
        "stores": [[stores, n] for stores, n in ranked[:MAX_SHOWN]],
        "others": sum(n for _, n in ranked[MAX_SHOWN:]),
    }


def words(counted: Mapping[str, Any]) -> str:
    """The histogram in words: "8 invocations store 256 values each; 504 store none"."""
    parts = []
    for i, (stores, n) in enumerate(counted["stores"]):
        who = f"{n:,} invocation{'s' if n != 1 else ''}" if i == 0 else f"{n:,}"
        verb = "stores" if n == 1 and i == 0 else "store"
        if stores == 0:
            parts.append(f"{who} {verb} none")
        else:
            each = " each" if n > 1 else ""
            parts.append(f"{who} {verb} {stores:,} value{'s' if stores != 1 else ''}{each}")
    if counted.get("others"):
        parts.append(f"{counted['others']:,} store other counts")
    return "; ".join(parts)


# -- reading the entry point -------------------------------------------------------------------


def _gid_name(function: Function) -> str | None:
    """The name the entry point already gives global_invocation_id (WGSL allows one)."""
    return next(
        (p.name for p in function.params if p.builtin == "global_invocation_id" and p.token), None
    )


def _store_ends(module: Module, function: Function, name: str, gid: str) -> list[int] | None:
    """The token index of the ";" ending each statement that assigns to name in the
    entry point; None when a store could escape the count."""
    tokens = module.tokens
    body = function.body
    inside = range(body.start - 1, body.stop + 1)
    for j, token in enumerate(tokens):
        declaration = tokens[j - 1].text in ("var", ">")
        if token.kind == IDENT and token.text == name and j not in inside and not declaration:
            return None
    ends = []
    depth = 0
    j = body.start
    while j < body.stop:
        token = tokens[j]
        if token.text in ("(", "["):
            depth += 1
        elif token.text in (")", "]"):
            depth -= 1
        elif token.text == "&" and j + 1 < body.stop and tokens[j + 1].text == name:
            # arrayLength(&y) only reads the length; any other pointer could store.
            if not (tokens[j - 1].text == "(" and tokens[j - 2].text == "arrayLength"):
                return None
        elif token.text in ("let", "var", "const") and j + 1 < body.stop:
            if tokens[j + 1].text in (name, gid, COUNTERS):
                return None
        elif token.kind == IDENT and token.text == name and tokens[j - 1].text in STATEMENT_START:
            if depth:
                return None
            end = _statement_end(tokens, j, body.stop)
            if end is None:
                return None
            ends.append(end)
        j += 1
    return ends


def _statement_end(tokens: list[Any], start: int, stop: int) -> int | None:
    depth = 0
    for j in range(start, stop):
        text = tokens[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth < 0:
                return None
        elif text == ";" and depth == 0:
            return j
    return None


def _params_open(module: Module, function: Function) -> int:
    j = module.tokens.index(function.token)
    return j + 2  # fn name (


def _linear_index(gid: str, grid: tuple[int, int, int]) -> str:
    x, y, _ = grid
    return f"{gid}.x + {x}u * ({gid}.y + {y}u * {gid}.z)"


def _line_starts(source: str) -> list[int]:
    """Where each line begins (only "\\n" starts one, as in the tokenizer)."""
    starts = [0]
    at = source.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = source.find("\n", at + 1)
    return starts
