"""Errors a browser's console would show, shown: a rejection nobody awaited is "Uncaught (in
promise)" with its line, a failed fetch names its path and line, a missing API names itself
and its line, whatever the indentation of the call that started it. Real QuickJS and wgpu."""

from __future__ import annotations

from kernels.engine.host.program import program_outcome

# The end of a learner's index.html: an async main, called at the script's end without
# await, indented as it sits in its <script> tag.
PAGE = """  async function main() {
    const adapter = await navigator.gpu.requestAdapter();
    const device = await adapter.requestDevice();
    console.log("device ready");
    const canvas = document.getElementById("draw");
    const context = canvas.getContext("2d");
    context.fillRect(0, 0, 28, 28);
  }

  main();
"""


def test_an_indented_call_not_awaited_reports_its_rejection_as_uncaught(run, gpu):
    result = run(PAGE)

    assert [line["text"] for line in result.console] == ["device ready"]
    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("unsupported", 6)
    assert result.error["message"].startswith(
        "Line 6: Uncaught (in promise) NotSupportedError: #draw.getContext is not available"
    )
    outcome = program_outcome(result, gpu[1])
    assert outcome["status"] == "rejected"
    assert "getContext" in outcome["message"]
    assert "onclick" not in outcome["message"]


def test_a_throw_inside_a_function_called_without_await_names_its_line(run):
    source = (
        "async function main() {\n"
        "  await navigator.gpu.requestAdapter();\n"
        '  throw new Error("no weights");\n'
        "}\n"
        "if (navigator.gpu) {\n"
        "    main();\n"
        "}\n"
    )

    error = run(source).error

    assert error is not None
    assert (error["kind"], error["line"]) == ("javascript", 3)
    assert error["message"] == "Line 3: Uncaught (in promise) Error: no weights"


def test_a_failed_fetch_not_awaited_names_the_path_and_the_line(run):
    source = (
        "async function load() {\n"
        '  const response = await fetch("weights/w1.bin");\n'
        "  return new Float32Array(await response.arrayBuffer());\n"
        "}\n"
        "async function main() {\n"
        "  const w1 = await load();\n"
        "  console.log(w1.length);\n"
        "}\n"
        "  main();\n"
    )

    error = run(source).error

    assert error is not None
    assert error["line"] == 2
    assert error["message"] == (
        "Line 2: Uncaught (in promise) TypeError: Failed to fetch weights/w1.bin: no file "
        "of that name is attached to the session"
    )


def test_a_failed_fetch_that_is_caught_still_names_its_path(run):
    source = (
        "try {\n"
        '  await fetch("https://example.com/w.bin");\n'
        "} catch (e) {\n"
        "  console.log(e.message);\n"
        "}\n"
    )

    result = run(source)

    assert result.error is None
    assert result.console[0]["text"] == (
        "Failed to fetch https://example.com/w.bin: a replay reaches no network, only the "
        "files attached to its session"
    )


def test_the_script_goes_on_past_a_call_not_awaited_as_in_a_browser(run):
    source = (
        "async function main() {\n"
        "  await navigator.gpu.requestAdapter();\n"
        '  console.log("main done");\n'
        "}\n"
        "main();\n"
        'console.log("script done");\n'
        'window.addEventListener("load", () => console.log("load"));\n'
    )

    result = run(source)

    assert result.error is None
    # The page's events come after the dropped call ends, as they came after the program.
    assert [line["text"] for line in result.console] == ["script done", "main done", "load"]


def test_an_async_timer_callback_that_rejects_is_uncaught(run):
    source = (
        "async function tick() {\n  await null;\n  undefinedThing.go();\n}\nsetTimeout(tick, 10);\n"
    )

    error = run(source).error

    assert error is not None
    assert error["line"] == 3
    assert error["message"].startswith("Line 3: Uncaught (in promise) ReferenceError:")


def test_a_call_that_continues_an_expression_is_left_alone(run):
    source = (
        "async function main() {\n"
        "  return 7;\n"
        "}\n"
        "const value = await\n"
        "  main();\n"
        "console.log(value);\n"
    )

    result = run(source)

    assert result.error is None
    assert result.console[0]["text"] == "7"
