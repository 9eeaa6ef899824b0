"""The harness: a declarative JSON spec of how to run a kernel.

Learners, lesson plans and curators write it, so every problem is reported with the
path of the field at fault (kernels/engine/fields.py reads the JSON values), and nothing
in it is ever evaluated as code.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import inspect
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels.engine.cases import KERNEL_NAME, Case, parse_cases
from kernels.engine.fields import (
    IDENTIFIER,
    MISSING,
    HarnessError,
    Missing,
    as_list,
    as_object,
    buffer_name,
    choice,
    describe,
    identifier,
    is_int,
    is_number,
    join,
)
from kernels.engine.fills import FILLS, FileSlice, RandomFill, parse_fill, resolve_fixture
from kernels.engine.references import REFERENCES

__all__ = [
    "Binding",
    "Buffer",
    "Case",
    "FileSlice",
    "Harness",
    "HarnessError",
    "Pass",
    "RandomFill",
    "Reference",
    "Report",
    "Tolerance",
    "canonical_digest",
    "parse_harness",
    "resolve_fixture",
]

DTYPES = ("f32", "u32", "i32")
USAGES = ("uniform", "read", "read_write")
MAX_BUFFERS = 32
# WebGPU's default maxBindGroups and maxBindingsPerBindGroup: a harness within them
# runs in a browser too.
MAX_GROUPS = 4
MAX_BINDING = 999

BIND_KEY = re.compile(r"(?:(\d{1,3})\.)?(\d{1,4})")

HARNESS_FIELDS = (
    "description",
    "entry_point",
    "buffers",
    "passes",
    "reference",
    "tolerance",
    "report",
    "cases",
)
BUFFER_FIELDS = ("usage", "dtype", "shape", "output", "struct", *FILLS)
PASS_FIELDS = ("kernel", "entry_point", "bind", "dispatch")
REFERENCE_FIELDS = ("name", "args", "outputs")
TOLERANCE_FIELDS = ("atol", "rtol")
REPORT_FIELDS = ("kind", "probabilities", "labels", "show")
REPORT_KINDS = ("classification",)


@dataclass(frozen=True)
class Buffer:
    name: str
    usage: str
    dtype: str
    # () for a struct buffer: its size comes from the WGSL (kernels/engine/layout.py).
    shape: tuple[int, ...]
    # "data", "zeros", "random", "file", "fields" (a struct), or "fresh" (a read_write
    # buffer without a fill: zeroed, as WebGPU creates it; a diagnostic run fills it with
    # the never-written sentinel instead).
    fill: str
    data: tuple[float | int, ...] | None = None
    random: RandomFill | None = None
    file: str | None = None
    slice: FileSlice | None = None
    # A struct buffer: its field values by name, and the struct's name ("": the type of
    # the variable the first pass binding it binds it to).
    fields: dict[str, Any] | None = None
    struct: str = ""
    output: bool = False

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        # A struct's real size is known only with the WGSL; layout.py caps it at 1 MiB.
        return 4 * self.count

    def refilled(self, fill: dict[str, Any]) -> Buffer:
        """This buffer with another fill (parse_fill's fields): a case's input."""
        cleared = {"data": None, "random": None, "file": None, "slice": None, "fields": None}
        return dataclasses.replace(self, **{**cleared, **fill})


@dataclass(frozen=True)
class Binding:
    group: int
    binding: int
    buffer: str


@dataclass(frozen=True)
class Pass:
    kernel: str
    entry_point: str
    bind: tuple[Binding, ...]
    dispatch: tuple[int, int, int]

    def groups(self) -> dict[int, list[Binding]]:
        grouped: dict[int, list[Binding]] = {}
        for b in self.bind:
            grouped.setdefault(b.group, []).append(b)
        return grouped


@dataclass(frozen=True)
class Reference:
    name: str
    args: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-5
    rtol: float = 1e-5


@dataclass(frozen=True)
class Report:
    # kind "classification" scores probabilities against labels; "" scores nothing.
    kind: str = ""
    probabilities: str = ""
    labels: str = ""
    # Buffers shown besides the outputs, without a verdict (a hidden layer).
    show: tuple[str, ...] = ()


@dataclass(frozen=True)
class Harness:
    buffers: tuple[Buffer, ...]
    passes: tuple[Pass, ...]
    reference: Reference | None = None
    tolerance: Tolerance = field(default_factory=Tolerance)
    report: Report | None = None
    description: str = ""
    cases: tuple[Case, ...] = ()

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def kernel_names(self) -> set[str]:
        """The kernels whose sources a run needs ("self" is the kernel being replayed)."""
        return {p.kernel for p in self.passes}

    def bound_buffers(self) -> list[Buffer]:
        """Buffers some pass binds: the only ones that live on the GPU."""
        names = {b.buffer for p in self.passes for b in p.bind}
        return [b for b in self.buffers if b.name in names]

    def outputs(self) -> list[Buffer]:
        return [b for b in self.buffers if b.output]

    def for_case(self, case: Case) -> Harness:
        """This harness with the case's inputs, and no cases of its own."""
        refilled = {b.name: b for b in case.buffers}
        buffers = tuple(refilled.get(b.name, b) for b in self.buffers)
        return dataclasses.replace(self, buffers=buffers, cases=())

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec: parsing it again gives an equal Harness.

        Defaults are spelled out and equivalent spellings collapse (dispatch [4] is
        [4, 1, 1], bind key "0" is "0.0"), so canonical_digest hashes meaning, not
        formatting.
        """
        spec: dict[str, Any] = {
            "buffers": {b.name: _buffer_dict(b) for b in self.buffers},
            "passes": [
                {
                    "kernel": p.kernel,
                    "entry_point": p.entry_point,
                    "bind": {f"{b.group}.{b.binding}": b.buffer for b in p.bind},
                    "dispatch": list(p.dispatch),
                }
                for p in self.passes
            ],
            "tolerance": {"atol": self.tolerance.atol, "rtol": self.tolerance.rtol},
        }
        if self.reference is not None:
            spec["reference"] = {
                "name": self.reference.name,
                "args": list(self.reference.args),
                "outputs": list(self.reference.outputs),
            }
        if self.report is not None:
            spec["report"] = _report_dict(self.report)
        if self.cases:
            spec["cases"] = {
                case.name: {
                    "buffers": {b.name: _fill_dict(b) for b in case.buffers},
                    **({"description": case.description} if case.description else {}),
                }
                for case in self.cases
            }
        if self.description:
            spec["description"] = self.description
        return spec


def _buffer_dict(b: Buffer) -> dict[str, Any]:
    spec: dict[str, Any] = {"usage": b.usage}
    if b.fill == "fields":
        if b.struct:
            spec["struct"] = b.struct
    else:
        spec.update(dtype=b.dtype, shape=list(b.shape))
    if b.output:
        spec["output"] = True
    return {**spec, **_fill_dict(b)}


def _fill_dict(b: Buffer) -> dict[str, Any]:
    if b.fill == "data":
        return {"data": list(b.data or ())}
    if b.fill == "zeros":
        return {"zeros": True}
    if b.fill == "random" and b.random is not None:
        return {"random": {"seed": b.random.seed, "low": b.random.low, "high": b.random.high}}
    if b.fill == "fields":
        return {"fields": b.fields}
    if b.fill == "file" and b.slice is not None:
        spec: dict[str, Any] = {"path": b.file, "offset": b.slice.offset}
        if b.slice.dtype:
            spec["dtype"] = b.slice.dtype
        if b.slice.count is not None:
            spec["count"] = b.slice.count
        return {"file": spec}
    if b.fill == "file":
        return {"file": b.file}
    return {}


def _report_dict(report: Report) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if report.kind:
        spec.update(kind=report.kind, probabilities=report.probabilities, labels=report.labels)
    if report.show:
        spec["show"] = list(report.show)
    return spec


def canonical_digest(data: Mapping[str, Any] | Harness) -> str:
    """sha256 of the normalised harness: the harness part of a run's cache key."""
    harness = data if isinstance(data, Harness) else parse_harness(data)
    spec = harness.to_dict()
    # Rewording the description does not change what runs, so it keeps cached runs.
    spec.pop("description", None)
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def parse_harness(data: object, fixtures_dir: Path | None = None) -> Harness:
    """Validate a JSON-like harness spec; raise HarnessError naming the field at fault.

    With fixtures_dir, "file" fills must also resolve inside it (symlinks included);
    whether the file exists and holds the right array is checked when the run loads it.
    """
    spec = as_object(data, "", HARNESS_FIELDS)
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise HarnessError("description", "must be a string")
    default_entry = identifier(spec.get("entry_point", "main"), "entry_point")

    buffers = _parse_buffers(spec.get("buffers", MISSING), fixtures_dir)
    by_name = {b.name: b for b in buffers}
    passes = _parse_passes(spec.get("passes", MISSING), by_name, default_entry)
    tolerance = _parse_tolerance(spec.get("tolerance", {}))
    reference = None
    if "reference" in spec:
        reference = _parse_reference(spec["reference"], by_name, buffers)
    report = None
    if "report" in spec:
        report = _parse_report(spec["report"], by_name)
    cases: tuple[Case, ...] = ()
    if "cases" in spec:
        cases = parse_cases(spec["cases"], by_name, fixtures_dir)
    return Harness(
        buffers=tuple(buffers),
        passes=tuple(passes),
        reference=reference,
        tolerance=tolerance,
        report=report,
        description=description,
        cases=cases,
    )


def _parse_buffers(value: object, fixtures_dir: Path | None) -> list[Buffer]:
    if isinstance(value, Missing):
        raise HarnessError("buffers", "is required")
    if not isinstance(value, Mapping):
        raise HarnessError("buffers", f"must be an object of named buffers (got {describe(value)})")
    if not 1 <= len(value) <= MAX_BUFFERS:
        raise HarnessError("buffers", f"must hold 1 to {MAX_BUFFERS} buffers (got {len(value)})")
    buffers = []
    for name, spec in value.items():
        path = join("buffers", str(name))
        if not isinstance(name, str) or not IDENTIFIER.fullmatch(name):
            raise HarnessError(path, "buffer names must be identifiers like x or w_1")
        buffers.append(_parse_buffer(name, spec, path, fixtures_dir))
    return buffers


def _parse_buffer(name: str, value: object, path: str, fixtures_dir: Path | None) -> Buffer:
    spec = as_object(value, path, BUFFER_FIELDS)
    usage = choice(spec.get("usage", MISSING), join(path, "usage"), USAGES)
    output = spec.get("output", False)
    if not isinstance(output, bool):
        raise HarnessError(join(path, "output"), f"must be true or false (got {describe(output)})")
    if output and usage != "read_write":
        raise HarnessError(
            join(path, "output"),
            f"only read_write buffers can be outputs (this one is {usage})",
        )
    if "fields" in spec or "struct" in spec:
        return _parse_struct_buffer(name, spec, path, usage, output)
    dtype = choice(spec.get("dtype", MISSING), join(path, "dtype"), DTYPES)
    shape = _parse_shape(spec.get("shape", MISSING), join(path, "shape"))
    fill = parse_fill(spec, path, dtype, math.prod(shape), fixtures_dir)
    if not fill and usage != "read_write":
        raise HarnessError(path, f"a {usage} buffer needs a fill: one of {', '.join(FILLS)}")
    return Buffer(name, usage, dtype, shape, **(fill or {"fill": "fresh"}), output=output)


def _parse_struct_buffer(
    name: str, spec: Mapping[str, Any], path: str, usage: str, output: bool
) -> Buffer:
    """A buffer filled by struct field names: its layout comes from the WGSL at run time."""
    for key in ("dtype", "shape"):
        if key in spec:
            raise HarnessError(
                join(path, key), "a struct buffer's size comes from its WGSL struct: leave it out"
            )
    if output:
        raise HarnessError(join(path, "output"), "a struct buffer is an input, not an output")
    if "fields" not in spec:
        raise HarnessError(join(path, "fields"), "is required with struct")
    struct = identifier(spec["struct"], join(path, "struct")) if "struct" in spec else ""
    fill = parse_fill(spec, path, "u32", 0, None)
    return Buffer(name, usage, "u32", (), **fill, struct=struct)


def _parse_shape(value: object, path: str) -> tuple[int, ...]:
    dims = as_list(value, path)
    if not 1 <= len(dims) <= 4:
        raise HarnessError(path, f"must have 1 to 4 dimensions (got {len(dims)})")
    for i, d in enumerate(dims):
        if not is_int(d) or d < 1:
            raise HarnessError(join(path, i), f"must be an integer >= 1 (got {describe(d)})")
    return tuple(dims)


def _parse_passes(value: object, by_name: Mapping[str, Buffer], default_entry: str) -> list[Pass]:
    items = as_list(value, "passes")
    if not items:
        raise HarnessError("passes", "needs at least one pass")
    return [_parse_pass(v, f"passes[{i}]", by_name, default_entry) for i, v in enumerate(items)]


def _parse_pass(
    value: object, path: str, by_name: Mapping[str, Buffer], default_entry: str
) -> Pass:
    spec = as_object(value, path, PASS_FIELDS)
    kernel = spec.get("kernel", "self")
    if not isinstance(kernel, str) or not KERNEL_NAME.fullmatch(kernel):
        raise HarnessError(
            join(path, "kernel"), f'must be "self" or a kernel name (got {describe(kernel)})'
        )
    entry = default_entry
    if "entry_point" in spec:
        entry = identifier(spec["entry_point"], join(path, "entry_point"))

    bind_path = join(path, "bind")
    bind_spec = spec.get("bind", MISSING)
    if isinstance(bind_spec, Missing):
        raise HarnessError(bind_path, "is required")
    if not isinstance(bind_spec, Mapping) or not bind_spec:
        raise HarnessError(bind_path, 'must map binding numbers to buffers, like {"0": "a"}')
    bindings: dict[tuple[int, int], Binding] = {}
    for key, buffer in bind_spec.items():
        key_path = join(bind_path, str(key))
        match = BIND_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            raise HarnessError(
                key_path, 'binding keys are a binding number like "0" or "group.binding" like "1.2"'
            )
        group = int(match.group(1) or 0)
        binding = int(match.group(2))
        if group >= MAX_GROUPS:
            raise HarnessError(key_path, f"group must be 0 to {MAX_GROUPS - 1} (got {group})")
        if binding > MAX_BINDING:
            raise HarnessError(key_path, f"binding must be 0 to {MAX_BINDING} (got {binding})")
        if (group, binding) in bindings:
            raise HarnessError(key_path, f"binds group {group} binding {binding} twice")
        name = buffer_name(buffer, key_path, by_name)
        bindings[(group, binding)] = Binding(group, binding, name)

    dispatch_path = join(path, "dispatch")
    dims = as_list(spec.get("dispatch", MISSING), dispatch_path)
    if not 1 <= len(dims) <= 3:
        raise HarnessError(dispatch_path, f"must have 1 to 3 sizes (got {len(dims)})")
    for i, d in enumerate(dims):
        if not is_int(d) or d < 1:
            raise HarnessError(
                join(dispatch_path, i), f"must be an integer >= 1 (got {describe(d)})"
            )
    dispatch = (*dims, *[1] * (3 - len(dims)))
    return Pass(
        kernel=kernel,
        entry_point=entry,
        bind=tuple(bindings[k] for k in sorted(bindings)),
        dispatch=dispatch,
    )


def _parse_tolerance(value: object) -> Tolerance:
    spec = as_object(value, "tolerance", TOLERANCE_FIELDS)
    values = {}
    for key in TOLERANCE_FIELDS:
        if key in spec:
            v = spec[key]
            if not is_number(v) or not math.isfinite(v) or v < 0:
                raise HarnessError(
                    join("tolerance", key), f"must be a number >= 0 (got {describe(v)})"
                )
            values[key] = float(v)
    return Tolerance(**values)


def _parse_reference(
    value: object, by_name: Mapping[str, Buffer], buffers: list[Buffer]
) -> Reference:
    spec = as_object(value, "reference", REFERENCE_FIELDS)
    name = spec.get("name", MISSING)
    if isinstance(name, Missing):
        raise HarnessError("reference.name", "is required")
    if not isinstance(name, str) or name not in REFERENCES:
        hint = difflib.get_close_matches(str(name), list(REFERENCES), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise HarnessError(
            "reference.name",
            f"unknown reference {describe(name)}{suggestion}; "
            f"known: {', '.join(sorted(REFERENCES))}",
        )
    args = tuple(
        buffer_name(a, f"reference.args[{i}]", by_name)
        for i, a in enumerate(as_list(spec.get("args", MISSING), "reference.args"))
    )
    try:
        inspect.signature(REFERENCES[name]).bind(*args)
    except TypeError:
        params = ", ".join(inspect.signature(REFERENCES[name]).parameters)
        raise HarnessError(
            "reference.args", f"{name} takes ({params}), got {len(args)} buffers"
        ) from None

    declared = [b.name for b in buffers if b.output]
    if "outputs" in spec:
        outputs = tuple(
            buffer_name(o, f"reference.outputs[{i}]", by_name)
            for i, o in enumerate(as_list(spec["outputs"], "reference.outputs"))
        )
    else:
        outputs = tuple(declared)
    if not outputs:
        raise HarnessError(
            "reference.outputs", "name at least one output (or mark a buffer output: true)"
        )
    for i, o in enumerate(outputs):
        if not by_name[o].output:
            raise HarnessError(
                f"reference.outputs[{i}]", f"buffer {o!r} must be marked output: true"
            )
    missing = [d for d in declared if d not in outputs]
    if missing:
        raise HarnessError(
            "reference.outputs", f"buffer {missing[0]!r} is marked output: true but not listed"
        )
    if len(set(outputs)) != len(outputs):
        raise HarnessError("reference.outputs", "lists a buffer twice")
    return Reference(name=name, args=args, outputs=outputs)


def _parse_report(value: object, by_name: Mapping[str, Buffer]) -> Report:
    spec = as_object(value, "report", REPORT_FIELDS)
    show = tuple(
        buffer_name(name, f"report.show[{i}]", by_name)
        for i, name in enumerate(as_list(spec.get("show", []), "report.show"))
    )
    for i, name in enumerate(show):
        if by_name[name].fill == "fields":
            raise HarnessError(f"report.show[{i}]", "a struct buffer is an input: nothing to show")
    if "kind" not in spec and not show:
        raise HarnessError("report", "give a kind (classification) or buffers to show")
    if "kind" not in spec:
        return Report(show=show)
    kind = choice(spec["kind"], "report.kind", REPORT_KINDS)
    for key in ("probabilities", "labels"):
        if key not in spec:
            raise HarnessError(join("report", key), "is required")
    probs = buffer_name(spec["probabilities"], "report.probabilities", by_name)
    labels = buffer_name(spec["labels"], "report.labels", by_name)
    shape = by_name[probs].shape
    if len(shape) != 2:
        raise HarnessError(
            "report.probabilities", f"must be a 2-D [rows, classes] buffer (shape is {list(shape)})"
        )
    if by_name[labels].count != shape[0]:
        raise HarnessError(
            "report.labels",
            f"must hold one label per row: {shape[0]} (it holds {by_name[labels].count})",
        )
    if by_name[labels].dtype == "f32":
        raise HarnessError("report.labels", "must be a u32 or i32 buffer")
    return Report(kind=kind, probabilities=probs, labels=labels, show=show)
