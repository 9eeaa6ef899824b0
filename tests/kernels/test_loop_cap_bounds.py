"""Which loops llvmpipe's cap can meet, read from a program's trace against the uniforms it
wrote, in time that grows with the trace and the source. No device: the trace is made here
as the worker records one."""

from __future__ import annotations

from typing import Any

from kernels.engine.run_warnings import program_warnings
from tests.growth import growth_problem


def module(members: int, bound: str) -> str:
    fields = "".join(f"  f{i}: u32,\n" for i in range(members))
    return (
        f"struct Dims {{\n{fields}  size: vec4<u32>,\n}}\n"
        "@group(0) @binding(0) var<uniform> dims: Dims;\n"
        "@group(0) @binding(1) var<storage, read_write> out: array<f32>;\n"
        "@compute @workgroup_size(64)\n"
        "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
        "  if (id.x >= arrayLength(&out)) { return; }\n"
        "  var s = 0.0;\n"
        f"  for (var i = id.x; i < {bound}; i += 2u) {{ s += 1.0; }}\n"
        "  out[id.x] = s;\n"
        "}\n"
    )


def trace(source: str, written: list[list[int]], dispatches: int = 1) -> dict:
    size = 4 * len(written[0])
    return {
        "buffers": [
            {"name": "dims", "size": size, "usage": ["UNIFORM", "COPY_DST"]},
            {"name": "out", "size": 4096, "usage": ["STORAGE", "COPY_SRC"]},
        ],
        "writes": [
            {"buffer": "dims", "offset": 0, "size": size, "dtype": "u32", "values": values}
            for values in written
        ],
        "modules": [{"name": "m", "code": source}],
        "pipelines": [{"name": "p", "module": "m", "entry_point": "main"}],
        "bind_groups": [
            {
                "name": "g",
                "entries": [
                    {"binding": 0, "buffer": "dims", "offset": 0, "size": None},
                    {"binding": 1, "buffer": "out", "offset": 0, "size": None},
                ],
            }
        ],
        "passes": [
            {
                "name": "pass",
                "dispatches": [
                    {"pipeline": "p", "bind_groups": {"0": "g"}, "workgroups": [16, 1, 1]}
                ]
                * dispatches,
            }
        ],
        "copies": [],
        "dropped": {},
    }


def lines(source: str, written: list[list[int]], **kwargs: Any) -> list[int]:
    found = program_warnings(True, trace(source, written, **kwargs))
    return [w["data"]["line"] for w in found if w["code"] == "llvmpipe_loop_cap"]


def fields(f1: int = 0, size_y: int = 0) -> list[int]:
    return [0, f1, 0, 0, 0, size_y, 0, 0]  # f0..f3, then size


def test_a_bound_counted_from_the_fields_the_program_wrote() -> None:
    source = module(4, "dims.f1 * 2u + dims.size.y")
    assert lines(source, [fields(f1=400, size_y=3)]) == []
    # 2 * 65,534 steps of 2: 65,534 iterations, one short of the cap; then at it.
    assert lines(source, [fields(f1=65_534)]) == []
    assert lines(source, [fields(f1=65_535)]) == [14]
    # Any content it held before a dispatch may be the one that ran.
    assert lines(source, [fields(f1=3), fields(f1=100_000), fields(f1=3)]) == [14]


def test_bounds_that_cannot_be_known_are_warned_of() -> None:
    assert lines(module(4, "u32(out[0])"), [fields()]) == [14]
    source = module(4, "dims.f1")
    # A write cut short in the trace, or a uniform a shader may write.
    cut = trace(source, [fields(f1=3)])
    cut["writes"][0]["values"] = [0]
    assert [w["data"]["line"] for w in program_warnings(True, cut)] == [14]
    storage = trace(source, [fields(f1=3)])
    storage["buffers"][0]["usage"].append("STORAGE")
    assert [w["data"]["line"] for w in program_warnings(True, storage)] == [14]
    # arrayLength(&out) is the size bound: 1,024 cells.
    assert lines(module(4, "arrayLength(&out)"), [fields()]) == []


def test_the_reading_grows_linearly_with_the_struct_and_the_dispatches() -> None:
    def by_members(n: int) -> str:
        return module(n, f"dims.f{n - 1} + dims.f1")

    problems = [
        growth_problem(
            "struct members", lambda s: lines(s, [[7] * (s.count(": u32,") + 4)]), by_members, 10
        ),
        growth_problem(
            "dispatches",
            lambda n: lines(module(4, "dims.f1"), [fields(f1=3)], dispatches=len(n)),
            lambda n: "x" * n,
            10,
        ),
    ]
    assert [p for p in problems if p] == []


def test_a_loop_in_a_function_the_entry_point_calls_is_read_too() -> None:
    source = module(4, "1u").replace(
        "  var s = 0.0;\n",
        "  var s = total();\n",
    ) + (
        "fn total() -> f32 {\n  var t = 0.0;\n  for (var j = 0u; j < dims.f1; j++) { t += 1.0; }\n"
        "  return t;\n}\n"
    )
    assert lines(source, [fields(f1=300)]) == []
    assert lines(source, [fields(f1=70_000)]) == [19]


def test_a_bound_named_by_a_let_is_read_as_what_the_let_holds() -> None:
    source = module(4, "k").replace("  var s = 0.0;\n", "  let k = n * 2u;\n  var s = 0.0;\n")
    source = source.replace("  let k =", "  let n = dims.f1;\n  let k =")
    assert lines(source, [fields(f1=300)]) == []
    assert lines(source, [fields(f1=70_000)]) == [16]
