"""The capture of every run: what each storage buffer a pass writes held after it, in
replay.json and on the replay page (one pass at a time, ?pass=N), for host programs and
harness runs alike; bounded, and never a cause of a run's verdict. Real wgpu (llvmpipe
here), through URLs where a reader would go."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from django.test import TransactionTestCase

from kernels.engine import messages, worker
from kernels.engine.host import capture as captures
from kernels.engine.host.capture import cells_of
from kernels.engine.host.program import program_outcome, replay_program, run_program
from kernels.engine.outcome import output_list, output_values
from tests.base import add_kernel, make_session
from tests.kernels.test_host_pages import program_version
from tests.kernels.test_host_program import VECTOR_ADD, vector_add_expected
from tests.kernels.test_replay_views import finished

# Two passes of one module, neither read back: "double" writes y[i] = 2 x[i] for the first
# 12 of 16 cells, "bump" adds x[0] (1) to the first 6. y is made STORAGE alone: the capture
# copies it all the same.
TWO_PASSES_WGSL = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(4)
fn double(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < 12u) { y[id.x] = 2.0 * x[id.x]; }
}

@compute @workgroup_size(4)
fn bump(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < 6u) { y[id.x] = y[id.x] + x[0]; }
}
"""
TWO_PASSES = """const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const code = await (await fetch("kernel.wgsl")).text();
const module = device.createShaderModule({ code });
const x = device.createBuffer({ label: "x", size: 64, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
const y = device.createBuffer({ label: "y", size: 64, usage: GPUBufferUsage.STORAGE });
device.queue.writeBuffer(x, 0, new Float32Array(16).map((_, i) => i + 1));
const encoder = device.createCommandEncoder();
for (const entryPoint of ["double", "bump"]) {
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint } });
  const group = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: x } }, { binding: 1, resource: { buffer: y } }],
  });
  const pass = encoder.beginComputePass({ label: entryPoint });
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  pass.dispatchWorkgroups(4);
  pass.end();
}
device.queue.submit([encoder.finish()]);
"""
DOUBLED = [2.0 * (i + 1) for i in range(12)] + [None] * 4
BUMPED = [v + 1.0 for v in DOUBLED[:6]] + DOUBLED[6:]


def values(buffer: Mapping[str, Any]) -> list:
    return output_list(buffer, "values") or []


class ProgramCaptureTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("capture", turns=2)

    def test_a_program_that_never_reads_back_shows_its_buffers_after_each_pass(self) -> None:
        program_version(self.session, TWO_PASSES_WGSL, TWO_PASSES)

        outcome = finished(self.client, "/s/capture/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "no_reference")
        self.assertIn("in a browser it would show nothing", outcome["message"])
        passes = outcome["passes"]
        self.assertEqual([p["name"] for p in passes], ["double", "bump"])
        # Only the buffer the passes write; never-written cells (the sentinel run's) null.
        for record, expected in zip(passes, (DOUBLED, BUMPED), strict=True):
            (y,) = record["buffers"]
            self.assertEqual(
                (y["name"], y["dtype"], y["shape"], y["count"], y["kept"]),
                ("y", "f32", [16], 16, 16),
            )
            self.assertEqual(values(y), expected)
        # The trace shows the usage the program asked for, not the capture's.
        (y_traced,) = [b for b in outcome["program"]["trace"]["buffers"] if b["name"] == "y"]
        self.assertEqual(y_traced["usage"], ["STORAGE"])

        page = self.client.get("/s/capture/turns/2/replay/").content.decode()
        section = page[page.index('<section class="passes"') :]
        section = section[: section.index("</section>")]
        # By default the last pass, what the run ended with, and a link to the one before.
        self.assertIn(
            "The program never read a buffer back, so a browser would show nothing", section
        )
        self.assertIn("Pass 2: <code>bump</code>", section)
        self.assertIn('href="?pass=1#passes" rel="prev"', section)
        self.assertIn(
            "y: 16 f32; 6 of the cells drawn changed by this pass; 4 never written", section
        )
        self.assertIn("<svg", section)
        self.assertEqual(section.count("(changed by this pass)</title>"), 6)
        self.assertIn("changed by this pass <span", section)  # the legend

        first = self.client.get("/s/capture/turns/2/replay/", {"pass": 1}).content.decode()
        section = first[first.index('<section class="passes"') :]
        self.assertIn("Pass 1: <code>double</code>", section)
        self.assertIn('href="?pass=2#passes" rel="next"', section)
        self.assertIn("y: 16 f32; 4 never written", section)
        # A pass that is not there shows the last one.
        for asked in ("9", "x", "-1"):
            shown = self.client.get("/s/capture/turns/2/replay/", {"pass": asked})
            self.assertContains(shown, "Pass 2: <code>bump</code>")

    def test_a_program_that_reads_back_keeps_its_verdict_and_its_buffers(self) -> None:
        program_version(self.session, "", VECTOR_ADD)

        outcome = finished(self.client, "/s/capture/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "no_reference")
        (record,) = outcome["passes"]
        (out,) = record["buffers"]
        self.assertEqual((out["name"], out["shape"], out["kept"]), ("out", [1000], 1000))
        got = output_values(out, "values")
        np.testing.assert_allclose(got, 3.0 * np.arange(1000))
        page = self.client.get("/s/capture/turns/2/replay/").content.decode()
        self.assertNotIn("a browser would show nothing", page)
        # A long vector is drawn in rows of 64.
        self.assertIn("out: 1000 f32", page)


class HarnessCaptureTests(TransactionTestCase):
    def test_a_harness_run_captures_its_output_in_the_harness_shape(self) -> None:
        session = make_session("harnessed", turns=2)
        add_kernel(session, turn=2)

        outcome = finished(self.client, "/s/harnessed/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "passed")
        (record,) = outcome["passes"]
        (out,) = record["buffers"]
        self.assertEqual((out["name"], out["dtype"], out["shape"]), ("out", "f32", [128]))
        self.assertEqual(output_list(out, "values"), output_list(outcome["outputs"][0], "got"))

    def test_a_wrong_harness_run_marks_the_cells_its_kernel_never_wrote(self) -> None:
        session = make_session("partial", turns=2)
        source = (
            "@group(0) @binding(0) var<storage, read> a: array<f32>;\n"
            "@group(0) @binding(1) var<storage, read> b: array<f32>;\n"
            "@group(0) @binding(2) var<storage, read_write> out: array<f32>;\n"
            "@compute @workgroup_size(64)\n"
            "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
            "    if (id.x < 100u) { out[id.x] = a[id.x] + b[id.x]; }\n"
            "}\n"
        )
        add_kernel(session, source=source, turn=2)

        outcome = finished(self.client, "/s/partial/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "mismatch")
        out = outcome["passes"][0]["buffers"][0]
        cells = values(out)
        self.assertNotIn(None, cells[:100])
        self.assertEqual(cells[100:], [None] * 28)


# -- the engine: bounds, types, failures ------------------------------------------------------


def test_cells_are_read_as_the_wgsl_variable_declares_them() -> None:
    assert cells_of("array<f32>") == captures.Cells("f32", 1)
    assert cells_of("array<vec4<f32>>") == captures.Cells("f32", 4)
    assert cells_of("array<vec2u, 8>") == captures.Cells("u32", 2)
    assert cells_of("array<atomic<i32>>") == captures.Cells("i32", 1)
    # A vec3's elements are 16 bytes apart.
    assert cells_of("array<vec3<f32>>") == captures.Cells("f32", 4)
    assert cells_of("array<Particle>") == captures.Cells("u8", 1)
    assert cells_of("array<f16>") == captures.Cells("u8", 1)


def test_a_vec4_buffer_is_shaped_by_its_vectors_and_a_struct_one_is_bytes(gpu) -> None:
    wgsl = """struct P { a: f32, b: u32 }
@group(0) @binding(0) var<storage, read_write> v: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> p: array<P>;
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    v[id.x] = vec4<u32>(id.x, 1u, 2u, 3u);
    p[id.x].b = 7u;
}
"""
    program = (
        TWO_PASSES.replace('["double", "bump"]', '["main"]')
        .replace(
            "{ binding: 0, resource: { buffer: x } }", "{ binding: 0, resource: { buffer: y } }"
        )
        .replace(
            "{ binding: 1, resource: { buffer: y } }", "{ binding: 1, resource: { buffer: x } }"
        )
        .replace("dispatchWorkgroups(4)", "dispatchWorkgroups(2)")
    )
    outcome = replay_program(gpu[0], gpu[1], program, {"kernel.wgsl": wgsl.encode()})

    v, p = outcome["passes"][0]["buffers"]
    assert (v["name"], v["dtype"], v["shape"]) == ("y", "u32", [4, 4])
    assert values(v)[:8] == [0, 1, 2, 3, 1, 1, 2, 3]
    assert values(v)[8:] == [None] * 8  # never written, marked by the sentinel run
    assert (p["name"], p["dtype"], p["shape"], p["count"]) == ("x", "u8", [64], 64)


def test_a_buffer_over_the_cap_keeps_its_first_cells_and_says_so(gpu, monkeypatch) -> None:
    monkeypatch.setattr(captures, "MAX_CELLS", 100)
    result = run_program(gpu[0], gpu[1], VECTOR_ADD, capture=True)
    outcome = program_outcome(result, gpu[1], vector_add_expected())

    assert outcome["status"] == "passed"
    (out,) = outcome["passes"][0]["buffers"]
    assert (out["count"], out["kept"], out["shape"]) == (1000, 100, [100])
    assert out["note"].startswith("too large to keep whole: the first 100 of its 1,000 cells")
    np.testing.assert_allclose(output_values(out, "values"), 3.0 * np.arange(100))


def test_the_runs_budget_leaves_later_passes_uncaptured_and_says_so(gpu, monkeypatch) -> None:
    monkeypatch.setattr(captures, "MAX_RUN_BYTES", 64)
    result = run_program(
        gpu[0], gpu[1], TWO_PASSES, {"kernel.wgsl": TWO_PASSES_WGSL.encode()}, capture=True
    )
    passes = program_outcome(result, gpu[1])["passes"]

    assert passes[0]["buffers"][0]["kept"] == 16
    later = passes[1]["buffers"][0]
    assert later["kept"] == 0 and "values" not in later
    assert later["note"] == "not kept: the run's captures reached their cap of 64 bytes"


def test_a_pass_never_submitted_says_so(gpu) -> None:
    program = TWO_PASSES.replace("device.queue.submit([encoder.finish()]);", "encoder.finish();")
    result = run_program(
        gpu[0], gpu[1], program, {"kernel.wgsl": TWO_PASSES_WGSL.encode()}, capture=True
    )

    for record in program_outcome(result, gpu[1])["passes"]:
        (y,) = record["buffers"]
        assert "values" not in y
        assert y["note"].startswith("never submitted")


def test_a_capture_that_fails_never_changes_the_verdict(gpu, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("the capture broke")

    monkeypatch.setattr(captures.Capture, "end_pass", broken)
    result = run_program(gpu[0], gpu[1], VECTOR_ADD, capture=True)
    outcome = program_outcome(result, gpu[1], vector_add_expected())

    assert outcome["status"] == "passed"
    assert "buffers" not in outcome["passes"][0]


def test_copies_webgpu_would_refuse_are_dropped_and_the_program_runs(gpu, monkeypatch) -> None:
    # A copy past the staging buffer's end fails the encoder at finish(): the program's own
    # calls are encoded again without the capture's, and run as they would in a browser.
    real = captures.Capture.end_pass

    def overrun(self, encoder, gpu_encoder, *args):
        real(self, encoder, gpu_encoder, *args)
        staged = self.staged.get(encoder, [])
        if staged and staged[-1].staging is not None:
            staging = staged[-1].staging
            source = args[2][staged[-1].copies[0].buffer]
            gpu_encoder.copy_buffer_to_buffer(source, 0, staging.gpu, staging.size - 4, 8)

    monkeypatch.setattr(captures.Capture, "end_pass", overrun)
    result = run_program(gpu[0], gpu[1], VECTOR_ADD, capture=True)
    outcome = program_outcome(result, gpu[1], vector_add_expected())

    assert result.error is None, result.error
    assert outcome["status"] == "passed"
    assert "buffers" not in outcome["passes"][0]


def test_runs_that_no_reader_sees_capture_nothing(gpu) -> None:
    result = run_program(gpu[0], gpu[1], VECTOR_ADD)
    assert result.captured == {}
    assert "buffers" not in program_outcome(result, gpu[1])["passes"][0]


def test_an_outcome_over_the_workers_cap_drops_buffers_before_failing(gpu, monkeypatch) -> None:
    outcome = replay_program(gpu[0], gpu[1], TWO_PASSES, {"kernel.wgsl": TWO_PASSES_WGSL.encode()})
    outcome["program"]["trace"] = None  # what else is cut, biggest first
    whole = worker.result_frame(1, outcome)
    monkeypatch.setattr(worker, "MAX_OUTCOME_BYTES", len(whole) - 100)

    frame = worker.result_frame(1, outcome)
    sent = json.loads(frame[messages.HEADER.size :])["outcome"]

    assert sent["status"] == "no_reference"
    assert sent["cut"] and sent["cut"][0].startswith("the buffers after pass")
    assert sum("buffers" in p for p in sent["passes"]) == 1


class ShowcaseCaptureTests(TransactionTestCase):
    def test_each_matmul_version_lists_each_pass_with_its_buffers_and_time(self) -> None:
        from sessions.importers.kernelbin import import_session
        from tests.kernels.test_showcase import DATA, KERNELS

        import_session(DATA)
        slug = DATA["session"]["slug"]
        checked = []
        for version in KERNELS["matmul"]["versions"]:
            path = f"/s/{slug}/turns/{version['turn']}/replay.json"
            outcome = finished(self.client, path)["outcome"]
            if outcome["status"] in ("compile_error", "pipeline_error", "rejected"):
                continue  # nothing ran
            assert outcome["passes"], (version["number"], outcome["message"])
            for record in outcome["passes"]:
                assert "gpu_ms" in record, version["number"]
                assert record["buffers"], version["number"]
                for buffer in record["buffers"]:
                    assert buffer["kept"] == buffer["count"] and "values" in buffer
            checked.append(version["number"])
        assert len(checked) >= 2, checked  # v1 and v2 stop before a pass runs
