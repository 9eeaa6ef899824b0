"""Lessons that teach host code: the learner writes the WebGPU host program in a second
editor, each submission stores both halves in one version and runs as a program, checked
against the lesson's reference fed with the inputs the program wrote."""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from kernels import jobs
from sessions.models import Turn
from sessions.programs import KernelVersion
from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorRunTestCase,
    TutorTestCase,
    read_events,
    text_reply,
)
from tutor.free_form import FREE_FORM_HOST
from tutor.lessons import LessonError, get_lesson, parse_lesson
from tutor.models import GuidedSession

LESSONS = Path(settings.BASE_DIR) / "fixtures" / "lessons"
DISPATCH_TODO = "// TODO: dispatch the kernel."


def lesson_file(name: str) -> dict:
    return json.loads((LESSONS / name).read_text())


def code_lines(program: str) -> str:
    return "\n".join(line for line in program.splitlines() if not line.startswith("//"))


def add_kernel() -> str:
    """Lesson 2's kernel, written as the lesson asks: bounds check, then the sum."""
    starter = lesson_file("02-first-compute-shader.json")["kernel"]["starter"]
    return starter.replace(
        "    // Find this invocation's element; make sure it exists; add.\n",
        "    if (id.x >= arrayLength(&out)) { return; }\n    out[id.x] = a[id.x] + b[id.x];\n",
    )


def add_host(dispatch: str) -> str:
    """Lesson 2's host starter with this dispatch written where its TODO is."""
    starter = lesson_file("02-first-compute-shader.json")["kernel"]["host_starter"]
    return starter.replace(DISPATCH_TODO, f"pass.dispatchWorkgroups({dispatch});\n{DISPATCH_TODO}")


def scale_kernel() -> str:
    starter = lesson_file("01-device-and-buffers.json")["kernel"]["starter"]
    return starter.replace(
        "    // Which element belongs to this invocation? Compute it and store it in y.\n",
        "    y[id.x] = 2.0 * x[id.x];\n",
    )


def scale_host(staging_usage: str = "GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST") -> str:
    """Lesson 1's host starter with its TODOs done; the staging buffer's usage as given."""
    starter = lesson_file("01-device-and-buffers.json")["kernel"]["host_starter"]
    buffers = (
        "const xBuffer = device.createBuffer({ size: x.byteLength, "
        "usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });\n"
        "const yBuffer = device.createBuffer({ size: x.byteLength, "
        "usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });\n"
        f"const readBuffer = device.createBuffer({{ size: x.byteLength, usage: {staging_usage} }});\n"
    )
    return (
        starter.replace(
            "//   readBuffer - a staging buffer the host maps to read y\n",
            "//   readBuffer - a staging buffer the host maps to read y\n" + buffers,
        )
        .replace(
            "// TODO: write x into xBuffer through the device's queue.\n",
            "device.queue.writeBuffer(xBuffer, 0, x);\n",
        )
        .replace(
            "// TODO: record a copy of y into readBuffer on the encoder.\n",
            "encoder.copyBufferToBuffer(yBuffer, 0, readBuffer, 0, x.byteLength);\n",
        )
        + "await readBuffer.mapAsync(GPUMapMode.READ);\n"
        + "const y = new Float32Array(readBuffer.getMappedRange());\n"
        + 'console.log("y[1] =", y[1]);\n'
    )


class LessonFileTestCase(TutorTestCase):
    def plan(self, **kernel: object) -> dict:
        data = lesson_file("02-first-compute-shader.json")
        data["kernel"].update(kernel)
        return data

    def test_lessons_1_and_2_give_host_objectives_and_a_scaffold_without_the_answer(self) -> None:
        with override_settings(TUTOR_LESSONS_DIR=LESSONS):
            one, two = get_lesson("device-and-buffers"), get_lesson("first-compute-shader")
        assert one is not None and two is not None
        self.assertIn("mapped for reading", " ".join(one.host_objectives))
        self.assertIn("rounding up", " ".join(two.host_objectives))
        self.assertNotIn("Math.ceil", json.dumps(two.as_dict()["objectives"]))
        # The scaffold's code leaves to the learner what the objectives teach; its
        # comments may name the calls.
        for absent in ("createBuffer(", "writeBuffer(", "copyBufferToBuffer(", "mapAsync("):
            self.assertNotIn(absent, code_lines(one.host_starter))
        self.assertNotIn("dispatchWorkgroups(", code_lines(two.host_starter))
        self.assertNotIn("16 workgroups", two.starter)

    def test_host_objectives_without_a_host_starter_are_refused(self) -> None:
        with self.assertRaisesMessage(LessonError, "kernel.host_objectives: a lesson that"):
            parse_lesson(self.plan(host_starter=""))

    def test_a_host_starter_needs_a_reference_to_check_the_readbacks(self) -> None:
        data = self.plan()
        del data["kernel"]["harness"]["reference"]
        with self.assertRaisesMessage(LessonError, "kernel.host_starter: the harness needs"):
            parse_lesson(data)

    def test_a_host_starter_that_is_not_text_is_refused(self) -> None:
        with self.assertRaisesMessage(LessonError, "kernel.host_starter must be"):
            parse_lesson(self.plan(host_starter=["const n = 1;"]))
        with self.assertRaisesMessage(LessonError, "kernel.host_objectives must be"):
            parse_lesson(self.plan(host_objectives="dispatch"))

    def test_a_host_starter_longer_than_a_submission_may_be_is_refused(self) -> None:
        long = "//" + "x" * settings.TUTOR_KERNEL_MAX_CHARS
        with self.assertRaisesMessage(LessonError, "kernel.host_starter is 20,002 characters"):
            parse_lesson(self.plan(host_starter=long))


@override_settings(TUTOR_LESSONS_DIR=LESSONS)
class HostSubmissionTestCase(TutorRunTestCase):
    def send(self, guided, source: str, host: str | None, note: str = ""):
        data = {"source": source, "note": note}
        if host is not None:
            data["host_program"] = host
        return read_events(
            self.client.post(self.url(guided, "submit"), data, **self.stream_headers)
        )

    def outcome(self, events) -> dict:
        run = next(data for name, data in events if name == "run")
        return run

    def test_the_page_has_a_host_editor_holding_the_scaffold(self) -> None:
        guided = self.start("first-compute-shader")
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, '<textarea id="host-editor" name="host_program"')
        self.assertContains(page, "// TODO: dispatch the kernel.")
        self.assertContains(page, "Left empty, the kernel runs under the lesson's own host")
        self.assertIn("dispatchWorkgroups counts workgroups", guided.host_starter)
        self.assertIn("This lesson's host code is yours too", guided.session.turns.first().content)

    def test_a_submission_stores_both_halves_and_runs_as_a_program(self) -> None:
        guided = self.start("first-compute-shader")
        events = self.send(guided, add_kernel(), add_host("Math.ceil(n / 64)"))
        self.assertEqual(self.outcome(events)["status"], "passed")
        version = KernelVersion.objects.get(kernel=guided.kernel)
        self.assertEqual(version.host_program, add_host("Math.ceil(n / 64)"))
        submission = version.turn
        self.assertIn("the changes to the starter code:", submission.content)
        self.assertIn("and the changes to the host starter:", submission.content)
        self.assertIn("+pass.dispatchWorkgroups(Math.ceil(n / 64));", submission.content)
        review = guided.session.turns.order_by("number").last()
        self.assertIn("**It passes:**", review.content)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "What the host did")
        self.assertContains(page, "compared with numpy&#x27;s add")
        self.assertContains(page, "out[0] =")  # the program's console

    def test_math_floor_in_the_dispatch_leaves_the_last_40_cells_unwritten(self) -> None:
        guided = self.start("first-compute-shader")
        events = self.send(guided, add_kernel(), add_host("Math.floor(n / 64)"))
        self.assertEqual(self.outcome(events)["status"], "mismatch")
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("40 of 1000 cells of `out` were never written", review)
        dispatch = next(
            n
            for n, text in enumerate(add_host("Math.floor(n / 64)").splitlines(), start=1)
            if "dispatchWorkgroups(Math.floor" in text
        )
        self.assertIn(
            f"Your host program dispatches 15 workgroups (line {dispatch}, "
            "`pass.dispatchWorkgroups(Math.floor(n / 64));`) × @workgroup_size 64 = 960 "
            "invocations, for 1000 cells of `out`",
            review,
        )
        self.assertIn("how many workgroups of 64 does it take to cover 1000 elements", review)
        self.assertNotIn("Math.ceil", review)
        self.assertNotIn("fixed by the lesson", review)
        # Nothing on the page hands over the fix: the trace is drawn without the archive's
        # findings, and the objectives name the idea, not the line.
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "What the host did")
        self.assertNotContains(page, "Math.ceil")
        # Nor is the line a finding would point at marked in the host code.
        self.assertNotContains(page, f'<span class="hll"><span class="linenos">{dispatch}<')

    def test_the_scaffold_as_given_never_dispatches_and_the_review_says_so(self) -> None:
        guided = self.start("first-compute-shader")
        host = lesson_file("02-first-compute-shader.json")["kernel"]["host_starter"]
        self.send(guided, add_kernel(), host)
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("**Your host program never dispatched the kernel:**", review)

    def test_a_kernel_indexed_by_local_invocation_id_is_named_in_a_program_run(self) -> None:
        guided = self.start("first-compute-shader")
        local = add_kernel().replace(
            "@builtin(global_invocation_id) id", "@builtin(local_invocation_id) id"
        )
        self.send(guided, local, add_host("Math.ceil(n / 64)"))
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("from `local_invocation_id` (`id`)", review)
        self.assertIn("cells 64–999", review)

    def test_mapping_a_buffer_without_map_read_names_the_host_line_and_the_usage(self) -> None:
        guided = self.start("device-and-buffers")
        host = scale_host("GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST")
        events = self.send(guided, scale_kernel(), host)
        self.assertEqual(self.outcome(events)["status"], "pipeline_error")
        review = guided.session.turns.order_by("number").last().content
        mapped = next(n for n, text in enumerate(host.splitlines(), start=1) if "mapAsync" in text)
        self.assertIn(f"**Your host program stopped at line {mapped}:**", review)
        self.assertIn("`await readBuffer.mapAsync(GPUMapMode.READ);`", review)
        self.assertIn("The call needs a buffer with the MAP_READ usage.", review)
        self.assertIn("with COPY_DST | STORAGE", review)
        self.assertNotIn("pipeline could not be set up", review)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, f"&quot;line&quot;: {mapped}")  # the host editor marks it

    def test_changing_only_the_host_program_makes_a_new_version(self) -> None:
        guided = self.start("first-compute-shader")
        self.send(guided, add_kernel(), add_host("Math.floor(n / 64)"))
        self.send(guided, add_kernel(), add_host("Math.floor(n / 64)"))
        self.assertEqual(guided.kernel.versions.count(), 1)
        again = guided.session.turns.filter(role=Turn.Role.LEARNER).last()
        self.assertIn("v1 again (unchanged)", again.content)
        self.send(guided, add_kernel(), add_host("Math.ceil(n / 64)"))
        two = guided.kernel.versions.get(number=2)
        self.assertEqual(two.source, add_kernel())
        self.assertIn("the host program's changes:", two.turn.content)
        self.assertNotIn("```wgsl", two.turn.content)
        self.assertIn("-pass.dispatchWorkgroups(Math.floor(n / 64));", two.turn.content)

    def test_an_empty_host_program_runs_under_the_lessons_harness(self) -> None:
        guided = self.start("first-compute-shader")
        events = self.send(guided, add_kernel(), "")
        self.assertEqual(self.outcome(events)["status"], "passed")
        version = guided.kernel.versions.get()
        self.assertEqual(version.host_program, "")
        self.assertIn("no host program: the harness is its host", version.turn.content)

    def test_a_form_without_the_host_field_carries_the_host_program_over(self) -> None:
        guided = self.start("first-compute-shader")
        self.send(guided, add_kernel(), add_host("Math.ceil(n / 64)"))
        self.send(guided, add_kernel().replace("a[id.x] + b[id.x]", "b[id.x] + a[id.x]"), None)
        self.assertEqual(
            guided.kernel.versions.get(number=2).host_program, add_host("Math.ceil(n / 64)")
        )

    def test_a_host_program_over_the_size_cap_is_refused_and_nothing_is_stored(self) -> None:
        guided = self.start("first-compute-shader")
        long = "//" + "x" * settings.TUTOR_KERNEL_MAX_CHARS
        response = self.client.post(
            self.url(guided, "submit"),
            {"source": add_kernel(), "host_program": long},
            **self.stream_headers,
        )
        self.assertEqual(response.status_code, 400)
        self.assertIn("That host program is too long: at most 20,000", response.json()["error"])
        self.assertFalse(guided.kernel.versions.exists())

    def test_lesson_1_scaffold_as_given_stops_at_the_first_buffer_it_lacks(self) -> None:
        guided = self.start("device-and-buffers")
        host = lesson_file("01-device-and-buffers.json")["kernel"]["host_starter"]
        events = self.send(guided, scale_kernel(), host)
        self.assertEqual(self.outcome(events)["status"], "threw")
        review = guided.session.turns.order_by("number").last().content
        line = next(n for n, text in enumerate(host.splitlines(), start=1) if "xBuffer }" in text)
        self.assertIn(f"**Your host program stopped at line {line}:**", review)
        self.assertIn("a buffer or value the TODOs ask you to create", review)

    def test_lesson_1_passes_with_the_buffer_lifecycle_written(self) -> None:
        guided = self.start("device-and-buffers")
        events = self.send(guided, scale_kernel(), scale_host())
        self.assertEqual(self.outcome(events)["status"], "passed")

    def test_without_javascript_the_form_posts_both_halves_and_shows_the_page(self) -> None:
        guided = self.start("first-compute-shader")
        response = self.client.post(
            self.url(guided, "submit"),
            {"source": add_kernel(), "host_program": add_host("Math.ceil(n / 64)")},
        )
        self.assertEqual(response.status_code, 302)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "pass.dispatchWorkgroups(Math.ceil(n / 64));")
        self.assertContains(page, "status-passed")


@override_settings(TUTOR_LESSONS_DIR=LESSONS, ANTHROPIC_API_KEY=FAKE_KEY)
class ClaudeSeesTheHostTestCase(TutorRunTestCase):
    def test_claude_gets_both_halves_their_diff_and_the_trace(self) -> None:
        guided = self.start("first-compute-shader")
        api = FakeAPI(text_reply("How many invocations ran?"), text_reply("And now?"))
        with api.patch():
            read_events(
                self.client.post(
                    self.url(guided, "submit"),
                    {"source": add_kernel(), "host_program": add_host("Math.floor(n / 64)")},
                    **self.stream_headers,
                )
            )
            read_events(
                self.client.post(
                    self.url(guided, "submit"),
                    {"source": add_kernel(), "host_program": add_host("Math.ceil(n / 64)")},
                    **self.stream_headers,
                )
            )
        system = api.requests[0]["body"]["system"]
        self.assertIn("no createBuffer", system[0]["text"])
        self.assertIn("## The host program the learner writes", system[1]["text"])
        self.assertIn("// TODO: dispatch the kernel.", system[1]["text"])
        first = api.last_user_text(0)
        self.assertIn('<host_program version="1">', first)
        self.assertIn("| pass.dispatchWorkgroups(Math.floor(n / 64));", first)
        self.assertIn("<trace>", first)
        self.assertIn("buffer a: 4,000 B, usage COPY_DST|STORAGE (line 11)", first)
        self.assertIn("dispatchWorkgroups(15, 1, 1) with pipeline 1", first)
        self.assertIn("copy 4,000 B from out to read", first)
        self.assertIn("read back read (copied from out): 4,000 B as f32", first)
        self.assertIn("console.log (line 55): out[0] =", first)
        self.assertIn("readbacks checked against numpy's add", first)
        second = api.last_user_text(1)
        self.assertIn("-pass.dispatchWorkgroups(Math.floor(n / 64));", second)
        self.assertIn("+++ v2 host", second)


DOUBLE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&y)) { return; }
    y[id.x] = FORMULA;
}
"""


def free_form_host() -> str:
    """The free-form scaffold with a learner's own buffers, dispatch and readback."""
    return FREE_FORM_HOST + (
        "const x = new Float32Array(100).map((_, i) => i);\n"
        "const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST;\n"
        'const xb = device.createBuffer({ label: "x", size: 400, usage });\n'
        'const yb = device.createBuffer({ label: "y", size: 400, '
        "usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });\n"
        'const rb = device.createBuffer({ label: "read", size: 400, '
        "usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });\n"
        "device.queue.writeBuffer(xb, 0, x);\n"
        "const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), "
        "entries: [{ binding: 0, resource: { buffer: xb } }, "
        "{ binding: 1, resource: { buffer: yb } }] });\n"
        "const encoder = device.createCommandEncoder();\n"
        "const pass = encoder.beginComputePass();\n"
        "pass.setPipeline(pipeline);\npass.setBindGroup(0, bindGroup);\n"
        "pass.dispatchWorkgroups(2);\npass.end();\n"
        "encoder.copyBufferToBuffer(yb, 0, rb, 0, 400);\n"
        "device.queue.submit([encoder.finish()]);\n"
        "await rb.mapAsync(GPUMapMode.READ);\n"
        'console.log("y[99] =", new Float32Array(rb.getMappedRange())[99]);\n'
    )


class FreeFormProgramTestCase(TutorRunTestCase):
    def start_free(self):
        self.client.force_login(self.alice)
        self.client.post(reverse("tutor:start"), {"lesson": "free"})
        return GuidedSession.objects.order_by("-pk").first()

    def send(self, guided, formula: str, compare_with: str = ""):
        data = {
            "source": DOUBLE.replace("FORMULA", formula),
            "host_program": free_form_host(),
            "compare_with": compare_with,
        }
        return self.client.post(self.url(guided, "submit"), data, **self.stream_headers)

    def test_the_outputs_are_shown_then_compared_with_an_earlier_version(self) -> None:
        guided = self.start_free()
        first = read_events(self.send(guided, "2.0 * x[id.x]"))
        # With its host program, v1 joins the versions the page offers to compare with.
        self.assertTrue(next(data for name, data in first if name == "running")["comparable"])
        run = next(data for name, data in first if name == "run")
        self.assertEqual(run["status"], "no_reference")
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("**It ran; the outputs it read back are shown.**", review)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, '<option value="1">v1</option>', html=True)
        self.assertContains(page, "y[99] = 198")

        second = read_events(self.send(guided, "x[id.x] + 2.0", compare_with="1"))
        run = next(data for name, data in second if name == "run")
        self.assertEqual(run["status"], "mismatch")
        self.assertIn("compared with those of v1, the earlier version you chose", run["html"])
        two = guided.kernel.versions.get(number=2)
        self.assertIn("Its outputs are compared with those of v1.", two.turn.content)
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("*Compared with what v1 read back.*", review)
        self.assertIn("**It runs, but the results are wrong:**", review)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "the earlier version you chose")
        # After a reload, v2's badges show the run made with that comparison.
        self.assertContains(
            page, 'replay kernel v2 <span class="badge-status">wrong results</span>', count=2
        )
        # The run key covers the choice: without it, v2 has a run of its own.
        chosen = jobs.job_for(two, compare_with=guided.kernel.versions.get(number=1))
        self.assertNotEqual(chosen.harness_digest, jobs.job_for(two).harness_digest)

    def test_a_version_not_in_the_list_is_refused(self) -> None:
        guided = self.start_free()
        response = self.send(guided, "2.0 * x[id.x]", compare_with="7")
        self.assertEqual(response.status_code, 400)
        self.assertIn("Choose a version to compare with", response.json()["error"])
        self.assertFalse(guided.kernel.versions.exists())
