"""Large outputs checked where they are: a filter on the device before any readback.

Reading a 4096x4096 output back and comparing it in float64 on the CPU cost the H100
host 116 of its 168 ms (kernels/engine/compare.py). Here a compute pass compares each
cell with the reference's value, kept on the device in float32 (resident.py's second
LRU), against a tolerance tightened by a margin that covers every rounding of float32
(see WGSL below), and writes per block of cells the count of cells it could not pass,
non-finite ones among them, the largest error, where it is, and the largest relative
error. Only that small table is read back. If no cell was flagged, the output passes
without being read back: every cell is within tolerance in exact float64 arithmetic, so
the CPU path would pass it too. If any cell was flagged, the output is read back and
compared on the CPU exactly as before, so a failing outcome is the CPU path's, cell for
cell.

What differs in a passing outcome: its largest absolute and relative errors and where
the largest is come from float32 arithmetic. They are the float64 figures to within
1 part in 2^20 of the error plus 2^-45 of the expected value there (the same bound the
margin rests on), and in a near tie the cell named may be another whose error is
within that bound. The entry says so: "compared": "device".

Used only where it pays (CHECK_FROM, measured) and only for float32 outputs too large
to carry their cells, whose expected values are finite and normal in float32: anything
else stays on the CPU path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from kernels.engine.compare import SHOW_VALUES_UP_TO, status_grid
from kernels.engine.device import import_wgpu, read_now
from kernels.engine.harness import Buffer, Harness
from kernels.engine.inputs import Memo
from kernels.engine.outcome import json_number
from kernels.engine.resident import DeviceBuffers

# Outputs of more cells than this are checked on the device, by adapter. Measured with
# bench/replay.py --crossover (the runner alone, y = 2x): on an H100 the check cost
# 0.11 ms more than reading back 16,384 cells and saved 0.23 ms at 65,536 (1.8 against
# 9.2 ms at 1M cells); on llvmpipe, where the device is the same CPU, it never paid
# (1.5x slower at 1M cells, no faster at 16M), so there it is off.
CHECK_FROM: dict[str, int | None] = {"hardware": 1 << 15, "software": None}
# execute()'s device_check_from for "the adapter's CHECK_FROM".
BY_ADAPTER = -1
WORKGROUP = 256
PER_THREAD = 64
BLOCK_CELLS = WORKGROUP * PER_THREAD

# Why the filter never passes a cell the CPU path fails. x is the float64 expected
# value, hi = f32(x) and lo = f32(x - hi) the two floats kept on the device, g the cell
# (a float32), e = |g - x| the error the CPU computes. Each float32 operation rounds to
# within 2^-24 of its result; a device may also flush results under 2^-126 to zero.
# - hi is within 2^-24|x| of x and lo within 2^-48|x| of x - hi, so the device's
#   a = |(g - hi) - lo|, two roundings, is within 2^-22 a + 2^-46|x| + 2^-124 of e:
#   e <= a (1 + 2^-20) + 2^-40 |hi| + 2^-120 = bound, with room for bound's own three
#   roundings and for numpy's float64 rounding of e (2^-53).
# - atol and rtol go down to floats at or below them; atol + rtol |hi| rounds up by at
#   most 2^-22 all told, so limit = (atol + rtol |hi|) (1 - 2^-20) is under the CPU's
#   atol + rtol |x| even after numpy's float64 rounding of it.
# - bound <= limit is false for NaN, and infinities and NaN are caught by their bits
#   first (a compiler may assume finite floats), so a non-finite cell is never passed.
# The bound needs (g - hi) - lo evaluated in that order: SPIR-V without fast-math flags,
# which is what naga emits, lets a driver fuse a multiply and an add (only more exact)
# but not reassociate.
SHADER = """
struct Params { count: u32, atol: f32, rtol: f32, limit_cap: f32 }

@group(0) @binding(0) var<storage, read> got: array<f32>;
@group(0) @binding(1) var<storage, read> expected: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> blocks: array<vec4<u32>>;
@group(0) @binding(3) var<uniform> params: Params;

const WORKGROUP: u32 = 256u;
const PER_THREAD: u32 = 64u;
const EXPONENT: u32 = 0x7f800000u;
const MARGIN: f32 = 9.5367431640625e-07;      // 2^-20
const RESIDUAL: f32 = 9.094947017729282e-13;  // 2^-40
const FLOOR: f32 = 7.52316384526264e-37;      // 2^-120

var<workgroup> flagged: array<u32, 256>;
var<workgroup> worst: array<f32, 256>;
var<workgroup> worst_at: array<u32, 256>;
var<workgroup> worst_rel: array<f32, 256>;

fn finite(v: f32) -> bool {
    return (bitcast<u32>(v) & EXPONENT) != EXPONENT;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let block = group.x + group.y * 65535u;
    var bad = 0u;
    var err_max = -1.0;
    var err_at = 0u;
    var rel_max = 0.0;
    for (var k = 0u; k < PER_THREAD; k++) {
        let i = block * WORKGROUP * PER_THREAD + k * WORKGROUP + t;
        if (i >= params.count) {
            break;
        }
        let g = got[i];
        let x = expected[i];
        if (!finite(g) || !finite(x.x) || !finite(x.y)) {
            bad += 1u;
            continue;
        }
        let a = abs((g - x.x) - x.y);
        let bound = a * (1.0 + MARGIN) + abs(x.x) * RESIDUAL + FLOOR;
        let limit = min((params.atol + params.rtol * abs(x.x)) * (1.0 - MARGIN), params.limit_cap);
        if (!finite(bound) || !(bound <= limit)) {
            bad += 1u;
        }
        if (a > err_max) {
            err_max = a;
            err_at = i;
        }
        if (x.x != 0.0) {
            rel_max = max(rel_max, a / abs(x.x));
        }
    }
    flagged[t] = bad;
    worst[t] = err_max;
    worst_at[t] = err_at;
    worst_rel[t] = rel_max;
    // Halve the workgroup's figures until thread 0 holds the block's: the first cell
    // with the largest error wins a tie, as numpy's argmax does.
    for (var half = WORKGROUP / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if (t < half) {
            flagged[t] += flagged[t + half];
            let e = worst[t + half];
            if (e > worst[t] || (e == worst[t] && worst_at[t + half] < worst_at[t])) {
                worst[t] = e;
                worst_at[t] = worst_at[t + half];
            }
            worst_rel[t] = max(worst_rel[t], worst_rel[t + half]);
        }
    }
    if (t == 0u) {
        let rel = bitcast<u32>(worst_rel[0]);
        blocks[block] = vec4<u32>(flagged[0], bitcast<u32>(worst[0]), worst_at[0], rel);
    }
}
"""


def split_expected(expected: np.ndarray) -> np.ndarray | None:
    """The float64 expected values as (hi, lo) float32 pairs, hi + lo within 2^-48 of each;
    None where the device cannot check them: a value that is not finite, or that is not
    zero but under float32's smallest normal (a device may flush it to zero)."""
    x = expected.reshape(-1).astype(np.float64, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        hi = x.astype(np.float32)
    if not np.isfinite(hi).all():
        return None
    if ((x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)).any():
        return None
    pairs = np.empty((x.size, 2), dtype=np.float32)
    pairs[:, 0] = hi
    # x - hi is exact in float64: hi is x rounded to 24 bits.
    pairs[:, 1] = x - hi
    return pairs


def float_at_most(value: float) -> np.float32:
    """The largest float32 not above value (value >= 0)."""
    f = np.float32(value)
    return np.nextafter(f, np.float32(0)) if float(f) > value else f


@dataclass
class DeviceCheck:
    """The outputs of one run that are checked on the device, and the table each
    writes its figures to. kept holds the expected values between runs."""

    device: Any
    kept: DeviceBuffers
    harness: Harness
    names: list[str] = field(default_factory=list)
    tables: dict[str, tuple[Any, int]] = field(default_factory=dict)
    bound: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # (expected, uniform)
    own: list[Any] = field(default_factory=list)  # made for this run: destroyed by release()
    pipeline: Any = None

    def plan(
        self,
        inputs_key: tuple[Any, ...],
        expected: dict[str, np.ndarray],
        readback: list[str],
        check_from: int | None,
        memo: Memo,
    ) -> None:
        """Choose the outputs to check here and put their expected values on the device
        (kept between runs under the inputs' key)."""
        if check_from is None or self.harness.reference is None:
            return
        report = set()
        if self.harness.report is not None:
            r = self.harness.report
            report = {*r.show, r.probabilities, r.labels}
        for name in self.harness.reference.outputs:
            buf = self.harness.buffer(name)
            count = int(np.prod(buf.shape))
            if (
                buf.dtype == "f32"
                and name in readback
                and name not in report
                and name in expected
                and count > max(SHOW_VALUES_UP_TO, check_from)
                and memo(("device check", *inputs_key, name), partial(_checkable, expected[name]))
            ):
                self.names.append(name)
        if not self.names:
            return
        self.pipeline = memo(("device check pipeline",), self.make_pipeline)
        for name in self.names:
            self.prepare(name, inputs_key, expected[name])

    def make_pipeline(self) -> Any:
        module = self.device.create_shader_module(code=SHADER)
        return self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": "main"}
        )

    def prepare(self, name: str, inputs_key: tuple[Any, ...], expected: np.ndarray) -> None:
        wgpu = import_wgpu()
        usage = wgpu.BufferUsage
        count = expected.size

        def upload() -> Any:
            pairs = split_expected(expected)
            assert pairs is not None  # plan() checked
            return self.device.create_buffer_with_data(
                data=pairs, usage=usage.STORAGE, label=f"{name} expected"
            )

        references = self.kept.references or DeviceBuffers(budget=0, references=False)
        reference, kept = references.get(("expected", *inputs_key, name), count * 8, upload)
        if not kept:
            self.own.append(reference)
        blocks = -(-count // BLOCK_CELLS)
        table = self.device.create_buffer(
            size=blocks * 16, usage=usage.STORAGE | usage.COPY_SRC, label=f"{name} check"
        )
        tolerance = self.harness.tolerance
        params = np.zeros(4, dtype=np.float32)
        params.view(np.uint32)[0] = count
        params[1] = float_at_most(tolerance.atol)
        params[2] = float_at_most(tolerance.rtol)
        params[3] = np.float32(3.0e38)
        uniform = self.device.create_buffer_with_data(data=params, usage=usage.UNIFORM)
        self.own.extend([table, uniform])
        self.tables[name] = (table, blocks)
        self.bound[name] = (reference, uniform)

    def run(self, outputs: dict[str, Any]) -> None:
        """The check's passes over the outputs (name -> the run's buffer), submitted after
        the run's own commands."""
        encoder = self.device.create_command_encoder()
        layout = self.pipeline.get_bind_group_layout(0)
        for name in self.names:
            table, blocks = self.tables[name]
            reference, uniform = self.bound[name]
            entries = [
                {"binding": i, "resource": {"buffer": b}}
                for i, b in enumerate([outputs[name], reference, table, uniform])
            ]
            group = self.device.create_bind_group(layout=layout, entries=entries)
            compute = encoder.begin_compute_pass(label=f"check {name}")
            compute.set_pipeline(self.pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(min(blocks, 65535), -(-blocks // 65535), 1)
            compute.end()
        self.device.queue.submit([encoder.finish()])

    def passed(self) -> dict[str, dict[str, Any]]:
        """The verdict of each output the device passed (absent: flagged, to be read
        back and compared on the CPU)."""
        entries = {}
        for name in self.names:
            table, blocks = self.tables[name]
            rows = np.frombuffer(read_now(self.device, table), dtype=np.uint32)
            rows = rows.reshape(blocks, 4)
            if rows[:, 0].any():
                continue
            entries[name] = _entry(self.harness.buffer(name), rows)
        return entries

    def release(self) -> None:
        for gpu in self.own:
            gpu.destroy()
        self.own.clear()


def _checkable(expected: np.ndarray) -> bool:
    return split_expected(expected) is not None


def _entry(buf: Buffer, rows: np.ndarray) -> dict[str, Any]:
    """compare_output's verdict on a passing output, from the device's table."""
    errors = rows[:, 1].view(np.float32)
    # argmax takes the first block with the largest error: the first cell overall.
    block = int(np.argmax(errors))
    worst = int(rows[block, 2])
    count = int(np.prod(buf.shape))
    return {
        "name": buf.name,
        "dtype": buf.dtype,
        "shape": list(buf.shape),
        "count": count,
        "bad": 0,
        "unwritten": 0,
        "nonfinite": 0,
        "max_abs_err": json_number(max(float(errors[block]), 0.0)),
        "max_rel_err": json_number(float(rows[:, 3].view(np.float32).max())),
        "worst_index": [int(i) for i in np.unravel_index(worst, tuple(buf.shape))],
        "first_bad": [],
        "grid": status_grid(None, buf.shape),
        "compared": "device",
    }
