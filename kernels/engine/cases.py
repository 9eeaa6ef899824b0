"""Cases: named sets of inputs that one harness runs through the same passes.

Ten test digits, three drawings: each case refills some buffers (the same fills as a
buffer's own: kernels/engine/fills.py), runs, and is checked on its own; the outcome
lists each case's verdict and takes the worst as its own (kernels/engine/run.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernels.engine.fields import MISSING, HarnessError, as_object, buffer_name, describe, join
from kernels.engine.fills import FILLS, parse_fill

if TYPE_CHECKING:
    from kernels.engine.harness import Buffer

MAX_CASES = 64
CASE_FIELDS = ("description", "buffers")
# Kernel and case names: what a URL or a file name can hold as it is.
KERNEL_NAME = re.compile(r"[A-Za-z0-9_-]{1,60}")
DIGITS = re.compile(r"(\d+)")


def name_order(name: object) -> list[int | str]:
    """Cases run and show in the order of their names, numbers by value (digit-2 before
    digit-10): a harness is stored as JSON, and PostgreSQL's jsonb keeps no key order."""
    return [int(part) if part.isdigit() else part for part in DIGITS.split(str(name))]


@dataclass(frozen=True)
class Case:
    """A named set of inputs run through the same passes, checked on its own."""

    name: str
    buffers: tuple[Buffer, ...]  # the buffers this case refills
    description: str = ""


def parse_cases(
    value: object, by_name: Mapping[str, Buffer], fixtures_dir: Path | None
) -> tuple[Case, ...]:
    if not isinstance(value, Mapping) or not value:
        raise HarnessError("cases", f"must be an object of named cases (got {describe(value)})")
    if len(value) > MAX_CASES:
        raise HarnessError("cases", f"must hold at most {MAX_CASES} cases (got {len(value)})")
    cases = []
    for name, case in sorted(value.items(), key=lambda item: name_order(item[0])):
        path = join("cases", str(name))
        if not isinstance(name, str) or not KERNEL_NAME.fullmatch(name):
            raise HarnessError(path, "case names are letters, digits, - and _ (up to 60)")
        spec = as_object(case, path, CASE_FIELDS)
        description = spec.get("description", "")
        if not isinstance(description, str):
            raise HarnessError(join(path, "description"), "must be a string")
        buffers = spec.get("buffers", MISSING)
        if not isinstance(buffers, Mapping) or not buffers:
            raise HarnessError(join(path, "buffers"), "must name the buffers this case refills")
        refilled = tuple(
            _refill(key, fill, join(join(path, "buffers"), str(key)), by_name, fixtures_dir)
            for key, fill in buffers.items()
        )
        cases.append(Case(name=name, buffers=refilled, description=description))
    return tuple(cases)


def _refill(
    name: object, value: object, path: str, by_name: Mapping[str, Buffer], fixtures_dir: Path | None
) -> Buffer:
    """A case's new fill for one buffer: the same kinds of fill as the buffer's own."""
    base = by_name[buffer_name(name, path, by_name)]
    spec = as_object(value, path, FILLS)
    if (base.fill == "fields") != ("fields" in spec):
        want = "fields" if base.fill == "fields" else "data, zeros, random or file"
        raise HarnessError(path, f"buffer {base.name} is refilled with {want}")
    fill = parse_fill(spec, path, base.dtype, base.count, fixtures_dir)
    if not fill:
        raise HarnessError(path, f"give one fill: {', '.join(FILLS)}")
    return base.refilled(fill)
