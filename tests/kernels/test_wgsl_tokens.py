"""WGSL read by one tokenizer, in time that grows linearly with the source.

The attack family is the one that froze the web process with a backtracking regular
expression: runs of attributes not followed by fn, unclosed and deeply nested block
comments, long runs of "(", long identifiers and long lines of blankspace, and their
cousins for the other readers (constant chains, nested types, nested blocks). Growth is
asserted by counting steps, not by timing: doubling the input at most doubles the work.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kernels.engine import analysis, uniformity, wgsl
from kernels.engine.webgpu import workgroup_storage

SHOWCASE = Path(__file__).resolve().parents[2] / "fixtures/showcase/gpu-inference-from-scratch.json"
SIZES = (1000, 2000, 4000, 8000, 16000)  # characters
GROWTH = 2.2

ENTRY = "@compute @workgroup_size(64)\nfn main(@builtin(local_invocation_id) lid: vec3<u32>) {"


def steps(source: str) -> int:
    """Every reader's steps over one source: tokens, declarations, constants, the facts
    for the reviewer, workgroup storage and the uniformity analysis."""
    wgsl.parse.cache_clear()
    module = wgsl.parse(source)
    for function in module.functions:
        wgsl.workgroup_dimensions(module, function)
    wgsl.declared_bindings(source)
    analysis.source_facts(source)
    workgroup_storage(module, "")
    _, uniformity_steps = uniformity.find_error("self", source)
    return module.steps + uniformity_steps


def times(unit: str, size: int) -> str:
    """The unit repeated to about size characters."""
    return unit * max(1, size // len(unit))


# Each makes a source of about n characters.
ATTACKS: dict[str, Callable[[int], str]] = {
    "attributes without fn": lambda n: times("@compute @workgroup_size(8, 8)\n", n) + "f",
    "bare attributes": lambda n: times("@a ", n),
    "attributes with empty arguments": lambda n: "@compute" + times(" @x()", n) + " fm main",
    "unclosed block comments": lambda n: times("/*", n),
    "nested block comments": lambda n: (
        times("/*", n // 2) + "@compute fn f() {}" + times("*/", n // 2)
    ),
    "comment ends without starts": lambda n: times("*/", n // 2) + times("/**/", n // 2),
    "parentheses in an attribute": lambda n: "@compute @workgroup_size(" + "(" * n + "8",
    "closed parentheses in an attribute": lambda n: (
        "@compute @workgroup_size(" + "(" * (n // 2) + "8" + ")" * (n // 2) + ") fn main() {}"
    ),
    "parentheses in a body": lambda n: f"{ENTRY} let x = " + "(" * n + "lid.x;}",
    "minus signs": lambda n: "@compute @workgroup_size(" + "-" * n + "1) fn main() {}",
    "a long identifier": lambda n: "fn " + "a" * n + "() {}",
    "long identifiers": lambda n: "var<workgroup> " + times("abcdefghij ", n),
    "blankspace": lambda n: "@" + " " * n + "compute fn main() {}",
    "newlines": lambda n: "\n" * n + "@compute @workgroup_size(1) fn main() {}",
    "digits": lambda n: "const x = " + "0" * n + ";",
    "exponents": lambda n: "const x = 1" + times("e+1", n) + ";",
    "constant chain": lambda n: (
        "const a0 = 1u;\n"
        + "".join(f"const a{i} = a{i - 1} + 1u;\n" for i in range(1, n // 25))
        + f"@compute @workgroup_size(a{n // 25 - 1}) fn main() {{}}"
    ),
    "nested array types": lambda n: (
        "var<workgroup> w: " + times("array<", n // 2) + "f32" + times(", 2>", n // 2) + ";"
    ),
    "struct of structs": lambda n: (
        "struct S0 { a: f32 }\n"
        + "".join(f"struct S{i} {{ a: S{i - 1}, b: S{i - 1} }}\n" for i in range(1, n // 35))
        + f"var<workgroup> w: S{n // 35 - 1};\n@compute @workgroup_size(1) fn main() {{ w.a; }}"
    ),
    "nested blocks": lambda n: ENTRY + "{" * (n // 2) + "workgroupBarrier();" + "}" * (n // 2),
    "nested branches": lambda n: (
        ENTRY
        + times("if (lid.x == 0u) {", n // 2)
        + times("return;", n // 4)
        + "}" * (n // 36)
        + "workgroupBarrier(); }"
    ),
    "branch chain": lambda n: (
        ENTRY + times("if (lid.x == 0u) { workgroupBarrier(); } else ", n) + "{ } }"
    ),
    "loops": lambda n: ENTRY + times("for (var i = 0u; i < lid.x; i++) { break; }", n) + "}",
    "nested writes": lambda n: (
        "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n"
        + ENTRY
        + times("out[", n // 2)
        + "0"
        + "]" * (n // 8)
        + " = 1u; }"
    ),
    "workgroup memory": lambda n: (
        "var<workgroup> w: array<f32, 64>;\n"
        + ENTRY
        + times("w[lid.x] = w[lid.x + 1u] + w[0];", n)
        + "}"
    ),
    "many locals": lambda n: (
        ENTRY + "".join(f"let v{i} = lid.x + {i}u;" for i in range(n // 25)) + "}"
    ),
    "unclosed braces": lambda n: ENTRY + "{" * n,
}


@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
def test_the_work_grows_linearly_with_the_attack(attack: str) -> None:
    sources = [ATTACKS[attack](n) for n in SIZES]
    assert all(n / 2 < len(source) < 2 * n + 200 for n, source in zip(SIZES, sources, strict=True))
    counted = [steps(source) for source in sources]
    for smaller, larger in itertools.pairwise(counted):
        assert larger <= GROWTH * smaller, f"{attack}: {counted}"


def test_the_backtracking_pattern_of_old_is_a_few_steps_a_character() -> None:
    # "((?:@\w+\s*(?:\([^()]*\))?\s*)+)fn\s+(\w+)" took seconds on 30 attributes.
    source = "@a " * 30 + "f"
    assert wgsl.tokenize(source).steps == len(source)
    assert steps(source) < 10 * len(source)
    assert wgsl.entry_points("@compute" + " @x()" * 18 + " fm main") == []


def test_constants_stay_within_64_bits() -> None:
    # Each constant squares the one before: without a bound, the 40th would have about
    # 2**40 digits (the 20th took 27 s to compute).
    chain = "const a0 = 0xffffffffffffffffu;\n" + "".join(
        f"const a{i} = a{i - 1} * a{i - 1};\n" for i in range(1, 40)
    )
    assert wgsl.workgroup_size(chain + "@compute @workgroup_size(a39) fn main() {}", "main") == 1
    assert wgsl.int_literal("0x" + "f" * 20_000) is None
    assert wgsl.int_literal("18446744073709551615u") == 2**64 - 1
    source = "const n = 8u * 8u;\n@compute @workgroup_size(n, 0x2) fn main() {}"
    assert wgsl.workgroup_size(source, "main") == 128


# -- the tokens --------------------------------------------------------------------------------


def test_block_comments_nest() -> None:
    source = "/* a /* b */ @compute fn hidden() {} */\n@compute @workgroup_size(2) fn shown() {}"
    assert wgsl.entry_points(source) == ["shown"]
    assert wgsl.entry_points("/* /* */ @compute fn hidden() {}") == []


def test_tokens_know_their_line_and_column() -> None:
    tokens = wgsl.tokenize("// note\n  let x = 1.5e-3f;\n/* two\nlines */ y").tokens
    assert [(t.kind, t.text, t.line, t.column) for t in tokens] == [
        ("ident", "let", 2, 3),
        ("ident", "x", 2, 7),
        ("punct", "=", 2, 9),
        ("number", "1.5e-3f", 2, 11),
        ("punct", ";", 2, 18),
        ("ident", "y", 4, 10),
    ]


def test_template_lists_close_one_bracket_at_a_time() -> None:
    texts = [t.text for t in wgsl.tokenize("array<vec4<f32>>= a && b -> c").tokens]
    assert texts == ["array", "<", "vec4", "<", "f32", ">", ">", "=", "a", "&&", "b", "->", "c"]


# -- what is read from the tokens --------------------------------------------------------------

MODULE = """
const TILE = 16u;
const HALF: u32 = TILE / 2;
override WG: u32 = 0x40;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@binding(2) @group(0) var<uniform> params: Params;
var<workgroup> tile: array<array<f32, TILE>, TILE>;
@compute @workgroup_size(TILE, HALF)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  for (var i = 0u; i < params.n; i++) { out[gid.x * 2u + i] = tile[0][i]; }
}
@compute @workgroup_size(WG) fn other() {}
@compute @workgroup_size(UNKNOWN) fn unknown() {}
"""


def test_it_reads_entry_points_sizes_and_bindings() -> None:
    assert wgsl.entry_points(MODULE) == ["main", "other", "unknown"]
    assert wgsl.workgroup_size(MODULE, "main") == 128
    assert wgsl.workgroup_size(MODULE, "other") == 64
    assert wgsl.workgroup_size(MODULE, "unknown") == 1  # cannot tell: the deadline decides
    assert wgsl.workgroup_size(MODULE, "") == 128  # a pipeline that names no entry point
    assert wgsl.declared_bindings(MODULE) == [(0, 1, "out"), (0, 2, "params")]


def test_the_facts_for_the_reviewer() -> None:
    facts = analysis.source_facts(MODULE)
    main = facts["entry_points"][0]
    assert main["workgroup_size"] == [16, 8, 1]
    assert main["workgroup_storage"] == 16 * 16 * 4
    assert main["builtins"] == {"gid": "global_invocation_id"}
    # The store is inside a loop: something can keep an invocation from it.
    assert main["writes"] == [
        {"buffer": "out", "index": "gid.x * 2u + i", "line": 10, "guarded": True}
    ]
    # Its count is known only from params.n as a run writes it: the run works it out.
    count = {"first": "0u", "bound": "params . n", "step": "1", "inclusive": 0}
    assert main["loops"] == [
        {
            "kind": "for",
            "line": 10,
            "condition": "i < params.n",
            "iterations": None,
            "count": count,
        }
    ]
    assert facts["entry_points"][2]["workgroup_size"] is None
    assert facts["bindings"][0] == {
        "group": 0,
        "binding": 1,
        "name": "out",
        "address_space": "storage",
        "access": "read_write",
        "type": "array<f32>",
    }


MNIST_BUFFERS = ("x", "w1", "b1", "w2", "b2", "hidden", "logits", "probs")
# Read with the regular expressions this module replaces, before it replaced them.
SHOWCASE_FACTS = [
    (("add-v1", "add-v2"), {"main": 64}, [(0, 0, "a"), (0, 1, "b"), (0, 2, "out")], False),
    (
        ("forward-v1", "forward-v2", "forward-v3", "forward-v4"),
        {"dense": 64},
        [(0, 0, "dims"), (0, 1, "a"), (0, 2, "w"), (0, 3, "bias"), (0, 4, "out")],
        True,
    ),
    (
        ("matmul-v1", "matmul-v2", "matmul-v3", "matmul-v4"),
        {"main": 64},
        [(0, 0, "dims"), (0, 1, "a"), (0, 2, "b"), (0, 3, "c")],
        True,
    ),
    (
        ("mnist-v1", "mnist-v2", "mnist-v3"),
        {"layer1": 64, "layer2": 64, "softmax": 64},
        [(0, i, name) for i, name in enumerate(MNIST_BUFFERS)],
        True,
    ),
    (("relu-v1", "relu-v2", "scale-v2"), {"main": 64}, [(0, 0, "x"), (0, 1, "y")], False),
    (("scale-v1",), {"main": 64}, [(0, 0, "x")], False),
    (
        ("softmax-v1", "softmax-v2", "softmax-v3", "softmax-v4"),
        {"main": 64},
        [(0, 0, "params"), (0, 1, "x"), (0, 2, "y")],
        True,
    ),
]


def test_the_showcase_reads_as_it_did() -> None:
    data = json.loads(SHOWCASE.read_text(encoding="utf-8"))
    sources = {
        f"{kernel['name']}-v{version['number']}": version["source"]
        for kernel in data["kernels"]
        for version in kernel["versions"]
    }
    assert sorted(sources) == sorted(name for names, *_ in SHOWCASE_FACTS for name in names)
    for names, sizes, bindings, loops in SHOWCASE_FACTS:
        for name in names:
            source = sources[name]
            assert wgsl.entry_points(source) == list(sizes), name
            assert wgsl.entry_points(source) == list(sizes), name
            assert {e: wgsl.workgroup_size(source, e) for e in sizes} == sizes, name
            assert sorted(wgsl.declared_bindings(source)) == bindings, name
            facts = analysis.source_facts(source)
            assert any(e["loops"] for e in facts["entry_points"]) == loops, name
            assert uniformity.uniformity_error("self", source) is None, name
