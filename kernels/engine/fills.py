"""How a harness buffer gets its first contents: the fills, read from the spec.

A buffer takes at most one fill: "data" (literal values), "zeros", "random" (seeded),
"file" (a .npy or raw .bin file inside the fixtures folder, whole or a slice), or
"fields" (a WGSL struct filled by field name; its layout comes from the kernel, when
the run has the source: kernels/engine/layout.py). A read_write buffer without one
starts zeroed, as a new WebGPU buffer does. Cases (kernels/engine/harness.py) refill
buffers with the same fills.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kernels.engine.fields import (
    IDENTIFIER,
    MISSING,
    HarnessError,
    as_list,
    as_object,
    choice,
    describe,
    is_int,
    is_number,
    join,
)

FILLS = ("data", "zeros", "random", "file", "fields")
RANDOM_FIELDS = ("seed", "low", "high")
FILE_FIELDS = ("path", "dtype", "offset", "count")
FILE_SUFFIXES = (".npy", ".bin")
# The value types a raw .bin file may hold; they convert to the buffer's dtype.
FILE_DTYPES = ("f32", "u32", "i32", "f64", "u8", "i8", "u16", "i16")
INT_RANGES = {"u32": (0, 2**32 - 1), "i32": (-(2**31), 2**31 - 1)}
# Scalars in one struct's "fields": far more than a uniform buffer (64 KiB) holds.
MAX_FIELD_VALUES = 65536


@dataclass(frozen=True)
class RandomFill:
    seed: int
    low: float | int
    high: float | int


@dataclass(frozen=True)
class FileSlice:
    """Part of a file, as a TypedArray views an ArrayBuffer: offset in bytes (a .npy
    file's header not counted), count in values (None: as many as the buffer holds, the
    rest of the buffer zero when count is smaller)."""

    dtype: str  # the values' type in a .bin file; "" for .npy (the file says)
    offset: int = 0
    count: int | None = None


def parse_fill(
    spec: Mapping[str, Any], path: str, dtype: str, count: int, fixtures_dir: Path | None
) -> dict[str, Any]:
    """The one fill in spec, as harness.Buffer fields; {} when spec has none."""
    fills = [f for f in FILLS if f in spec]
    if len(fills) > 1:
        raise HarnessError(path, f"give at most one fill, not {' and '.join(fills)}")
    if not fills:
        return {}
    fill = fills[0]
    fill_path = join(path, fill)
    raw = spec[fill]
    if fill == "data":
        return {"fill": fill, "data": _parse_data(raw, fill_path, dtype, count)}
    if fill == "zeros":
        if raw is not True:
            raise HarnessError(fill_path, "must be true (leave it out otherwise)")
        return {"fill": fill}
    if fill == "random":
        return {"fill": fill, "random": _parse_random(raw, fill_path, dtype)}
    if fill == "fields":
        return {"fill": fill, "fields": parse_fields(raw, fill_path)}
    file, window = _parse_file(raw, fill_path, dtype, count, fixtures_dir)
    return {"fill": fill, "file": file, "slice": window}


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


def _parse_file(
    value: object, path: str, dtype: str, count: int, fixtures_dir: Path | None
) -> tuple[str, FileSlice | None]:
    """A file path (a string), or {"path", "dtype", "offset", "count"} for a slice."""
    if not isinstance(value, Mapping):
        return _parse_file_path(value, path, fixtures_dir), None
    spec = as_object(value, path, FILE_FIELDS)
    file = _parse_file_path(spec.get("path", MISSING), join(path, "path"), fixtures_dir)
    raw = file.endswith(".bin")
    if "dtype" in spec and not raw:
        raise HarnessError(join(path, "dtype"), "a .npy file says its own dtype: leave it out")
    file_dtype = choice(spec.get("dtype", dtype), join(path, "dtype"), FILE_DTYPES) if raw else ""
    offset = spec.get("offset", 0)
    if not is_int(offset) or offset < 0:
        raise HarnessError(join(path, "offset"), f"must be bytes >= 0 (got {describe(offset)})")
    values = spec.get("count")
    if values is not None and (not is_int(values) or not 1 <= values <= count):
        raise HarnessError(
            join(path, "count"), f"must be 1 to {count}, what the buffer holds (got {values!r})"
        )
    if not raw and set(spec) == {"path"}:
        return file, None  # the whole array, in the buffer's shape
    return file, FileSlice(dtype=file_dtype, offset=offset, count=values)


def _parse_file_path(value: object, path: str, fixtures_dir: Path | None) -> str:
    if not isinstance(value, str) or not value:
        raise HarnessError(
            path, f"must be a relative path to a .npy or .bin file (got {describe(value)})"
        )
    if "\\" in value or "\x00" in value:
        raise HarnessError(path, "use forward slashes and plain characters")
    rel = PurePosixPath(value)
    if rel.is_absolute():
        raise HarnessError(path, "must be relative to the fixtures folder, not absolute")
    if ".." in rel.parts:
        raise HarnessError(path, "must not contain '..'")
    if rel.suffix not in FILE_SUFFIXES:
        raise HarnessError(path, "must name a .npy or .bin file")
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


def parse_fields(value: object, path: str) -> dict[str, Any]:
    """A struct's field values by name: numbers, lists of them (vectors, matrices,
    arrays), objects (nested structs). Whether they fit the struct is checked when the
    run has the WGSL (layout.StructLayout.pack)."""
    if not isinstance(value, Mapping) or not value:
        raise HarnessError(path, f"must be an object of field values (got {describe(value)})")
    seen = 0
    # Iteratively, so deep nesting cannot hit the recursion limit.
    stack: list[tuple[object, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, Mapping):
            for key, inner in item.items():
                if not isinstance(key, str) or not IDENTIFIER.fullmatch(key):
                    raise HarnessError(where, f"field names must be identifiers (got {key!r})")
                stack.append((inner, join(where, key)))
        elif isinstance(item, list | tuple):
            stack += [(inner, join(where, i)) for i, inner in enumerate(item)]
        elif not is_number(item) or not math.isfinite(item):
            raise HarnessError(where, f"must be a finite number (got {describe(item)})")
        else:
            seen += 1
            if seen > MAX_FIELD_VALUES:
                raise HarnessError(path, f"holds more than {MAX_FIELD_VALUES:,} values")
    return copy.deepcopy(dict(value))
