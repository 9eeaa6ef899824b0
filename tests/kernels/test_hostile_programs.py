"""Host programs that cost everyone else (#30): huge buffers, thousands of dispatches, labels
and error messages of megabytes. What they control is cut in the worker before it crosses to
the web process, and their pages are drawn from that capped, stored data without touching a
buffer's bytes. Real wgpu through the replay pool, pages through Django's test client."""

from __future__ import annotations

import json
import tracemalloc

import pytest
from django.test import TransactionTestCase

from kernels.engine.host import trace as traces
from kernels.models import Run
from tests.base import make_session
from tests.kernels.test_host_versions import add_program
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

DEVICE = "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
MiB = 1024 * 1024
# Whatever a program did, its page and its stored outcome stay under these.
PAGE_BYTES = 1024 * 1024
OUTCOME_BYTES = 512 * 1024
# Python memory a page view may allocate: a buffer's bytes (128 MiB) would be far over it.
RENDER_BYTES = 32 * MiB

FORTY_UNIFORMS = DEVICE + (
    "for (let i = 0; i < 40; i++) {\n"
    "  const u = device.createBuffer({ size: 128 * 1024 * 1024,"
    " usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });\n"
    "  device.queue.writeBuffer(u, 0, new Uint32Array([i, 2, 3, 4]));\n"
    "  u.destroy();\n"
    "}\n"
)
MANY_DISPATCHES = DEVICE + (
    "const module = device.createShaderModule({ code: '@compute @workgroup_size(1) fn main() {}' });\n"
    "const pipeline = device.createComputePipeline({ layout: 'auto', compute: { module, entryPoint: 'main' } });\n"
    "const encoder = device.createCommandEncoder();\n"
    "for (let p = 0; p < 60; p++) {\n"
    "  const pass = encoder.beginComputePass();\n"
    "  pass.setPipeline(pipeline);\n"
    "  for (let d = 0; d < 100; d++) pass.dispatchWorkgroups(1);\n"
    "  pass.end();\n"
    "}\n"
)
HUGE_LABELS = DEVICE + (
    "const huge = 'L'.repeat(20 * 1024 * 1024);\n"
    "for (let i = 0; i < 5; i++) device.createBuffer({ label: huge + i, size: 16,"
    " usage: GPUBufferUsage.STORAGE });\n"
    "throw new Error('E'.repeat(32 * 1024 * 1024));\n"
)


class HostileProgramTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("hostile", turns=2)

    def replay(self, program: str) -> tuple[dict, bytes]:
        """The stored outcome of program's run and its replay page, the page rendered with
        tracemalloc watching what the web process allocates."""
        add_program(self.session, [program])
        outcome = finished(self.client, "/s/hostile/turns/2/replay.json")["outcome"]
        self.assertLess(len(json.dumps(Run.objects.get().outcome)), OUTCOME_BYTES)
        tracemalloc.start()
        try:
            page = self.client.get("/s/hostile/turns/2/replay/")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.assertEqual(page.status_code, 200)
        self.assertLess(len(page.content), PAGE_BYTES)
        self.assertLess(peak, RENDER_BYTES)
        return outcome, page.content

    def test_forty_uniform_buffers_of_128_mib_are_drawn_without_their_bytes(self) -> None:
        outcome, page = self.replay(FORTY_UNIFORMS)

        trace = outcome["program"]["trace"]
        self.assertEqual(len(trace["buffers"]), 40)
        self.assertEqual({b["size"] for b in trace["buffers"]}, {128 * MiB})
        self.assertIn(b"134,217,728", page)

    def test_6000_dispatches_keep_200_in_the_trace(self) -> None:
        outcome, page = self.replay(MANY_DISPATCHES)

        trace = outcome["program"]["trace"]
        kept = sum(len(p["dispatches"]) for p in trace["passes"])
        self.assertEqual(kept, traces.MAX_DISPATCHES)
        self.assertEqual(trace["dropped"]["dispatches"], 6000 - traces.MAX_DISPATCHES)
        self.assertEqual(outcome["program"]["dispatches"], 6000)
        self.assertIn(b"The trace is capped", page)

    def test_a_lone_surrogate_in_what_a_program_logs_is_shown_as_a_browser_shows_it(self) -> None:
        # UTF-8 has no lone surrogate: the worker's message could not carry it as it is.
        outcome, page = self.replay(DEVICE + 'console.log("half \\ud800 a pair", "\\udfff");\n')

        self.assertEqual(outcome["status"], "no_reference")
        line = outcome["program"]["console"][0]
        self.assertEqual(line["text"], "half \ufffd a pair \ufffd")
        self.assertIn("half \ufffd a pair".encode(), page)

    def test_labels_and_an_error_message_of_megabytes_are_cut_in_the_worker(self) -> None:
        outcome, _ = self.replay(HUGE_LABELS)

        self.assertEqual(outcome["status"], "threw")
        self.assertEqual(outcome["program"]["error"]["line"], 4)
        self.assertLess(len(outcome["message"]), 2100)
        self.assertIn("more characters", outcome["message"])
        for buffer in outcome["program"]["trace"]["buffers"]:
            self.assertLessEqual(len(buffer["name"]), 201)
