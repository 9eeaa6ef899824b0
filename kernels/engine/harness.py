"""The harness: a declarative JSON spec of how to run a kernel.

Learners, lesson plans and curators write it, so every problem is reported with the
path of the field at fault (kernels/engine/fields.py reads the JSON values), and nothing
in it is ever evaluated as code.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from kernels.engine.fields import (
    IDENTIFIER,
    MISSING,
    HarnessError,
    Missing,
    as_list,
    as_object,
    choice,
    describe,
    identifier,
    is_int,
    is_number,
    join,
)
from kernels.engine.references import REFERENCES

__all__ = [
    "Binding",
    "Buffer",
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
FILLS = ("data", "zeros", "random", "file")
MAX_BUFFERS = 32
# WebGPU's default maxBindGroups and maxBindingsPerBindGroup: a harness within them
# runs in a browser too.
MAX_GROUPS = 4
MAX_BINDING = 999

INT_RANGES = {"u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1)}
KERNEL_NAME = re.compile(r"[A-Za-z0-9_-]{1,60}")
BIND_KEY = re.compile(r"(?:(\d{1,3})\.)?(\d{1,4})")

HARNESS_FIELDS = (
    "description",
    "entry_point",
    "buffers",
    "passes",
    "reference",
    "tolerance",
    "report",
)
BUFFER_FIELDS = ("usage", "dtype", "shape", "output", *FILLS)
RANDOM_FIELDS = ("seed", "low", "high")
PASS_FIELDS = ("kernel", "entry_point", "bind", "dispatch")
REFERENCE_FIELDS = ("name", "args", "outputs")
TOLERANCE_FIELDS = ("atol", "rtol")
REPORT_FIELDS = ("kind", "probabilities", "labels")
REPORT_KINDS = ("classification",)


@dataclass(frozen=True)
class RandomFill:
    seed: int
    low: float | int
    high: float | int


@dataclass(frozen=True)
class Buffer:
    name: str
    usage: str
    dtype: str
    shape: tuple[int, ...]
    # "data", "zeros", "random", "file", or "sentinel" (read_write without a fill).
    fill: str
    data: tuple[float | int, ...] | None = None
    random: RandomFill | None = None
    file: str | None = None
    output: bool = False

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return 4 * self.count


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
    kind: str
    probabilities: str
    labels: str


@dataclass(frozen=True)
class Harness:
    buffers: tuple[Buffer, ...]
    passes: tuple[Pass, ...]
    reference: Reference | None = None
    tolerance: Tolerance = field(default_factory=Tolerance)
    report: Report | None = None
    description: str = ""

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
            spec["report"] = {
                "kind": self.report.kind,
                "probabilities": self.report.probabilities,
                "labels": self.report.labels,
            }
        if self.description:
            spec["description"] = self.description
        return spec


def _buffer_dict(b: Buffer) -> dict[str, Any]:
    spec: dict[str, Any] = {"usage": b.usage, "dtype": b.dtype, "shape": list(b.shape)}
    if b.output:
        spec["output"] = True
    if b.fill == "data":
        spec["data"] = list(b.data or ())
    elif b.fill == "zeros":
        spec["zeros"] = True
    elif b.fill == "random" and b.random is not None:
        spec["random"] = {"seed": b.random.seed, "low": b.random.low, "high": b.random.high}
    elif b.fill == "file":
        spec["file"] = b.file
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
    return Harness(
        buffers=tuple(buffers),
        passes=tuple(passes),
        reference=reference,
        tolerance=tolerance,
        report=report,
        description=description,
    )


def _buffer_name(value: object, path: str, by_name: Mapping[str, Buffer]) -> str:
    if not isinstance(value, str):
        raise HarnessError(path, f"must be a buffer name (got {describe(value)})")
    if value not in by_name:
        hint = difflib.get_close_matches(value, list(by_name), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise HarnessError(path, f"no buffer named {value!r}{suggestion}")
    return value


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
    dtype = choice(spec.get("dtype", MISSING), join(path, "dtype"), DTYPES)
    shape = _parse_shape(spec.get("shape", MISSING), join(path, "shape"))
    output = spec.get("output", False)
    if not isinstance(output, bool):
        raise HarnessError(join(path, "output"), f"must be true or false (got {describe(output)})")
    if output and usage != "read_write":
        raise HarnessError(
            join(path, "output"),
            f"only read_write buffers can be outputs (this one is {usage})",
        )

    fills = [f for f in FILLS if f in spec]
    if len(fills) > 1:
        raise HarnessError(path, f"give at most one fill, not {' and '.join(fills)}")
    if not fills:
        if usage != "read_write":
            raise HarnessError(path, f"a {usage} buffer needs a fill: one of {', '.join(FILLS)}")
        return Buffer(name, usage, dtype, shape, "sentinel", output=output)

    fill = fills[0]
    fill_path = join(path, fill)
    raw = spec[fill]
    if fill == "data":
        data = _parse_data(raw, fill_path, dtype, math.prod(shape))
        return Buffer(name, usage, dtype, shape, fill, data=data, output=output)
    if fill == "zeros":
        if raw is not True:
            raise HarnessError(fill_path, "must be true (leave it out otherwise)")
        return Buffer(name, usage, dtype, shape, fill, output=output)
    if fill == "random":
        rnd = _parse_random(raw, fill_path, dtype)
        return Buffer(name, usage, dtype, shape, fill, random=rnd, output=output)
    file = _parse_file(raw, fill_path, fixtures_dir)
    return Buffer(name, usage, dtype, shape, fill, file=file, output=output)


def _parse_shape(value: object, path: str) -> tuple[int, ...]:
    dims = as_list(value, path)
    if not 1 <= len(dims) <= 4:
        raise HarnessError(path, f"must have 1 to 4 dimensions (got {len(dims)})")
    for i, d in enumerate(dims):
        if not is_int(d) or d < 1:
            raise HarnessError(join(path, i), f"must be an integer >= 1 (got {describe(d)})")
    return tuple(dims)


def _parse_data(value: object, path: str, dtype: str, count: int) -> tuple[float | int, ...]:
    values = as_list(value, path)
    flat: list[float | int] = []
    # Iterative flattening, so deeply nested lists cannot hit the recursion limit.
    stack = [iter(values)]
    while stack:
        item = next(stack[-1], MISSING)
        if item is MISSING:
            stack.pop()
        elif isinstance(item, list | tuple):
            stack.append(iter(item))
        elif len(flat) == count:
            raise HarnessError(path, f"has more values than the shape holds ({count})")
        else:
            flat.append(_parse_scalar(item, join(path, len(flat)), dtype))
    if len(flat) != count:
        raise HarnessError(path, f"has {len(flat)} values but the shape holds {count}")
    return tuple(flat)


def _parse_scalar(value: object, path: str, dtype: str) -> float | int:
    if dtype == "f32":
        if not is_number(value) or not math.isfinite(value):
            raise HarnessError(path, f"must be a finite number (got {describe(value)})")
        return float(value)
    low, high = INT_RANGES[dtype]
    if not is_int(value):
        raise HarnessError(path, f"must be an integer for {dtype} (got {describe(value)})")
    if not low <= value <= high:
        raise HarnessError(path, f"must be within {dtype} range {low}..{high} (got {value})")
    return value


def _parse_random(value: object, path: str, dtype: str) -> RandomFill:
    spec = as_object(value, path, RANDOM_FIELDS)
    for key in RANDOM_FIELDS:
        if key not in spec:
            raise HarnessError(join(path, key), "is required")
    seed = spec["seed"]
    if not is_int(seed) or seed < 0:
        raise HarnessError(join(path, "seed"), f"must be an integer >= 0 (got {describe(seed)})")
    low, high = spec["low"], spec["high"]
    if dtype == "f32":
        for key, v in (("low", low), ("high", high)):
            if not is_number(v) or not math.isfinite(v):
                raise HarnessError(join(path, key), f"must be a finite number (got {describe(v)})")
        low, high = float(low), float(high)
    else:
        lo, hi = INT_RANGES[dtype]
        # integers(low, high) excludes high, so high may be one past the dtype's maximum.
        for key, v, top in (("low", low, hi), ("high", high, hi + 1)):
            if not is_int(v):
                raise HarnessError(
                    join(path, key), f"must be an integer for {dtype} (got {describe(v)})"
                )
            if not lo <= v <= top:
                raise HarnessError(join(path, key), f"must be within {lo}..{top} (got {v})")
    if not low < high:
        raise HarnessError(path, f"low must be less than high (got {low} and {high})")
    return RandomFill(seed=seed, low=low, high=high)


def _parse_file(value: object, path: str, fixtures_dir: Path | None) -> str:
    if not isinstance(value, str) or not value:
        raise HarnessError(path, f"must be a relative path to a .npy file (got {describe(value)})")
    if "\\" in value or "\x00" in value:
        raise HarnessError(path, "use forward slashes and plain characters")
    rel = PurePosixPath(value)
    if rel.is_absolute():
        raise HarnessError(path, "must be relative to the fixtures folder, not absolute")
    if ".." in rel.parts:
        raise HarnessError(path, "must not contain '..'")
    if rel.suffix != ".npy":
        raise HarnessError(path, "must name a .npy file")
    if fixtures_dir is not None:
        resolve_fixture(value, fixtures_dir, path)
    return value


def resolve_fixture(file: str, fixtures_dir: Path, path: str = "file") -> Path:
    """The real path of a fixture file, refusing anything that resolves outside the folder.

    Resolving follows symlinks, so a link inside the folder that points elsewhere is
    refused too.
    """
    root = Path(fixtures_dir).resolve()
    target = (root / file).resolve()
    if not target.is_relative_to(root):
        raise HarnessError(path, "resolves outside the fixtures folder")
    return target


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
        name = _buffer_name(buffer, key_path, by_name)
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
        _buffer_name(a, f"reference.args[{i}]", by_name)
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
            _buffer_name(o, f"reference.outputs[{i}]", by_name)
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
    kind = choice(spec.get("kind", MISSING), "report.kind", REPORT_KINDS)
    for key in ("probabilities", "labels"):
        if key not in spec:
            raise HarnessError(join("report", key), "is required")
    probs = _buffer_name(spec["probabilities"], "report.probabilities", by_name)
    labels = _buffer_name(spec["labels"], "report.labels", by_name)
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
    return Report(kind=kind, probabilities=probs, labels=labels)
