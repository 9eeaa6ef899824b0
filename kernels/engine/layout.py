"""Where WGSL puts each field of a struct in memory, by the WGSL spec's layout rules.

A host must write a uniform's bytes exactly where the kernel reads them: a vec3<f32> is
16-byte aligned, a struct's size is rounded up to its alignment, and the gaps are
padding. struct_layout() reads a struct declaration (kernels/engine/wgsl.py's linear
tokenizer and declaration reader, not naga: a kernel that does not compile still has a
struct a reader wants to see) and lays it out; pack() fills the bytes from named field
values (a harness's struct uniform); describe() reads bytes back field by field, with
the padding, for the replay page.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from kernels.engine.fills import INT_RANGES
from kernels.engine.wgsl import Module, Token, parse, resource_numbers, tokenize, type_text

MAX_DEPTH = 16
# A struct bigger than this is a storage array, not something a harness fills by name.
MAX_STRUCT_BYTES = 1 << 20
MAX_SHOWN_VALUES = 256
_END = object()

SCALAR_TYPES = {"f32": np.dtype("<f4"), "u32": np.dtype("<u4"), "i32": np.dtype("<i4")}
SCALAR_SUFFIXES = {"f": "f32", "u": "u32", "i": "i32"}
PREDECLARED_ALIAS = re.compile(r"(vec[234]|mat[234]x[234])([fuih])")


class LayoutError(ValueError):
    """The struct cannot be laid out or filled; the message says why, for a reader."""


@dataclass(frozen=True)
class WgslType:
    """A host-shareable WGSL type with its alignment and size in bytes.

    kind is "scalar", "vector", "matrix", "array" or "struct". element is a vector's or
    a matrix column's scalar type, an array's element type; count is a vector's width, a
    matrix's columns or an array's length; stride is the bytes between a matrix's
    columns or an array's elements.
    """

    kind: str
    spelling: str
    align: int
    size: int
    scalar: str = ""
    element: WgslType | None = None
    count: int = 1
    stride: int = 0
    members: tuple[Member, ...] = ()


@dataclass(frozen=True)
class Member:
    name: str
    type: WgslType
    offset: int
    size: int  # the type's size, or its @size


class Field(TypedDict):
    name: str  # "scale", "light.position", "lights[1].color"
    type: str  # as WGSL spells it
    offset: int
    size: int
    values: list[Any]  # describe() only: the scalars it holds, in order


class Padding(TypedDict):
    offset: int
    size: int


class LayoutDict(TypedDict):
    """A struct's bytes, field by field, as JSON for the replay page's picture."""

    struct: str
    size: int
    align: int
    fields: list[Field]
    padding: list[Padding]
    given: int  # describe(): the bytes the host gave (fewer than size: a short buffer)


@dataclass(frozen=True)
class StructLayout:
    name: str
    type: WgslType

    @property
    def size(self) -> int:
        return self.type.size

    @property
    def align(self) -> int:
        return self.type.align

    def fields(self) -> list[Field]:
        """The leaves, in memory order: scalars, vectors, matrices and arrays of them,
        with nested structs (and arrays of structs) opened up under dotted names."""
        return [
            {"name": name, "type": t.spelling, "offset": offset, "size": t.size, "values": []}
            for name, t, offset in _leaves(self.type, "", 0)
        ]

    def padding(self) -> list[Padding]:
        """The bytes no field covers, as runs: between fields, inside array strides, at
        the end."""
        covered = np.zeros(self.size, dtype=bool)
        for _, t, offset in _leaves(self.type, "", 0):
            covered[offset + _scalar_offsets(t)[:, None] + np.arange(4)] = True
        edges = np.flatnonzero(np.diff(np.concatenate(([1], covered.view(np.int8), [1]))))
        starts, ends = edges[0::2], edges[1::2]
        return [{"offset": int(s), "size": int(e - s)} for s, e in zip(starts, ends, strict=True)]

    def pack(self, values: Mapping[str, Any], path: str = "fields") -> bytes:
        """The struct's bytes from values named by member (nested: an object for a struct,
        a list for a vector, matrix or array); padding is zero. Raises LayoutError
        naming the field path at fault."""
        out = np.zeros(self.size, dtype=np.uint8)
        _pack(self.type, values, 0, path, out)
        return out.tobytes()

    def describe(self, data: bytes) -> LayoutDict:
        """data (a uniform's bytes as a host wrote them) read field by field."""
        raw = np.frombuffer(data[: self.size], dtype=np.uint8)
        fields = self.fields()
        for entry, (_, t, offset) in zip(fields, _leaves(self.type, "", 0), strict=True):
            entry["values"] = _read(t, offset, raw)
        return {
            "struct": self.name,
            "size": self.size,
            "align": self.align,
            "fields": fields,
            "padding": self.padding(),
            "given": len(data),
        }


def struct_layout(source: str, name: str) -> StructLayout:
    """The layout of struct `name` (or of what an alias of that name stands for)."""
    resolved = _Types(parse(source)).resolve(name, [], 0)
    if resolved.kind != "struct":
        raise LayoutError(f"{name} is not a struct (it is {resolved.spelling})")
    return StructLayout(name=name, type=resolved)


def scalar_at(source: str, type_tokens: list[Token], path: list[str]) -> tuple[str, int] | None:
    """The scalar type and byte offset of a member path (["k"], ["size", "x"]) within a
    value of the type written; None where the path names no scalar of a shareable type."""
    t = _laid_out(source, type_text(type_tokens))
    if t is None:
        return None
    offset = 0
    for name in path:
        member = next((m for m in t.members if m.name == name), None)
        index = "xyzw".find(name) if len(name) == 1 else -1
        if member is not None:
            t, offset = member.type, offset + member.offset
        elif t.kind == "vector" and 0 <= index < t.count:
            t, offset = _scalar(t.scalar), offset + 4 * index
        else:
            return None
    return (t.scalar, offset) if t.kind == "scalar" else None


@functools.lru_cache(maxsize=64)
def _laid_out(source: str, spelling: str) -> WgslType | None:
    """A type as written, laid out (kept: a run reads the same uniform once a dispatch)."""
    try:
        return _Types(parse(source)).resolve_tokens(tokenize(spelling).tokens, 0)
    except LayoutError:
        return None


def runtime_stride(source: str, type_tokens: list[Token]) -> int | None:
    """The bytes between elements of a runtime-sized array<T> (what arrayLength divides
    a binding's size by); None for any other type."""
    name, args = _split_type(type_tokens) if type_tokens else ("", [])
    if name != "array" or len(args) != 1:
        return None
    try:
        element = _Types(parse(source)).resolve_tokens(args[0], 0)
    except LayoutError:
        return None
    return _round_up(element.align, element.size)


def binding_type(source: str, group: int, binding: int) -> str | None:
    """The type of the variable at @group(group) @binding(binding), if declared."""
    module = parse(source)
    for variable in module.variables:
        if resource_numbers(module, variable) == (group, binding) and variable.type:
            return type_text(variable.type)
    return None


# -- layout rules ---------------------------------------------------------------------------


def _round_up(align: int, n: int) -> int:
    return math.ceil(n / align) * align


def _scalar(name: str) -> WgslType:
    return WgslType("scalar", name, 4, 4, scalar=name)


def _vector(width: int, scalar: str) -> WgslType:
    align = {2: 8, 3: 16, 4: 16}[width]
    return WgslType(
        "vector", f"vec{width}<{scalar}>", align, 4 * width, scalar=scalar, count=width, stride=4
    )


def _matrix(columns: int, rows: int, scalar: str) -> WgslType:
    column = _vector(rows, scalar)
    stride = _round_up(column.align, column.size)
    spelling = f"mat{columns}x{rows}<{scalar}>"
    return WgslType(
        "matrix",
        spelling,
        column.align,
        columns * stride,
        scalar=scalar,
        element=column,
        count=columns,
        stride=stride,
    )


def _array(element: WgslType, count: int) -> WgslType:
    stride = _round_up(element.align, element.size)
    spelling = f"array<{element.spelling}, {count}>"
    return WgslType(
        "array",
        spelling,
        element.align,
        count * stride,
        scalar=element.scalar,
        element=element,
        count=count,
        stride=stride,
    )


def _struct(name: str, members: list[tuple[str, WgslType, int | None, int | None]]) -> WgslType:
    """members: (name, type, @align, @size) in declaration order."""
    laid: list[Member] = []
    end = 0
    align = 1
    for member, t, align_attr, size_attr in members:
        member_align = align_attr or t.align
        member_size = size_attr or t.size
        if size_attr is not None and size_attr < t.size:
            raise LayoutError(f"{name}.{member}: @size({size_attr}) is smaller than {t.size}")
        offset = _round_up(member_align, end)
        laid.append(Member(member, t, offset, member_size))
        end = offset + member_size
        align = max(align, member_align)
    if not laid:
        raise LayoutError(f"struct {name} has no members")
    return WgslType("struct", name, align, _round_up(align, end), members=tuple(laid))


def _leaves(t: WgslType, prefix: str, offset: int) -> list[tuple[str, WgslType, int]]:
    if t.kind == "struct":
        found = []
        for m in t.members:
            found += _leaves(m.type, f"{prefix}.{m.name}" if prefix else m.name, offset + m.offset)
        return found
    if t.kind == "array" and t.element is not None and t.element.kind == "struct":
        found = []
        for i in range(t.count):
            found += _leaves(t.element, f"{prefix}[{i}]", offset + i * t.stride)
        return found
    return [(prefix, t, offset)]


def _scalar_offsets(t: WgslType) -> np.ndarray:
    """Byte offsets, from the start of t, of every scalar in a leaf type."""
    if t.kind == "scalar":
        return np.zeros(1, dtype=np.int64)
    if t.kind == "vector":
        return np.arange(t.count, dtype=np.int64) * 4
    assert t.element is not None
    inner = _scalar_offsets(t.element)
    starts = np.arange(t.count, dtype=np.int64)[:, None] * t.stride
    offsets: np.ndarray = (starts + inner[None, :]).reshape(-1)
    return offsets


# -- filling and reading ------------------------------------------------------------------


def _pack(t: WgslType, value: Any, offset: int, path: str, out: np.ndarray) -> None:
    if t.kind == "struct":
        if not isinstance(value, Mapping):
            raise LayoutError(f"{path}: struct {t.spelling} takes an object of its fields")
        names = [m.name for m in t.members]
        for key in value:
            if key not in names:
                raise LayoutError(
                    f"{path}.{key}: struct {t.spelling} has no such field; "
                    f"its fields are {', '.join(names)}"
                )
        for m in t.members:
            if m.name not in value:
                raise LayoutError(f"{path}.{m.name}: missing ({m.type.spelling})")
            _pack(m.type, value[m.name], offset + m.offset, f"{path}.{m.name}", out)
        return
    if t.kind == "array" and t.element is not None and t.element.kind == "struct":
        items = value if isinstance(value, list | tuple) else None
        if items is None or len(items) != t.count:
            raise LayoutError(f"{path}: {t.spelling} takes a list of {t.count} objects")
        for i, item in enumerate(items):
            _pack(t.element, item, offset + i * t.stride, f"{path}[{i}]", out)
        return
    flat = _flatten(value)
    offsets = _scalar_offsets(t)
    if len(flat) != offsets.size:
        want = "a number" if t.kind == "scalar" else f"{offsets.size} numbers"
        raise LayoutError(f"{path}: {t.spelling} takes {want}")
    dtype = SCALAR_TYPES[t.scalar]
    array = _scalars(flat, t.scalar, path)
    positions = offset + offsets[:, None] + np.arange(4)
    out[positions.reshape(-1)] = array.astype(dtype).view(np.uint8)


def _flatten(value: Any) -> list[Any]:
    """The numbers in value, nested lists flattened in order (iteratively: a harness's
    nesting cannot reach the recursion limit)."""
    flat: list[Any] = []
    stack = [iter([value])]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, list | tuple):
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat


def _scalars(flat: list[Any], scalar: str, path: str) -> np.ndarray:
    for v in flat:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise LayoutError(f"{path}: {v!r} is not a finite number")
        if scalar != "f32" and not isinstance(v, int):
            raise LayoutError(f"{path}: {scalar} takes integers (got {v!r})")
    if scalar == "f32":
        return np.array(flat, dtype=np.float64)
    low, high = INT_RANGES[scalar]
    for v in flat:
        if not low <= v <= high:
            raise LayoutError(f"{path}: {v} is outside the {scalar} range")
    return np.array(flat, dtype=np.int64)


def _read(t: WgslType, offset: int, raw: np.ndarray) -> list[Any]:
    """The scalars of a leaf that lie within raw; a short buffer gives fewer."""
    values: list[Any] = []
    dtype = SCALAR_TYPES[t.scalar]
    for start in (offset + _scalar_offsets(t))[:MAX_SHOWN_VALUES]:
        if start + 4 > raw.size:
            break
        value = raw[start : start + 4].view(dtype)[0]
        values.append(_json_scalar(value))
    return values


def _json_scalar(value: np.generic) -> Any:
    if value.dtype.kind != "f":
        return int(value)
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


# -- reading the declarations --------------------------------------------------------------


def _split_type(tokens: list[Token]) -> tuple[str, list[list[Token]]]:
    """A type as written: its name and the parts of its template list ("array", [[vec4,
    <, f32, >], [16]])."""
    if not tokens:
        raise LayoutError("a member has no type")
    args: list[list[Token]] = []
    depth = 0
    for token in tokens[1:]:
        if token.text == "<":
            depth += 1
            if depth == 1:
                args.append([])
                continue
        elif token.text == ">":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and token.text == ",":
            args.append([])
        elif depth >= 1:
            args[-1].append(token)
    return tokens[0].text, [arg for arg in args if arg]


class _Types:
    """Lays out the types a module's structs, aliases and constants name."""

    def __init__(self, module: Module) -> None:
        self.module = module
        # Each struct is laid out once: a struct used by many members of another, nested a
        # few levels deep, would otherwise be laid out exponentially many times.
        self.structs: dict[str, WgslType] = {}

    def resolve(self, name: str, args: list[list[Token]], depth: int) -> WgslType:
        """The laid-out type a name and its template arguments stand for (raises
        LayoutError for what a host cannot share or this reader cannot size)."""
        if depth > MAX_DEPTH:
            raise LayoutError(f"{name}: types nest too deeply (or an alias refers to itself)")
        if name in self.module.aliases:
            return self.resolve_tokens(self.module.aliases[name], depth + 1)
        if short := PREDECLARED_ALIAS.fullmatch(name):
            return self.resolve(short[1], [[_word(_suffix(short[2]))]], depth)
        if name in SCALAR_TYPES:
            return _scalar(name)
        if name == "atomic" and args:
            return self.resolve_tokens(args[0], depth + 1)
        if re.fullmatch(r"vec[234]", name):
            return _vector(int(name[3]), self._scalar_arg(name, args))
        if re.fullmatch(r"mat[234]x[234]", name):
            return _matrix(int(name[3]), int(name[5]), self._scalar_arg(name, args))
        if name == "array":
            return self._array(args, depth)
        if name in self.module.structs:
            if name not in self.structs:
                self.structs[name] = self._struct(name, depth)
            return self.structs[name]
        if name in ("bool", "f16", "i64", "u64", "f64"):
            raise LayoutError(f"{name} cannot be shared with the host here")
        raise LayoutError(f"no struct or type named {name} is declared")

    def resolve_tokens(self, tokens: list[Token], depth: int) -> WgslType:
        name, args = _split_type(tokens)
        return self.resolve(name, args, depth)

    def _scalar_arg(self, name: str, args: list[list[Token]]) -> str:
        scalar = type_text(args[0]) if args else ""
        if scalar not in SCALAR_TYPES:
            raise LayoutError(f"{name}<{scalar}> cannot be laid out here (f32, u32, i32 only)")
        return scalar

    def _array(self, args: list[list[Token]], depth: int) -> WgslType:
        if not args:
            raise LayoutError("array needs an element type")
        element = self.resolve_tokens(args[0], depth + 1)
        if len(args) < 2:
            raise LayoutError(f"array<{element.spelling}> has no fixed size to lay out")
        count = self.module.value(args[1])
        if count is None or count < 1:
            raise LayoutError(f"array<{element.spelling}, {type_text(args[1])}>: unknown size")
        if count * element.size > MAX_STRUCT_BYTES:
            raise LayoutError(f"array<{element.spelling}, {count}> is too large to lay out here")
        return _array(element, count)

    def _struct(self, name: str, depth: int) -> WgslType:
        members = []
        for member in self.module.structs[name]:
            numbers = {a.name: a.args[0] for a in member.attributes if a.args}
            align = self.module.value(numbers["align"]) if "align" in numbers else None
            size = self.module.value(numbers["size"]) if "size" in numbers else None
            laid = self.resolve_tokens(member.type, depth + 1)
            members.append((member.name, laid, align, size))
        laid_out = _struct(name, members)
        if laid_out.size > MAX_STRUCT_BYTES:
            raise LayoutError(
                f"struct {name} is too large to lay out here ({laid_out.size:,} bytes)"
            )
        return laid_out


def _word(text: str) -> Token:
    return Token("ident", text, 0, 0)


def _suffix(letter: str) -> str:
    if letter == "h":
        return "f16"
    return SCALAR_SUFFIXES[letter]
