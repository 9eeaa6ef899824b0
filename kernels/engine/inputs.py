"""A harness's inputs as arrays: each buffer's first contents and the reference's outputs.

Made before the device is touched, from the harness, its fixture files and (for a struct
buffer's layout) the WGSL. The runner (kernels/engine/run.py) memoises them per worker,
so every version replayed under one harness shares them. Every problem stops the run as
`rejected`, naming the harness field at fault.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from kernels.engine.fields import HarnessError
from kernels.engine.fills import resolve_fixture
from kernels.engine.harness import Buffer, Harness, parse_harness
from kernels.engine.layout import LayoutError, StructLayout, binding_type, struct_layout
from kernels.engine.limits import Limits, MiB
from kernels.engine.outcome import Status, Stop
from kernels.engine.references import REFERENCES

INT_DTYPES = {"u32": np.uint32, "i32": np.int32}
NP_DTYPES = {"f32": np.float32, **INT_DTYPES}
# The value types a raw .bin file may hold, little-endian as WebGPU hosts write them.
FILE_DTYPES = {
    "f32": "<f4",
    "u32": "<u4",
    "i32": "<i4",
    "f64": "<f8",
    "u8": "u1",
    "i8": "i1",
    "u16": "<u2",
    "i16": "<i2",
}

# memo(key, compute) returns compute()'s value, or the value kept from an earlier call
# with the same key. Worker processes keep one across jobs (kernels/engine/worker.py), so a
# fixture is read, and a harness's inputs and reference are computed, once per worker.
Memo = Callable[[tuple[Any, ...], Callable[[], Any]], Any]
# A harness's JSON up to this size is kept parsed in the worker's memo (parsed_harness).
MEMO_HARNESS_BYTES = 64 * 1024


def no_memo(key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
    return compute()


def parsed_harness(spec: Mapping[str, Any], fixtures_dir: Path | None, memo: Memo) -> Harness:
    """parse_harness, once a worker for all the versions of a kernel that share the harness
    (a parse walks every field, reference and case); not for a harness whose JSON is
    over MEMO_HARNESS_BYTES, which the memo would keep whole, nor for one given in-process
    with values JSON has no type for (numpy's floats)."""
    parse = functools.partial(parse_harness, spec, fixtures_dir)
    try:
        text = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        return parse()
    if len(text) > MEMO_HARNESS_BYTES:
        return parse()
    harness: Harness = memo(("harness", text, str(fixtures_dir)), parse)
    return harness


def invalid(error: HarnessError) -> Stop:
    return Stop(Status.REJECTED, f"The harness is invalid: {error}", str(error))


def struct_layouts(harness: Harness, sources: Mapping[str, str]) -> dict[str, StructLayout]:
    """The layout of each struct buffer, read from the kernel of the first pass binding it:
    the struct it names, or the type of the variable it is bound to."""
    layouts = {}
    for buf in harness.buffers:
        if buf.fill != "fields":
            continue
        bound = [(p.kernel, b) for p in harness.passes for b in p.bind if b.buffer == buf.name]
        if not bound:
            raise invalid(
                HarnessError(f"buffers.{buf.name}", "no pass binds it, so no kernel lays it out")
            )
        kernel, binding = bound[0]
        source = sources[kernel]
        name = buf.struct or binding_type(source, binding.group, binding.binding)
        where = f"buffers.{buf.name}.struct"
        if name is None:
            raise invalid(
                HarnessError(
                    where,
                    f"kernel {kernel} declares no variable at @group({binding.group}) "
                    f"@binding({binding.binding}); name the struct",
                )
            )
        try:
            layouts[buf.name] = struct_layout(source, name)
        except LayoutError as e:
            raise invalid(HarnessError(where, f"kernel {kernel}: {e}")) from None
    return layouts


def file_stamps(harness: Harness, fixtures_dir: Path) -> list[tuple[str, int, int]]:
    """Which version of each fixture file the inputs come from."""
    stamps = []
    for buf in harness.buffers:
        if buf.fill == "file" and buf.file is not None:
            try:
                stat = resolve_fixture(buf.file, fixtures_dir).stat()
            except (HarnessError, OSError):
                continue  # host_arrays() stops with the reason
            stamps.append((buf.file, stat.st_mtime_ns, stat.st_size))
    return stamps


def make_inputs(
    harness: Harness,
    layouts: Mapping[str, StructLayout],
    fixtures_dir: Path,
    limits: Limits,
    memo: Memo,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every buffer's first contents and the reference's outputs, read-only."""
    files = _Files(fixtures_dir, limits, memo)
    host = {b.name: host_array(b, layouts, files) for b in harness.buffers}
    expected = reference_outputs(harness, host)
    for array in (*host.values(), *expected.values()):
        array.setflags(write=False)
    return host, expected


def host_array(buf: Buffer, layouts: Mapping[str, StructLayout], files: _Files) -> np.ndarray:
    dtype = NP_DTYPES[buf.dtype]
    if buf.fill == "data":
        return np.array(buf.data, dtype=dtype).reshape(buf.shape)
    if buf.fill == "random" and buf.random is not None:
        rng = np.random.default_rng(buf.random.seed)
        values: np.ndarray
        if buf.dtype == "f32":
            values = rng.uniform(buf.random.low, buf.random.high, size=buf.shape)
        else:
            # The harness holds integers for integer dtypes: int() only tells mypy so.
            low, high = int(buf.random.low), int(buf.random.high)
            values = rng.integers(low, high, size=buf.shape)
        return values.astype(dtype)
    if buf.fill == "file":
        return files.load(buf)
    if buf.fill == "fields":
        try:
            packed = layouts[buf.name].pack(buf.fields or {}, f"buffers.{buf.name}.fields")
        except LayoutError as e:
            raise invalid(HarnessError("", str(e))) from None
        return np.frombuffer(packed, dtype=np.uint32).copy()
    # "zeros", and "fresh": a new WebGPU buffer is zeroed.
    return np.zeros(buf.shape, dtype=dtype)


def reference_outputs(harness: Harness, host: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    ref = harness.reference
    if ref is None:
        return {}
    args = [host[name].astype(np.float64) for name in ref.args]
    try:
        result = REFERENCES[ref.name](*args)
    except Exception as e:
        raise Stop(
            Status.REJECTED,
            f"The reference {ref.name} failed on the harness's buffers: {e}",
            f"{type(e).__name__}: {e}",
        ) from None
    results = result if isinstance(result, tuple) else (result,)
    if len(results) != len(ref.outputs):
        raise Stop(
            Status.REJECTED,
            f"The reference {ref.name} returns {len(results)} arrays but the harness "
            f"names {len(ref.outputs)} outputs.",
            "reference.outputs: count mismatch",
        )
    expected = {}
    for name, value in zip(ref.outputs, results, strict=True):
        array = np.asarray(value, dtype=np.float64)
        buf = harness.buffer(name)
        if array.size != buf.count:
            raise Stop(
                Status.REJECTED,
                f"The reference {ref.name} returns shape {list(array.shape)} for "
                f"output {name}, which has shape {list(buf.shape)}.",
                "reference.outputs: shape mismatch",
            )
        expected[name] = array.reshape(buf.shape)
    return expected


class _Files:
    """Fixture files read into buffers: whole .npy arrays, or slices of .npy and .bin."""

    def __init__(self, fixtures_dir: Path, limits: Limits, memo: Memo) -> None:
        self.fixtures_dir = fixtures_dir
        self.limits = limits
        self.memo = memo

    def load(self, buf: Buffer) -> np.ndarray:
        field = f"buffers.{buf.name}.file"
        try:
            path = resolve_fixture(buf.file or "", self.fixtures_dir, field)
        except HarnessError as e:
            raise invalid(e) from None
        if not path.is_file():
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} (buffer {buf.name}) does not exist.",
                f"{field}: no such file {buf.file!r}",
            )
        array = self.whole(buf, path, field) if buf.slice is None else self.part(buf, path, field)
        kinds = "biuf" if buf.dtype == "f32" else "biu"
        if array.dtype.kind not in kinds:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds {array.dtype} values, which do not "
                f"convert to {buf.dtype}.",
                f"{field}: dtype {array.dtype}",
            )
        if buf.dtype != "f32" and array.size:
            info = np.iinfo(INT_DTYPES[buf.dtype])
            if array.min() < info.min or array.max() > info.max:
                raise Stop(
                    Status.REJECTED,
                    f"Fixture file {buf.file} holds values outside the {buf.dtype} range.",
                    f"{field}: out of range",
                )
        if buf.slice is None:
            return array.astype(NP_DTYPES[buf.dtype])
        # A count smaller than the buffer leaves the rest zero, as a fresh buffer is.
        filled = np.zeros(buf.count, dtype=NP_DTYPES[buf.dtype])
        filled[: array.size] = array
        return filled.reshape(buf.shape)

    def whole(self, buf: Buffer, path: Path, field: str) -> np.ndarray:
        """A .npy array that must have the buffer's shape."""
        # A float64 file converts to f32, so allow twice the buffer cap plus a header.
        if path.stat().st_size > 2 * self.limits.max_buffer_bytes + MiB:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is too large.",
                f"{field}: {path.stat().st_size:,} bytes",
            )
        stat = path.stat()
        key = ("file", str(path), stat.st_mtime_ns, stat.st_size)
        array: np.ndarray = self.read(key, lambda: np.load(path, allow_pickle=False), buf, field)
        if tuple(array.shape) != buf.shape:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} holds shape {list(array.shape)}, "
                f"but buffer {buf.name} has shape {list(buf.shape)}.",
                f"{field}: shape mismatch",
            )
        return array

    def part(self, buf: Buffer, path: Path, field: str) -> np.ndarray:
        """count values from byte offset of a .bin file's values or a .npy array's."""
        window = buf.slice
        assert window is not None
        count = window.count or buf.count
        stat = path.stat()
        key = ("slice", str(path), stat.st_mtime_ns, stat.st_size, window, count)
        if window.dtype:
            dtype = np.dtype(FILE_DTYPES[window.dtype])
            values = self.read(
                key, lambda: _read_bin(path, dtype, window.offset, count), buf, field
            )
        else:
            values = self.read(key, lambda: _read_npy_part(path, window.offset, count), buf, field)
        if isinstance(values, str):
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} (buffer {buf.name}): {values}.",
                f"{field}: {values}",
            )
        array: np.ndarray = values
        return array

    def read(
        self, key: tuple[Any, ...], compute: Callable[[], Any], buf: Buffer, field: str
    ) -> Any:
        try:
            return self.memo(key, compute)
        except (OSError, ValueError) as e:
            raise Stop(
                Status.REJECTED,
                f"Fixture file {buf.file} is not a readable array.",
                f"{field}: {e}",
            ) from None


def _read_bin(path: Path, dtype: np.dtype, offset: int, count: int) -> np.ndarray | str:
    """count values of dtype from byte offset, or why not (a string)."""
    if offset % dtype.itemsize:
        return f"offset {offset} is not a multiple of the value size ({dtype.itemsize} bytes)"
    with path.open("rb") as f:
        f.seek(offset)
        data = f.read(count * dtype.itemsize)
    if len(data) < count * dtype.itemsize:
        return f"holds {len(data) // dtype.itemsize} values after byte {offset}, not {count}"
    return np.frombuffer(data, dtype=dtype).copy()


def _read_npy_part(path: Path, offset: int, count: int) -> np.ndarray | str:
    """count values from byte offset into a .npy array's values (its header not counted).

    Memory-mapped, so a slice of a large file reads only that slice."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    itemsize = array.dtype.itemsize
    if offset % itemsize:
        return f"offset {offset} is not a multiple of the value size ({itemsize} bytes)"
    start = offset // itemsize
    flat = array.reshape(-1)
    if flat.size < start + count:
        return f"holds {max(flat.size - start, 0)} values after byte {offset}, not {count}"
    return np.array(flat[start : start + count])
