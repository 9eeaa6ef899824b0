"""kernels.engine.layout: WGSL struct layouts by the spec's rules. No GPU."""

from __future__ import annotations

import struct

import pytest

from kernels.engine import layout
from kernels.engine.layout import LayoutError, binding_type, struct_layout

PARAMS = """
// rows and scale share the first 8 bytes; origin is 16-byte aligned.
struct Params {
    rows: u32,
    scale: f32,
    origin: vec3<f32>,
    flags: vec2u,
}
@group(0) @binding(3) var<uniform> params: Params;
"""

SCENE = """
/* a comment /* nested */ still a comment: struct Fake { x: u32 } */
const LIGHTS = 2u;
alias Colour = vec3f;
struct Light { position: vec3f, @align(16) colour: Colour }
struct Scene {
    ambient: f32,
    lights: array<Light, LIGHTS>,
    transform: mat3x3<f32>,
    @size(32) weights: array<vec2<f32>, 2 * 1>,
    count: atomic<u32>,
}
"""


def offsets(layout) -> list[tuple[str, str, int, int]]:
    return [(f["name"], f["type"], f["offset"], f["size"]) for f in layout.fields()]


def test_it_lays_out_mixed_fields_with_their_padding() -> None:
    layout = struct_layout(PARAMS, "Params")

    assert (layout.size, layout.align) == (48, 16)
    assert offsets(layout) == [
        ("rows", "u32", 0, 4),
        ("scale", "f32", 4, 4),
        ("origin", "vec3<f32>", 16, 12),
        ("flags", "vec2<u32>", 32, 8),
    ]
    assert layout.padding() == [
        {"offset": 8, "size": 8},
        {"offset": 28, "size": 4},
        {"offset": 40, "size": 8},
    ]


def test_it_follows_nesting_arrays_matrices_aliases_and_attributes() -> None:
    layout = struct_layout(SCENE, "Scene")

    assert offsets(layout) == [
        ("ambient", "f32", 0, 4),
        ("lights[0].position", "vec3<f32>", 16, 12),
        ("lights[0].colour", "vec3<f32>", 32, 12),
        ("lights[1].position", "vec3<f32>", 48, 12),
        ("lights[1].colour", "vec3<f32>", 64, 12),
        ("transform", "mat3x3<f32>", 80, 48),
        ("weights", "array<vec2<f32>, 2>", 128, 16),
        ("count", "u32", 160, 4),
    ]
    # The struct is as aligned as its most aligned member: 164 rounds up to 176.
    assert (layout.size, layout.align) == (176, 16)
    # A mat3x3's columns are vec3s, 16 bytes apart: 4 bytes of padding after each.
    assert {"offset": 92, "size": 4} in layout.padding()
    # @size(32) leaves 16 bytes after the array's 16.
    assert {"offset": 144, "size": 16} in layout.padding()


def test_it_packs_named_values_where_wgsl_reads_them() -> None:
    layout = struct_layout(PARAMS, "Params")

    data = layout.pack({"rows": 24, "scale": 0.5, "origin": [1, 2, 3], "flags": [7, 8]})

    assert len(data) == 48
    assert struct.unpack_from("<If", data, 0) == (24, 0.5)
    assert struct.unpack_from("<fff", data, 16) == (1.0, 2.0, 3.0)
    assert struct.unpack_from("<II", data, 32) == (7, 8)
    assert data[8:16] == bytes(8) and data[40:] == bytes(8)


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"rows": 1, "scale": 1, "origin": [1, 2, 3]}, "fields.flags: missing (vec2<u32>)"),
        ({"rows": 1, "scale": 1, "origin": [1, 2], "flags": [1, 2]}, "takes 3 numbers"),
        ({"rows": -1, "scale": 1, "origin": [1, 2, 3], "flags": [1, 2]}, "outside the u32"),
        ({"rows": 1.5, "scale": 1, "origin": [1, 2, 3], "flags": [1, 2]}, "takes integers"),
        (
            {"rows": 1, "scale": 1, "origin": [1, 2, 3], "flags": [1, 2], "cols": 3},
            "fields.cols: struct Params has no such field; its fields are rows, scale",
        ),
    ],
)
def test_it_names_the_field_that_does_not_fit(values: dict, fragment: str) -> None:
    with pytest.raises(LayoutError) as caught:
        struct_layout(PARAMS, "Params").pack(values)

    assert fragment in str(caught.value)


def test_it_describes_bytes_field_by_field_and_a_short_buffer() -> None:
    layout = struct_layout(PARAMS, "Params")
    data = layout.pack({"rows": 24, "scale": 0.5, "origin": [1, 2, 3], "flags": [7, 8]})

    whole = layout.describe(data)
    short = layout.describe(data[:12])

    assert [f["values"] for f in whole["fields"]] == [[24], [0.5], [1.0, 2.0, 3.0], [7, 8]]
    assert whole["given"] == 48 and whole["struct"] == "Params"
    # 12 bytes for a 48-byte struct (the showcase's matmul v2 bug): origin never arrives.
    assert short["given"] == 12
    assert [f["values"] for f in short["fields"]] == [[24], [0.5], [], []]


def test_it_finds_the_struct_bound_at_a_binding() -> None:
    assert binding_type(PARAMS, 0, 3) == "Params"
    assert binding_type(PARAMS, 0, 0) is None


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("struct P { on: bool }", "bool cannot be shared"),
        ("struct P { xs: array<f32> }", "no fixed size"),
        ("struct P { xs: array<f32, N> }", "unknown size"),
        ("struct P { q: Missing }", "no struct or type named Missing"),
        ("struct P { h: vec2h }", "vec2<f16> cannot be laid out"),
        ("struct Q { x: u32 }", "no struct or type named P"),
        ("alias P = u32;", "P is not a struct"),
    ],
)
def test_it_says_what_it_cannot_lay_out(source: str, fragment: str) -> None:
    with pytest.raises(LayoutError) as caught:
        struct_layout(source, "P")

    assert fragment in str(caught.value)


def test_each_struct_is_laid_out_once_however_often_it_is_used(monkeypatch) -> None:
    # Five levels of sixteen members each, used forty times: laid out per use, a few
    # million struct layouts before the size check could refuse it (64 s).
    source = "struct S0 { a: f32 }\n" + "".join(
        f"struct S{i} {{ {', '.join(f'm{j}: S{i - 1}' for j in range(16))} }}\n"
        for i in range(1, 5)
    )
    source += f"struct P {{ {', '.join(f'p{j}: S4' for j in range(40))} }}\n"
    laid_out = []
    real = layout._Types._struct

    def counted(self, name, depth):
        laid_out.append(name)
        return real(self, name, depth)

    monkeypatch.setattr(layout._Types, "_struct", counted)
    with pytest.raises(LayoutError, match="struct P is too large"):
        struct_layout(source, "P")
    assert sorted(laid_out) == ["P", "S0", "S1", "S2", "S3", "S4"]
