"""The shim is read from bytecode compiled once per process (native.py), not parsed again for
every run; where bytecode cannot be read or throws, the context is left as it was, so the
text can be evaluated instead."""

import quickjs

from kernels.engine.host import js, native


def test_the_shim_s_bytecode_leaves_a_working_shim_and_no_global_name():
    code = native.compiled(f"globalThis.{js.SHIM_NAME} = {js.SHIM};", "<input>")
    assert isinstance(code, bytes) and code

    script = js.Script("console.log(1 + 1);", deadline=float("inf"), heap_bytes=64 << 20)
    script.start()
    script.run_jobs()

    assert script.context.eval(f"typeof globalThis.{js.SHIM_NAME}") == "undefined"
    assert [line["text"] for line in script.console()["lines"]] == ["2"]


def test_bytecode_that_cannot_be_read_leaves_the_context_usable():
    context = quickjs.Context()

    assert native.run_compiled(context, b"\x00not bytecode") is False
    assert context.eval("6 * 7") == 42


def test_bytecode_that_throws_is_reported_and_the_context_stays_usable():
    code = native.compiled("globalThis.half = 1; throw new Error('no');", "<input>")
    assert code is not None
    context = quickjs.Context()

    assert native.run_compiled(context, code) is False
    assert context.eval("half + 1") == 2


def test_text_that_does_not_compile_gives_no_bytecode():
    assert native.compiled("let = = ;", "<input>") is None
