"""The warnings of a run, as coded items (outcome.RunWarning): made here for harness and
program runs alike, read by code everywhere else.

llvmpipe, the CPU backend, differs from a GPU in two ways that can hide a bug: it ends
every loop after 65,535 iterations, and it drops stores past the end of a buffer. Each is
a warning only where the run could meet it: a loop whose count is not known before it
runs (a loop known to run longer is refused before running: analysis.misleading_on_cpu),
and a store with no bounds check before it whose dispatch can reach past its buffer.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernels.engine.analysis import source_facts
from kernels.engine.host.trace import dispatches, module_sources
from kernels.engine.inputs import Memo, no_memo
from kernels.engine.outcome import Outcome, RunWarning, WarningCode

MAX_WARNINGS = 16

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
    workgroup count, and the 4-byte cells of the buffer bound at each (group, binding)."""

    kernel: str
    source: str
    entry_point: str  # "" for the module's only one
    workgroups: tuple[int, ...]
    cells: dict[tuple[int, int], int] = field(default_factory=dict)


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
        for loop in entry["loops"]:
            if loop["iterations"] is None:
                key = (WarningCode.LOOP_CAP, d.kernel, loop["line"])
                found.setdefault(
                    key,
                    coded(
                        WarningCode.LOOP_CAP,
                        {**where, "line": loop["line"], "condition": loop["condition"]},
                    ),
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


def program_warnings(software: bool, trace: Mapping[str, Any]) -> list[RunWarning]:
    """backend_warnings of a program's traced dispatches, each against its own module."""
    sizes = {b["name"]: b["size"] for b in trace.get("buffers", [])}
    return backend_warnings(
        software,
        (
            Dispatched(
                d.module,
                d.source,
                d.entry_point,
                tuple(d.workgroups),
                {
                    (b.group, b.binding): (b.size if b.size is not None else sizes.get(b.buffer, 0))
                    // 4
                    for b in d.bindings
                },
            )
            for d in dispatches(trace, module_sources(trace))
            if d.source
        ),
    )


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


def warnings_of(outcome: Outcome | Mapping[str, Any]) -> list[RunWarning]:
    """The outcome's warnings as coded items, those of runs stored before codes included
    (their sentences, with no data)."""
    items: list[RunWarning] = []
    for warning in outcome.get("warnings") or []:
        if isinstance(warning, str):
            code = LEGACY.get(warning, WarningCode.NOTE)
            items.append({"code": str(code), "text": warning, "data": {}})
        else:
            items.append(warning)
    return items
