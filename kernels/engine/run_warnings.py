"""The warnings of a run, as coded items (outcome.RunWarning): made here for harness and
program runs alike, read by code everywhere else.

llvmpipe, the CPU backend, differs from a GPU in two ways that can hide a bug: it ends
every loop after 65,535 iterations, and it drops stores past the end of a buffer. Each is
a warning only where the run could meet it: a loop that can reach the cap (a loop known
to run longer is refused before running: analysis.misleading_on_cpu), and a store with no
bounds check before it whose dispatch can reach past its buffer. A loop bounded by a
uniform's field, or by arrayLength, is counted from what the run bound: the field's value
as the harness or the program wrote it, the buffer's size; one bounded by anything else
(a value read from storage, a loop counting down) is warned of.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.engine.analysis import LLVMPIPE_LOOP_CAP, iterations, source_facts
from kernels.engine.host.trace import NP_VIEWS, dispatches, module_sources
from kernels.engine.inputs import Memo, no_memo
from kernels.engine.layout import runtime_stride, scalar_at
from kernels.engine.outcome import Outcome, RunWarning, WarningCode
from kernels.engine.wgsl import Module, Variable, parse, resource_numbers

MAX_WARNINGS = 16
# The contents of a program's uniforms a dispatch is read against, at most: more and its
# loops are warned of as if their bounds were not known.
MAX_CONTENTS = 8
# WebGPU's maxUniformBufferBindingSize: a larger buffer is not read as a uniform here.
MAX_UNIFORM_BYTES = 64 * 1024

# The sentences outcomes carried before warnings had codes, read back as their codes.
LEGACY = {
    "Out-of-bounds writes are silently dropped on this backend (llvmpipe), so a missing "
    "bounds check does not show here.": WarningCode.DROPPED_WRITES,
    "llvmpipe stops any loop after 65,535 iterations per invocation, so a mismatch in a "
    "long loop may not happen on a real GPU.": WarningCode.LOOP_CAP,
}


@dataclass
class Dispatched:
    """One entry point a run dispatched: its kernel (or shader module) and source, the
    workgroup count, and the 4-byte cells of the buffer bound at each (group, binding)
    (a dispatch whose uniforms held several contents is one Dispatched for each)."""

    kernel: str
    source: str
    entry_point: str  # "" for the module's only one
    workgroups: tuple[int, ...]
    cells: dict[tuple[int, int], int] = field(default_factory=dict)
    # The bytes of the uniform buffer bound at (group, binding), as the run wrote them;
    # absent where they are not known.
    uniforms: dict[tuple[int, int], bytes] = field(default_factory=dict)


def backend_warnings(
    software: bool, dispatched: Iterable[Dispatched], memo: Memo = no_memo
) -> list[RunWarning]:
    """What llvmpipe could hide in these dispatches; nothing on a GPU. memo keeps each
    source's facts (a worker's: the same kernel run again is not read again)."""
    if not software:
        return []
    found: dict[tuple[Any, ...], RunWarning] = {}
    for d in dispatched:
        digest = hashlib.sha256(d.source.encode()).hexdigest()
        facts = memo(("facts", digest), functools.partial(source_facts, d.source))
        entries = facts["entry_points"]
        entry = next((e for e in entries if e["name"] == d.entry_point or not d.entry_point), None)
        if entry is None:
            continue
        where = {"kernel": d.kernel, "entry_point": entry["name"]}
        names = _names(d)
        for loop in entry["loops"]:
            key = (WarningCode.LOOP_CAP, d.kernel, loop["line"])
            if loop["iterations"] is not None or key in found:
                continue
            most = _most(loop, d, names)
            if most is None or most >= LLVMPIPE_LOOP_CAP:
                counted = {} if most is None else {"iterations": most}
                found[key] = coded(
                    WarningCode.LOOP_CAP,
                    {**where, "line": loop["line"], "condition": loop["condition"], **counted},
                )
        ids = [n for n, b in entry["builtins"].items() if b == "global_invocation_id"]
        size = entry["workgroup_size"]
        bound = {b["name"]: (b["group"], b["binding"]) for b in facts["bindings"]}
        for write in entry["writes"]:
            cells = d.cells.get(bound.get(str(write["buffer"]), (-1, -1)))
            if write["guarded"] or _covered(write, ids, size, d.workgroups, cells):
                continue
            key = (WarningCode.DROPPED_WRITES, d.kernel, write["line"])
            found.setdefault(
                key,
                coded(
                    WarningCode.DROPPED_WRITES,
                    {
                        **where,
                        "line": write["line"],
                        "buffer": write["buffer"],
                        "index": write["index"],
                    },
                ),
            )
    return list(found.values())[:MAX_WARNINGS]


def _most(loop: Mapping[str, Any], d: Dispatched, names: Callable[[str], int | None]) -> int | None:
    """The most times the loop can run in this dispatch; None where that is not known."""
    if "at_most" in loop:
        return int(loop["at_most"])
    count = loop.get("count")
    return iterations(parse(d.source), count, names) if count else None


def _names(d: Dispatched) -> Callable[[str], int | None]:
    """The values a loop's count may name in this dispatch: `p.n` (a field of a uniform,
    from its bytes) and `arrayLength(&buf)` (from the size of the buffer bound)."""
    module = parse(d.source)
    variables = {v.name: v for v in module.variables}

    @functools.cache
    def value(text: str) -> int | None:
        if text.startswith("arrayLength(&"):
            variable = variables.get(text[len("arrayLength(&") : -1])
            if variable is None or variable.address_space != "storage":
                return None
            cells = d.cells.get(_numbers(module, variable))
            stride = runtime_stride(d.source, variable.type)
            return cells * 4 // stride if cells and stride else None
        head, *path = text.split(".")
        variable = variables.get(head)
        if variable is None or variable.address_space != "uniform":
            return None
        data = d.uniforms.get(_numbers(module, variable))
        where = scalar_at(d.source, variable.type, path)
        if data is None or where is None or where[0] not in ("u32", "i32"):
            return None
        scalar, offset = where
        if offset + 4 > len(data):
            return None
        return int(np.frombuffer(data, "<u4" if scalar == "u32" else "<i4", 1, offset)[0])

    return value


def _numbers(module: Module, variable: Variable) -> tuple[int, int]:
    group, binding = resource_numbers(module, variable)
    return (-1, -1) if group is None or binding is None else (group, binding)


def program_warnings(
    software: bool, trace: Mapping[str, Any], memo: Memo = no_memo
) -> list[RunWarning]:
    """backend_warnings of a program's traced dispatches, each against its own module, and
    each once for every content its uniforms held (up to MAX_CONTENTS)."""
    sizes = {b["name"]: b["size"] for b in trace.get("buffers", [])}
    contents = _uniform_contents(trace)
    found: list[Dispatched] = []
    for d in dispatches(trace, module_sources(trace)):
        if not d.source:
            continue
        cells = {
            (b.group, b.binding): (b.size if b.size is not None else sizes.get(b.buffer, 0)) // 4
            for b in d.bindings
        }
        held = {
            (b.group, b.binding): [
                c[b.offset : b.offset + 4 * cells[b.group, b.binding]]
                for c in contents.get(b.buffer, [])
            ]
            for b in d.bindings
            if b.buffer in contents
        }
        choices = list(itertools.product(*held.values()))
        if len(choices) > MAX_CONTENTS:
            # Too many to try each: the uniforms are not known.
            held, choices = {}, [()]
        found += [
            Dispatched(
                d.module,
                d.source,
                d.entry_point,
                tuple(d.workgroups),
                cells,
                dict(zip(held, choice, strict=True)),
            )
            for choice in dict.fromkeys(choices)
        ]
    return backend_warnings(software, found, memo)


def _uniform_contents(trace: Mapping[str, Any]) -> dict[str, list[bytes]]:
    """What each buffer a program could only write from the host held after each of its
    writes: known where every write to it is traced whole and nothing copies into it (a
    buffer a shader may write, one a copy fills, or one whose writes were cut is not)."""
    if trace.get("dropped", {}).get("writes"):
        return {}
    copied = {c["destination"] for c in trace.get("copies", [])}
    held: dict[str, bytearray] = {
        b["name"]: bytearray(b["size"])
        for b in trace.get("buffers", [])
        if "STORAGE" not in b["usage"]
        and b["name"] not in copied
        and b["size"] <= MAX_UNIFORM_BYTES
    }
    found: dict[str, list[bytes]] = {}
    for write in trace.get("writes", []):
        name = write["buffer"]
        if name not in held:
            continue
        try:
            view = NP_VIEWS.get(write["dtype"], np.uint8)
            data = np.array(write["values"], dtype=view).tobytes()
        except (ValueError, OverflowError):
            data = b""
        start = write["offset"]
        if len(data) < write["size"] or start + len(data) > len(held[name]):
            del held[name]
            found.pop(name, None)
            continue
        held[name][start : start + len(data)] = data
        found.setdefault(name, []).append(bytes(held[name]))
    return {name: list(dict.fromkeys(found.get(name) or [bytes(held[name])])) for name in held}


def _covered(
    write: Mapping[str, Any],
    ids: list[str],
    size: list[int] | None,
    workgroups: tuple[int, ...],
    cells: int | None,
) -> bool:
    """A store at `buffer[id.x]` whose invocations along x do not outnumber the cells of
    the buffer bound there cannot pass its end."""
    if not ids or not size or not cells or write["index"] not in (f"{ids[0]}.x", ids[0]):
        return False
    return workgroups[0] * size[0] <= cells


def unused_binding(number: int, kernel: str, group: int, binding: int, buffer: str) -> RunWarning:
    """Pass number (1-based) binds buffer at a binding its kernel does not use."""
    return coded(
        WarningCode.UNUSED_BINDING,
        {"pass": number, "kernel": kernel, "group": group, "binding": binding, "buffer": buffer},
    )


def coded(code: WarningCode, data: dict[str, Any]) -> RunWarning:
    return {"code": str(code), "text": _text(code, data), "data": data}


def _text(code: WarningCode, data: Mapping[str, Any]) -> str:
    if code == WarningCode.UNUSED_BINDING:
        return (
            f"Pass {data['pass']} ({data['kernel']}), group {data['group']}: the harness "
            f"binds @binding({data['binding']}) to buffer "
            f"{data['buffer']}, but the kernel does not use that binding, so it was left out."
        )
    kernel = data.get("kernel", "")
    line = f"line {data['line']}" if data.get("line") else "a line"
    of = "" if kernel in ("self", "") else f" of {kernel}"
    if code == WarningCode.LOOP_CAP and data.get("iterations"):
        return (
            f"llvmpipe, the CPU backend this ran on, stops any loop after 65,535 iterations "
            f"per invocation, and the loop on {line}{of} ({data['condition']}) can run "
            f"{data['iterations']:,} times as this run set it up: a wrong result there may "
            "not happen on a GPU."
        )
    if code == WarningCode.LOOP_CAP:
        return (
            f"llvmpipe, the CPU backend this ran on, stops any loop after 65,535 iterations "
            f"per invocation, and how often the loop on {line}{of} ({data['condition']}) "
            "runs is known only as it runs: a wrong result there may not happen on a GPU."
        )
    return (
        f"llvmpipe, the CPU backend this ran on, drops stores past the end of a buffer, and "
        f"nothing checks the index of {data['buffer']}[{data['index']}] on {line}{of} before "
        "it: a store out of bounds does not show here."
    )


def as_stored(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The outcome as a run stores it and replay.json serves it: warnings as the sentences
    replay.json has always carried, the coded items under warning_items."""
    items = warnings_of(outcome)
    return {**outcome, "warnings": [w["text"] for w in items], "warning_items": items}


def warnings_of(outcome: Outcome | Mapping[str, Any]) -> list[RunWarning]:
    """The outcome's warnings as coded items: its warning_items, else its warnings (those
    of runs stored before codes are sentences, read with no data)."""
    if "warning_items" in outcome:
        return list(outcome["warning_items"])
    items: list[RunWarning] = []
    for warning in outcome.get("warnings") or []:
        if isinstance(warning, str):
            code = LEGACY.get(warning, WarningCode.NOTE)
            items.append({"code": str(code), "text": warning, "data": {}})
        else:
            items.append(warning)
    return items
