"""A program that attacks the shim it shares a realm with (#23): it replaces the built-ins
the shim uses, pollutes prototypes, forges ids and sizes, reaches for the shim's own
functions. The record Python reads stays the shim's, and a record that is not a valid call is
refused as the program's error with its line, never with a Python exception's text."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from kernels.engine.device import Environment
from kernels.engine.host.encoder import ENCODER_OPS
from kernels.engine.host.gpu import OPERATIONS, HostError, Timeline
from kernels.engine.host.program import ProgramResult, program_outcome, run_program
from kernels.engine.host.record import SCHEMA
from kernels.engine.limits import DEFAULT_LIMITS
from tests.kernels.test_host_program import VECTOR_ADD, vector_add_expected

PYTHON_EXCEPTIONS = ("Traceback", "AttributeError", "TypeError: string", "KeyError", "ValueError")


def outcome_text(result: ProgramResult, env: Environment) -> str:
    return json.dumps(program_outcome(result, env, vector_add_expected()))


def assert_no_python(text: str) -> None:
    for name in PYTHON_EXCEPTIONS:
        assert name not in text


@pytest.mark.parametrize(
    "attack",
    [
        # The record was JSON.stringify's to write: a program that replaced it wrote the record.
        'JSON.stringify = () => \'{"record":[{"op":"__init__","line":1}],"blobs":0,'
        '"state":"done","error":null,"pending":0,"timers":0}\';',
        "Object.prototype.toJSON = function () { return { op: '__init__' }; };",
        "Array.prototype.toJSON = function () { return 'forged'; };",
        "Array.prototype.push = function () { return 0; };",
        "Array.prototype.join = () => 'forged'; String.prototype.split = () => ['at x (<input>:1)'];",
        "Map.prototype.set = function () { return this; }; Map.prototype.get = () => undefined;",
        "WeakMap.prototype.get = () => ({ kind: 'GPUBuffer', id: 1 });",
        "Function.prototype.call = function () { return 'forged'; };",
        "Promise.prototype.then = function () { return this; };",
        "Object.defineProperty(Object.prototype, 'size', { set() {} });",
        "Object.defineProperty(Object.prototype, 'id', { set() {} });",
        "Object.defineProperty(Object.prototype, 'request', { set() {} });",
        "Object.defineProperty(Object.prototype, 'mapping', { set() {} });",
        "RegExp.prototype.exec = () => null;",
    ],
)
def test_a_program_that_replaces_what_the_shim_uses_still_runs_as_written(run, gpu, attack):
    result = run(attack + "\n" + VECTOR_ADD)

    assert result.error is None, result.error
    [readback] = result.readbacks
    np.testing.assert_array_equal(np.frombuffer(readback.data, np.float32), np.arange(1000) * 3)
    assert program_outcome(result, gpu[1], vector_add_expected())["status"] == "passed"


def test_the_shim_s_functions_are_not_reachable_from_the_program(run):
    source = (
        "console.log(typeof shim, typeof globalThis.__host, Object.keys(__host).join());\n"
        # The name the shim's bytecode leaves its function under, deleted before the program.
        "console.log(typeof __kernelbinShim, '__kernelbinShim' in globalThis);\n"
        "__host.console = () => 'x'.repeat(20 * 1024 * 1024);\n"
        "__host.take = () => 'forged';\n"
        "console.log(typeof __host.console, typeof __host.take);\n"
    )

    result = run(source)

    assert result.error is None
    assert [line["text"] for line in result.console] == [
        "undefined undefined floating,at",
        "undefined false",
        "undefined undefined",
    ]


def test_an_object_made_to_look_like_a_buffer_is_refused_as_a_browser_does(run, gpu):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "const real = device.createBuffer({ size: 16, usage: GPUBufferUsage.COPY_DST });\n"
        "real.__id = 9999;\n"
        "device.queue.writeBuffer(real, 0, new Float32Array(4));\n"
        "device.queue.writeBuffer({ __id: 1, size: 1 << 30 }, 0, new Float32Array(4));\n"
    )

    result = run(source)

    assert result.error is not None
    assert result.error["line"] == 5
    assert "is not a GPUBuffer created by this device" in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "threw"


def test_a_size_read_twice_is_read_once(run):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "let reads = 0;\n"
        "const buffer = device.createBuffer({ get size() { return reads++ ? 256 * 1024 ** 3 : 16; },"
        " usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });\n"
        "Object.defineProperty(GPUBuffer.prototype, 'size', { get() { return 256 * 1024 ** 2; } });\n"
        "await buffer.mapAsync(GPUMapMode.READ);\n"
        "console.log(buffer.getMappedRange().byteLength);\n"
    )

    result = run(source)

    assert result.error is None, result.error
    assert result.trace is not None
    assert [b["size"] for b in result.trace["buffers"]] == [16]
    assert result.console[-1]["text"] == "16"


def test_six_buffers_of_256_mib_are_refused_at_the_first_before_it_is_made(run, gpu):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "for (let i = 0; i < 6; i++)\n"
        "  device.createBuffer({ size: 256 * 1024 * 1024, usage: GPUBufferUsage.UNIFORM });\n"
    )

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "limit"
    assert result.error["line"] == 3
    assert result.trace is not None and result.trace["buffers"] == []


def test_json_stringify_of_a_value_nested_100000_deep_is_a_range_error_not_a_crash(run):
    source = (
        "let deep = {};\n"
        "for (let i = 0; i < 100000; i++) deep = { a: deep };\n"
        "console.log(JSON.stringify({ a: 1 }), JSON.stringify([1, 2], null, 1).length);\n"
        "JSON.stringify(deep);\n"
    )

    result = run(source)

    assert result.console[0]["text"] == '{"a":1} 10'
    assert result.error is not None
    assert result.error["line"] == 4
    assert "stack overflow" in result.error["message"]


def test_a_deeply_nested_value_passed_to_a_webgpu_call_is_its_error_not_a_crash(run, gpu):
    source = (
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
        "let deep = {};\n"
        "for (let i = 0; i < 100000; i++) deep = { a: deep, label: deep };\n"
        "const module = device.createShaderModule({ code: '@compute @workgroup_size(1) fn main() {}' });\n"
        "device.createComputePipeline({ label: deep, layout: 'auto',\n"
        "  compute: { module, entryPoint: 'main', constants: deep } });\n"
    )

    result = run(source)

    assert result.error is not None
    # QuickJS names the line where the call's arguments end.
    assert result.error["line"] == 6
    assert "constant 'a' is not a finite number" in result.error["message"]
    assert_no_python(json.dumps(program_outcome(result, gpu[1])))


@pytest.mark.parametrize(
    ("thrown", "shown"),
    [("null", "null"), ("42", "42"), ("'oops'", '"oops"'), ("undefined", "undefined")],
)
def test_a_value_that_is_not_an_error_is_named_as_thrown(run, gpu, thrown, shown):
    result = run(f"await navigator.gpu.requestAdapter();\nthrow {thrown};\n")

    assert result.error is not None
    assert result.error["line"] == 2
    assert result.error["message"].startswith(f"The program threw {shown} at line 2:")
    assert "Uncaught" not in result.error["message"]
    assert program_outcome(result, gpu[1])["status"] == "threw"


def test_many_small_objects_end_as_out_of_memory_not_threw_null(gpu):
    device, env = gpu
    source = "const kept = [];\nwhile (true) kept.push({ i: kept.length });\n"

    result = run_program(device, env, source, heap_bytes=32 * 1024 * 1024)

    assert result.error is not None
    assert result.error["kind"] == "memory"
    assert "null" not in result.error["message"]


# -- the record, checked in Python --------------------------------------------------------------


def test_every_operation_in_the_schema_has_a_method_and_no_other(gpu):
    assert set(OPERATIONS) | ENCODER_OPS == set(SCHEMA)


def fresh_timeline(gpu) -> Timeline:
    device, env = gpu
    return Timeline(device, env, DEFAULT_LIMITS, {}, False, "line one\nline two\nline three\n")


def no_blob(index: int) -> bytes | None:
    return None


BUFFER = {
    "op": "createBuffer",
    "line": 2,
    "id": 1,
    "label": "",
    "size": 16,
    "usage": 0x8,
    "mappedAtCreation": False,
    "caller": None,
}


@pytest.mark.parametrize(
    "forged",
    [
        {"op": "__init__", "line": 2},
        {"op": "apply", "line": 2},
        {"op": "release", "line": 2},
        {**BUFFER, "size": "268435456"},
        {**BUFFER, "size": 16.5},
        {**BUFFER, "size": -1},
        {**BUFFER, "size": True},
        {**BUFFER, "size": 2**60},
        {**BUFFER, "usage": None},
        {**BUFFER, "label": "x" * 1_000_000},
        {**BUFFER, "extra": 1},
        {k: v for k, v in BUFFER.items() if k != "size"},
        {**BUFFER, "id": 0},
        {**BUFFER, "caller": ["f", "2"]},
        {"op": "writeBuffer", "line": 2, "buffer": 77, "offset": 0, "blob": 0, "dtype": "f32"},
        {
            "op": "mapAsync",
            "line": 2,
            "request": 1,
            "buffer": 1,
            "mode": 1,
            "offset": 0,
            "size": "4",
        },
        {"op": "submit", "line": 2, "commandBuffers": "abc"},
        {"op": "submit", "line": 2, "commandBuffers": [1]},
        {"op": "fetch", "line": 2, "request": 1, "url": ["x"]},
        {"op": "dispatchWorkgroups", "line": 2, "encoder": 1, "pass": 2, "workgroups": [1, 1]},
        ["not", "a", "call"],
        {
            "op": "createBuffer",
            "line": "2",
            **{k: v for k, v in BUFFER.items() if k not in ("op", "line")},
        },
    ],
)
def test_a_forged_record_entry_is_refused_before_anything_is_made(gpu, forged):
    timeline = fresh_timeline(gpu)

    with pytest.raises(HostError) as refused:
        timeline.apply(forged, no_blob)

    assert refused.value.kind == "record"
    assert refused.value.line in (2, None)
    assert timeline.objects == {}
    assert_no_python(refused.value.message)


def test_an_id_of_the_wrong_kind_is_refused(gpu):
    timeline = fresh_timeline(gpu)
    timeline.apply(dict(BUFFER), no_blob)

    with pytest.raises(HostError) as refused:
        timeline.apply({"op": "submit", "line": 3, "commandBuffers": [1]}, no_blob)

    assert refused.value.kind == "record"
    assert "is not a GPUCommandBuffer made by this program" in refused.value.message


def test_missing_or_outsized_data_is_refused_at_its_line(gpu):
    timeline = fresh_timeline(gpu)
    timeline.apply(dict(BUFFER), no_blob)
    write = {"op": "writeBuffer", "line": 3, "buffer": 1, "offset": 8, "blob": 0, "dtype": "u8"}

    with pytest.raises(HostError) as missing:
        timeline.apply(dict(write), no_blob)
    with pytest.raises(HostError) as outsized:
        timeline.apply(dict(write), lambda index: bytes(16))

    assert missing.value.kind == "record"
    assert outsized.value.kind == "validation"
    assert outsized.value.line == 3
    assert "runs past the end of buffer" in outsized.value.message


def test_a_refused_record_is_the_program_s_error_with_its_line(gpu):
    timeline = fresh_timeline(gpu)
    from kernels.engine.host.program_errors import host_error

    with pytest.raises(HostError) as refused:
        timeline.apply({"op": "__init__", "line": 2}, no_blob)
    error = host_error(refused.value)

    assert error["line"] == 2
    assert error["message"].startswith("Line 2")
    result = ProgramResult(error=error)
    assert program_outcome(result, gpu[1])["status"] == "threw"


def test_an_inherited_size_reaches_webgpu_as_in_a_browser_and_fails_at_its_line(run, gpu):
    # WebIDL reads a descriptor's inherited properties too: the binding's size is 2**40 here
    # as it would be in a browser, and the bind group is refused.
    attack = "Object.defineProperty(Object.prototype, 'size', { get() { return 2 ** 40; } });\n"

    result = run(attack + VECTOR_ADD)

    assert result.error is not None
    assert result.error["call"] == "device.createBindGroup"
    assert result.error["line"] == 1 + next(
        n for n, line in enumerate(VECTOR_ADD.splitlines(), start=1) if "createBindGroup" in line
    )
    assert_no_python(outcome_text(result, gpu[1]))


def test_the_record_grows_linearly_with_the_calls_a_program_makes(gpu):
    # QuickJS copies a string on every `+=`: a record appended to one string took 125 s
    # for 100,000 calls. The shim gathers text in lists.
    from tests.growth import growth_problem

    device, env = gpu

    def make(n: int) -> str:
        return (
            "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
            "const buffer = device.createBuffer({ size: 4, usage: GPUBufferUsage.COPY_DST });\n"
            f"for (let i = 0; i < {n}; i++) device.queue.writeBuffer(buffer, 0, new Uint32Array([i]));\n"
            f"console.log('x'.repeat(100), {n});\n"
        )

    def work(source: str) -> object:
        result = run_program(device, env, source)
        assert result.error is None, result.error
        return result

    assert not growth_problem("record", work, make, 400)


def test_a_long_sort_keeps_the_default_order(run):
    source = (
        "const t = new Float64Array((1 << 18) + 8).fill(5);\n"
        "t[0] = NaN; t[1] = 0; t[2] = -0; t[3] = -7; t[4] = Infinity;\n"
        "t.sort();\n"
        "console.log(t[0], Object.is(t[1], -0), Object.is(t[2], 0), t[3], t[t.length - 2], t[t.length - 1]);\n"
    )

    result = run(source)

    assert result.error is None, result.error
    assert [line["text"] for line in result.console] == ["-7 true true 5 Infinity NaN"]


def test_the_deadline_is_kept_on_the_wall_clock():
    from kernels.engine.host.js import Script

    assert Script("", 0.0, 1 << 20).clock.usable


def test_a_throw_is_marked_with_its_line_and_nothing_else_is_touched():
    from kernels.engine.host.js import mark_throws

    source = (
        "const r = a / 2 / b, re = /throw\\//g, s = 'throw', t = `throw ${x ? 'throw' : `${y}`}`;\n"
        "// throw\n/* throw\n */ x.throw(1);\n"
        "if (bad) throw x ?? new Error('throw');\n"
    )

    marked = mark_throws(source)

    assert marked == source.replace("if (bad) throw ", "if (bad) throw __host.at(5), ")


def test_marking_throws_takes_time_linear_in_the_text():
    from kernels.engine.host.js import mark_throws
    from tests.growth import growth_problem

    for piece in ("throw  x;\n", "`${`${'", "/* a */ /[/]/ ", "x.\n" + " " * 50):
        assert not growth_problem(repr(piece), mark_throws, piece.__mul__, 2000)


MAPPED = (
    "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
    "const read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ });\n"
)


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("await 0;\nlet spins = 0;\nfor (;;) spins++;\n", (2, 3)),
        ("await Promise.resolve().then(() => {\n  for (;;) Math.sqrt(2);\n});\n", (2,)),
        ("setTimeout(() => {\n  for (;;) Math.sqrt(2);\n}, 10);\n", (2,)),
        ("async function main() {\n  await 0;\n  for (;;) Math.sqrt(2);\n}\nmain();\n", (2, 3)),
        # A dropped then() callback: its interruption rejects a promise nobody holds.
        (
            MAPPED + "read.mapAsync(GPUMapMode.READ).then(() => {\n  for (;;) Math.sqrt(2);\n});\n",
            (None,),
        ),
    ],
)
def test_an_endless_loop_anywhere_ends_at_the_deadline(gpu, source, lines):
    device, env = gpu

    result = run_program(device, env, source, deadline=time.monotonic() + 1.0)

    assert result.error is not None
    assert result.error["kind"] == "timeout"
    # QuickJS knows the line of a loop, or after an await the line before it.
    assert result.error["line"] in lines


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (
            "device.createShaderModule({ code: 'x'.repeat(2 * 1024 * 1024) });",
            "over Kernelbin's limit",
        ),
        (
            "device.createBindGroupLayout({ entries: [{ binding: 0, visibility: 4,"
            " buffer: { type: 'mystery' } }] });",
            "'mystery' is not a valid GPUBufferBindingType",
        ),
    ],
)
def test_a_call_the_record_could_not_carry_is_refused_at_its_line_in_words(run, call, said):
    result = run(
        "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n" + call
    )

    assert result.error is not None
    assert result.error["line"] == 2
    assert said in result.error["message"]
