"""A teaching page's script, run without its page: the inert DOM of page.js. Text written
into elements is captured with the console as page text; the page's load handlers and one
click of its button run; anything else of the DOM fails naming its line. Real QuickJS and
wgpu (llvmpipe here)."""

from __future__ import annotations

import numpy as np

from kernels.engine.host.program import ProgramResult, program_outcome
from tests.kernels.test_host_program import ADD_WGSL

# The inline scripts of a learner's index.html, joined: a status line, an output <pre>, a
# Run button that starts the work and a Reset button, a table built with createElement.
TEACHING_PAGE = (
    """const statusLine = document.getElementById("status");
const out = document.querySelector("#out");
const runButton = document.getElementById("run");

function show(message) {
  out.textContent += message + "\\n";
}

async function run() {
  runButton.disabled = true;
  statusLine.textContent = "Asking for a GPU…";
  if (!navigator.gpu) {
    statusLine.textContent = "This browser has no WebGPU.";
    return;
  }
  const adapter = await navigator.gpu.requestAdapter();
  const device = await adapter.requestDevice();
  const n = 256;
  const a = new Float32Array(n).map((_, i) => i);
  const b = new Float32Array(n).map((_, i) => 2 * i);
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;
  const bufA = device.createBuffer({ label: "a", size: a.byteLength, usage });
  const bufB = device.createBuffer({ label: "b", size: b.byteLength, usage });
  const outBuf = device.createBuffer({ label: "out", size: a.byteLength, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ size: a.byteLength, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(bufA, 0, a);
  device.queue.writeBuffer(bufB, 0, b);
  const module = device.createShaderModule({ code: `"""
    + ADD_WGSL
    + """` });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const bindGroup = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [bufA, bufB, outBuf].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(Math.ceil(n / 64));
  pass.end();
  encoder.copyBufferToBuffer(outBuf, 0, read, 0, a.byteLength);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  const result = new Float32Array(read.getMappedRange().slice(0));
  read.unmap();
  show(`out[0..3] = ${Array.from(result.slice(0, 4)).join(", ")}`);
  const table = document.createElement("table");
  const row = document.createElement("tr");
  row.innerHTML = `<td>out[255]</td><td>${result[255]}</td>`;
  table.appendChild(row);
  document.body.appendChild(table);
  statusLine.textContent = "Done.";
  runButton.disabled = false;
}

runButton.addEventListener("click", run);
document.getElementById("reset").addEventListener("click", () => {
  out.textContent = "";
});
window.addEventListener("load", () => {
  statusLine.textContent = "Ready: press Run.";
});
"""
)


def page_lines(result: ProgramResult) -> list[tuple[str, int | None]]:
    return [(line["text"], line["line"]) for line in result.console if line["level"] == "page"]


def test_a_teaching_page_loads_its_button_is_clicked_once_and_its_text_is_captured(run, gpu):
    result = run(TEACHING_PAGE)

    assert result.error is None
    # Text set through a property has no line (QuickJS knows the line of a call, not of
    # an assignment): see test_alert_and_document_write_are_page_text for lines.
    assert page_lines(result) == [
        ("#status: Ready: press Run.", None),
        ("(clicked #run once, as a reader would)", None),
        ("#status: Asking for a GPU…", None),
        ("#out: out[0..3] = 0, 3, 6, 9\n", None),
        ("<tr>: out[255]765", None),
        ("#status: Done.", None),
        ("(not clicked: #reset; one click runs here)", None),
    ]
    [readback] = result.readbacks
    np.testing.assert_array_equal(
        np.frombuffer(readback.data, dtype=np.float32), np.arange(256) * 3
    )
    assert program_outcome(result, gpu[1])["status"] == "no_reference"


def test_window_onload_starts_the_program(run):
    source = (
        "window.onload = async () => {\n"
        "  const adapter = await navigator.gpu.requestAdapter();\n"
        '  document.getElementById("gpu").innerText = adapter ? "a GPU" : "none";\n'
        "};\n"
    )

    result = run(source)

    assert result.error is None
    assert page_lines(result) == [("#gpu: a GPU", None)]


def test_dom_content_loaded_handlers_run_on_the_document_and_the_window(run):
    source = (
        'document.addEventListener("DOMContentLoaded", () => {\n'
        '  console.log("document");\n'
        "});\n"
        'window.addEventListener("DOMContentLoaded", () => {\n'
        '  console.log("window");\n'
        "});\n"
    )

    result = run(source)

    assert result.error is None
    assert [(line["text"], line["line"]) for line in result.console] == [
        ("document", 2),
        ("window", 5),
    ]


def test_an_error_in_the_click_handler_names_its_line(run):
    source = (
        'document.getElementById("go").onclick = () => {\n'
        "  const adapter = undefined;\n"
        "  adapter.requestDevice();\n"
        "};\n"
    )

    error = run(source).error

    assert error is not None
    assert error["kind"] == "javascript"
    assert error["line"] == 3
    assert "TypeError" in error["message"]


def test_a_canvas_context_is_not_available_on_the_server_naming_the_line(run, gpu):
    source = (
        'const canvas = document.getElementById("view");\n'
        "canvas.width = 28;\n"
        'const context = canvas.getContext("2d");\n'
    )

    result = run(source)

    assert result.error is not None
    assert result.error["kind"] == "unsupported"
    assert result.error["line"] == 3
    assert result.error["message"].startswith(
        "Line 3: NotSupportedError: #view.getContext is not available on the server"
    )
    assert program_outcome(result, gpu[1])["status"] == "rejected"


def test_request_animation_frame_is_absent_and_says_so(run):
    source = (
        "function frame() {}\n"
        "console.log(typeof requestAnimationFrame);\n"
        "requestAnimationFrame(frame);\n"
    )

    result = run(source)

    assert result.console[0]["text"] == "undefined"
    assert result.error is not None
    assert (result.error["kind"], result.error["line"]) == ("unsupported", 3)
    assert result.error["message"].startswith(
        "Line 3: NotSupportedError: requestAnimationFrame is not available on the server"
    )


def test_other_document_apis_fail_clearly_when_used(run):
    error = run('const cookie = document.cookie;\nconst parts = cookie.split(";");\n').error

    assert error is not None
    assert error["kind"] == "unsupported"
    # Used other than by a call, its line is not known: none is named rather than a wrong one.
    assert error["line"] is None
    assert error["message"].startswith(
        "The program: NotSupportedError: document.cookie is not available on the server"
    )


def test_a_misspelt_name_is_still_a_reference_error(run):
    error = run("const a = 1;\nconsole.log(aa);\n").error

    assert error is not None
    assert (error["kind"], error["line"]) == ("javascript", 2)
    assert error["message"] == "Line 2: ReferenceError: 'aa' is not defined"


def test_alert_and_document_write_are_page_text(run):
    result = run('alert("sum = " + 6);\ndocument.write("<p>done</p>");\n')

    assert result.error is None
    assert page_lines(result) == [("alert: sum = 6", 1), ("document: done", 2)]


def test_a_page_started_from_an_onclick_attribute_says_why_nothing_ran(run, gpu):
    # <button onclick="run()"> is HTML: only the script, which declares run, is replayed.
    source = (
        "async function run() {\n"
        "  const adapter = await navigator.gpu.requestAdapter();\n"
        "  const device = await adapter.requestDevice();\n"
        "}\n"
    )

    outcome = program_outcome(run(source), gpu[1])

    assert outcome["status"] == "no_reference"
    assert "never dispatched" in outcome["message"]
    assert "starts it from an onclick attribute" in outcome["message"]
