"""Templates a free-form session can start from: buffers, a dispatch and a reference.

A free-form session with no template only compiles its kernel; one started from a
template runs each submission under the template's harness and compares its output
with a numpy reference (kernels/engine/references.py), as a lesson does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Template:
    slug: str
    title: str
    description: str
    harness: dict[str, Any]  # the JSON spec kernels/engine/harness.py parses
    bindings: str


def _buffer(usage: str, shape: list[int], dtype: str = "f32", **fill: Any) -> dict[str, Any]:
    return {"usage": usage, "dtype": dtype, "shape": shape, **fill}


def _random(seed: int, low: float = -1, high: float = 1) -> dict[str, Any]:
    return {"random": {"seed": seed, "low": low, "high": high}}


def _out(shape: list[int], dtype: str = "f32") -> dict[str, Any]:
    return {**_buffer("read_write", shape, dtype), "output": True}


def _harness(
    description: str,
    buffers: dict[str, dict[str, Any]],
    dispatch: list[int],
    reference: str,
    args: list[str],
) -> dict[str, Any]:
    names = list(buffers)
    return {
        "description": description,
        "entry_point": "main",
        "buffers": buffers,
        "passes": [
            {
                "kernel": "self",
                "bind": {str(i): name for i, name in enumerate(names)},
                "dispatch": dispatch,
            }
        ],
        "reference": {"name": reference, "args": args, "outputs": [names[-1]]},
        "tolerance": {"atol": 1e-4, "rtol": 1e-4},
    }


def _declare(buffers: dict[str, dict[str, Any]], atomic: bool = False) -> str:
    lines = []
    for i, (name, buf) in enumerate(buffers.items()):
        access = "read_write" if buf["usage"] == "read_write" else "read"
        element = f"atomic<{buf['dtype']}>" if atomic and access == "read_write" else buf["dtype"]
        lines.append(f"@group(0) @binding({i}) var<storage, {access}> {name}: array<{element}>;")
    return "\n".join(lines) + "\n"


def _template(
    slug: str,
    title: str,
    text: str,
    buffers: dict[str, dict[str, Any]],
    dispatch: list[int],
    reference: str,
    args: list[str],
    atomic: bool = False,
) -> Template:
    harness = _harness(text, buffers, dispatch, reference, args)
    return Template(slug, title, text, harness, _declare(buffers, atomic))


ELEMENTWISE = {"a": _buffer("read", [256], **_random(1)), "b": _buffer("read", [256], **_random(2))}
TEMPLATES = {
    t.slug: t
    for t in (
        _template(
            "elementwise",
            "Elementwise: out = a + b",
            "out = a + b over 256 floats; 4 workgroups along x.",
            {**ELEMENTWISE, "out": _out([256])},
            [4],
            "add",
            ["a", "b"],
        ),
        _template(
            "reduction",
            "Reduction: the sum of 1,024 floats",
            "out[0] = the sum of x's 1,024 floats; 1 workgroup.",
            {"x": _buffer("read", [1024], **_random(3)), "out": _out([1])},
            [1],
            "reduce_sum",
            ["x"],
        ),
        _template(
            "scan",
            "Scan: inclusive prefix sum",
            "out[i] = x[0] + … + x[i] over 256 floats; 1 workgroup.",
            {"x": _buffer("read", [256], **_random(4)), "out": _out([256])},
            [1],
            "inclusive_scan",
            ["x"],
        ),
        _template(
            "matmul",
            "Matrix multiply: 16×16 by 16×16",
            "out = a × b, row-major 16×16 matrices; 2×2 workgroups.",
            {
                "a": _buffer("read", [16, 16], **_random(5)),
                "b": _buffer("read", [16, 16], **_random(6)),
                "out": _out([16, 16]),
            },
            [2, 2, 1],
            "matmul",
            ["a", "b"],
        ),
        _template(
            "transpose",
            "Transpose: 16×32 to 32×16",
            "out = the transpose of x: x is 16 rows × 32 columns, row-major; 4×4 workgroups.",
            {"x": _buffer("read", [16, 32], **_random(7)), "out": _out([32, 16])},
            [4, 4, 1],
            "transpose",
            ["x"],
        ),
        _template(
            "histogram",
            "Histogram: 1,024 values into 16 bins",
            "counts[b] = how many of the 1,024 values equal b (0 to 15); 16 workgroups.",
            {
                "values": _buffer("read", [1024], "u32", **_random(8, 0, 16)),
                "counts": _out([16], "u32"),
            },
            [16],
            "histogram",
            ["values", "counts"],
            atomic=True,
        ),
        _template(
            "convolution",
            "Convolution: 1-D, 5 taps",
            "out[i] = x[i]·w[0] + … + x[i + 4]·w[4] for 256 outputs of 260 inputs; 4 workgroups.",
            {
                "x": _buffer("read", [260], **_random(9)),
                "w": _buffer("read", [5], **_random(10)),
                "out": _out([256]),
            },
            [4],
            "conv1d",
            ["x", "w"],
        ),
        _template(
            "softmax",
            "Softmax over rows",
            "out = softmax of each of x's 8 rows of 64 floats; 8 workgroups, one per row.",
            {"x": _buffer("read", [8, 64], **_random(11, -8, 8)), "out": _out([8, 64])},
            [8],
            "softmax",
            ["x"],
        ),
    )
}

# What a free-form session without a template starts from: the entry point its host
# program names, and the host program's scaffold. The learner declares the bindings and
# writes the body, and defines the buffers, inputs, dispatch and readback.
FREE_FORM_KERNEL_STARTER = """// Your kernel: declare its bindings
// (@group(0) @binding(n) var<storage, ...>) to match the bind group your
// host program makes, then write the body.

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
}
"""
FREE_FORM_HOST = """// Your host program: it runs on the server against WebGPU, as in a browser.
// Your kernel (the editor above) is loaded below as kernel.wgsl. What you read
// back is shown under the run.
const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const code = await (await fetch("kernel.wgsl")).text();
const module = device.createShaderModule({ code });
const pipeline = device.createComputePipeline({
  layout: "auto",
  compute: { module, entryPoint: "main" },
});

// TODO: create your buffers (device.createBuffer) and fill the inputs
// (device.queue.writeBuffer); a bind group that matches your kernel's @binding
// numbers; a compute pass that dispatches enough workgroups; a copy into a
// MAP_READ buffer; then mapAsync and getMappedRange to read it.
"""
