"""What a host program's readbacks are checked against.

A harness's numpy reference, computed from the inputs the program wrote: the harness's
passes say at which bindings its buffers sit, the program's dispatches say which of the
program's buffers it bound there, and the bytes the program wrote into those buffers are
the reference's arguments. Or another version's readbacks (an earlier version of a program
against the session's final one). Or nothing: the outputs are shown without a verdict.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernels.engine.compare import classification_report
from kernels.engine.harness import Harness, Pass
from kernels.engine.host.trace import NP_VIEWS, Trace, TracedDispatch
from kernels.engine.inputs import Memo, make_inputs, no_memo
from kernels.engine.limits import DEFAULT_LIMITS
from kernels.engine.outcome import CheckReport, Stop
from kernels.engine.references import REFERENCES


def new_check(against: str, name: str = "") -> CheckReport:
    return {"against": against, "name": name, "problem": ""}


class Unchecked(Exception):
    """The reference cannot be computed for this program; the message says why."""


@dataclass
class _Dispatch:
    pass_number: int
    dispatch: TracedDispatch
    entry_point: str


def reference_expected(
    harness: Harness,
    trace: Trace,
    written: dict[str, bytes],
    readbacks: list[Any],
    memo: Memo = no_memo,
    key: tuple[Any, ...] | None = None,
) -> list[np.ndarray | None]:
    """The harness reference's outputs, lined up with the program's readbacks, each in
    the shape of its harness buffer (so a readback is drawn as the harness run draws it).
    memo keeps them by the inputs' bytes (key: reference_key's, when the caller has it), as
    a harness run keeps its reference's: a program run again on the same inputs computes
    nothing twice.

    Raises Unchecked when a reference argument or output has no counterpart in the
    program (an input it never wrote from the host, an output it never read back).
    """
    reference = harness.reference
    if reference is None:
        raise Unchecked("the harness names no reference")
    buffers = program_buffers(harness, trace)
    if key is None:
        key = reference_key(harness, trace, written)

    def compute() -> tuple[np.ndarray, ...]:
        args = [_argument(harness, name, buffers, written) for name in reference.args]
        return _reference(reference.name, args)

    results = memo(("program reference", reference.name, *key), compute)
    expected: list[np.ndarray | None] = [None] * len(readbacks)
    for name, value in zip(reference.outputs, results, strict=False):
        index = _readback_of(buffers.get(name), readbacks)
        if index is None:
            raise Unchecked(f"the program never read back the buffer the harness calls {name}")
        array = np.asarray(value, dtype=np.float64)
        shape = harness.buffer(name).shape
        expected[index] = array.reshape(shape) if array.size == np.prod(shape) else array
    return expected


def program_report(
    harness: Harness,
    trace: Trace,
    written: dict[str, bytes],
    readbacks: list[Any],
    fixtures_dir: Path | None,
) -> dict[str, Any] | None:
    """The harness's classification report of the program's own readback of the
    probabilities, or None when there is none to make. The labels are what the program
    bound where the harness binds them, else the harness's own (a page keeps its labels
    in JavaScript: they only score the answers)."""
    report = harness.report
    if report is None or not report.kind:
        return None
    buffers = program_buffers(harness, trace)
    index = _readback_of(buffers.get(report.probabilities), readbacks)
    if index is None:
        return None
    shape = harness.buffer(report.probabilities).shape
    probabilities = np.frombuffer(readbacks[index].data, dtype=np.float32)
    labels = _labels(harness, buffers, written, fixtures_dir)
    if labels is None or len(shape) != 2 or probabilities.size != np.prod(shape):
        return None
    if labels.size != shape[0]:
        return None
    return classification_report(probabilities.reshape(shape), labels)


def _labels(
    harness: Harness, buffers: dict[str, str], written: dict[str, bytes], fixtures_dir: Path | None
) -> np.ndarray | None:
    assert harness.report is not None
    spec = harness.buffer(harness.report.labels)
    data = written.get(buffers.get(spec.name, ""))
    if data is not None:
        return np.frombuffer(data, dtype=NP_VIEWS[spec.dtype], count=len(data) // 4)[: spec.count]
    return harness_values(harness, spec.name, fixtures_dir)


def harness_values(harness: Harness, name: str, fixtures_dir: Path | None) -> np.ndarray | None:
    """A harness buffer's first contents as the harness fills it (its data, a fixture
    file or a slice of one), or None when they cannot be read."""
    if fixtures_dir is None:
        return None
    alone = dataclasses.replace(harness, buffers=(harness.buffer(name),), reference=None)
    try:
        host, _ = make_inputs(alone, {}, fixtures_dir, DEFAULT_LIMITS, no_memo)
    except Stop:
        return None
    return host[name]


def program_buffers(harness: Harness, trace: Trace) -> dict[str, str]:
    """Harness buffer name -> the program's buffer bound at the same binding.

    The harness's passes are matched in order with the program's dispatches of the same
    entry point (any dispatch, when the program names no entry point).
    """
    dispatches = _dispatches(trace)
    groups = {group["name"]: group for group in trace["bind_groups"]}
    found: dict[str, str] = {}
    used: set[int] = set()
    for harness_pass in harness.passes:
        match = _matching_dispatch(harness_pass, dispatches, used)
        if match is None:
            continue
        bound = match.dispatch["bind_groups"]
        for binding in harness_pass.bind:
            group = groups.get(bound.get(str(binding.group), ""))
            if group is None:
                continue
            for entry in group["entries"]:
                if entry["binding"] == binding.binding:
                    found.setdefault(binding.buffer, entry["buffer"])
    return found


def _dispatches(trace: Trace) -> list[_Dispatch]:
    entry_points = {p["name"]: p["entry_point"] for p in trace["pipelines"]}
    return [
        _Dispatch(number, dispatch, entry_points.get(dispatch["pipeline"], ""))
        for number, traced in enumerate(trace["passes"], start=1)
        for dispatch in traced["dispatches"]
    ]


def _matching_dispatch(
    harness_pass: Pass, dispatches: list[_Dispatch], used: set[int]
) -> _Dispatch | None:
    for index, candidate in enumerate(dispatches):
        if index in used or candidate.entry_point not in ("", harness_pass.entry_point):
            continue
        used.add(index)
        return candidate
    return None


def reference_key(
    harness: Harness,
    trace: Trace,
    written: dict[str, bytes],
    fetched: Mapping[str, bytes] | None = None,
    as_fetched: Mapping[str, str] | None = None,
) -> tuple[Any, ...]:
    """A key of the bytes the program wrote where the harness's reference arguments are, as
    written: hashing them costs a fraction of converting them. fetched: the files the
    program could fetch, by their sha256: bytes written as fetched are keyed by it.
    as_fetched: the buffers already known to hold such a file (ProgramResult.as_fetched),
    by name, which are not compared again."""
    reference = harness.reference
    if reference is None:
        return ()
    buffers = program_buffers(harness, trace)
    return tuple(
        _argument_key(harness, name, buffers, written, fetched or {}, as_fetched or {})
        for name in reference.args
    )


def reference_arguments(
    harness: Harness, trace: Trace, written: dict[str, bytes]
) -> list[np.ndarray]:
    """The reference's arguments as the program wrote them (Unchecked where it did not)."""
    reference = harness.reference
    if reference is None:
        raise Unchecked("the harness names no reference")
    buffers = program_buffers(harness, trace)
    return [_argument(harness, name, buffers, written) for name in reference.args]


def _argument_key(
    harness: Harness,
    name: str,
    buffers: dict[str, str],
    written: dict[str, bytes],
    fetched: Mapping[str, bytes],
    as_fetched: Mapping[str, str],
) -> tuple[Any, ...]:
    spec = harness.buffer(name)
    if sha := as_fetched.get(buffers.get(name, "")):
        return (name, spec.dtype, spec.shape, f"sha256:{sha}")
    data = written.get(buffers.get(name, ""), b"")
    # A file written as fetched (weights, a batch) is compared byte for byte, several
    # times faster than hashing it again (5.7 ms for the layer's 3.5 MB on an H100's host).
    digest = next(
        (
            f"sha256:{sha}"
            for sha, file in fetched.items()
            if len(file) == len(data) and file == data
        ),
        None,
    )
    return (name, spec.dtype, spec.shape, digest or hashlib.blake2b(data).hexdigest())


def _reference(name: str, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    try:
        result = REFERENCES[name](*args)
    except Exception as e:  # a reference fed with the program's own sizes may not fit
        raise Unchecked(f"the reference {name} failed on the program's inputs: {e}") from None
    results = tuple(
        np.asarray(r, dtype=np.float64)
        for r in (result if isinstance(result, tuple) else (result,))
    )
    for array in results:  # kept for the next run: nothing may change them
        array.setflags(write=False)
    return results


def _argument(
    harness: Harness, name: str, buffers: dict[str, str], written: dict[str, bytes]
) -> np.ndarray:
    spec = harness.buffer(name)
    program_name = buffers.get(name)
    if program_name is None:
        raise Unchecked(f"no dispatch of the program binds a buffer where the harness binds {name}")
    data = written.get(program_name)
    if data is None:
        raise Unchecked(
            f"the reference needs {name}, and the program never wrote buffer "
            f"{program_name} from the host"
        )
    values = np.frombuffer(data, dtype=NP_VIEWS[spec.dtype], count=len(data) // 4)
    if values.size < spec.count:
        raise Unchecked(
            f"buffer {program_name} holds {values.size:,} values; the harness's {name} "
            f"has shape {list(spec.shape)} ({spec.count:,} values)"
        )
    return values[: spec.count].astype(np.float64).reshape(spec.shape)


def _readback_of(buffer: str | None, readbacks: list[Any]) -> int | None:
    """The last readback of buffer: read itself, or through a copy into a mappable one."""
    if buffer is None:
        return None
    for index in range(len(readbacks) - 1, -1, -1):
        if buffer in (readbacks[index].buffer, readbacks[index].source):
            return index
    return None
