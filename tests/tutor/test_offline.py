"""No API key: every submission still runs for real and is explained from its outcome."""

from __future__ import annotations

from django.urls import reverse

from sessions.models import Turn
from tests.tutor.helpers import (
    VECTOR_HEAD,
    FakeAPI,
    TutorRunTestCase,
    TutorTestCase,
    names,
    read_events,
    vector_kernel,
)

TRANSPOSED = (
    VECTOR_HEAD
    + """
const N: u32 = 8u;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    var sum = 0.0;
    for (var k = 0u; k < N; k++) {
        sum += a[row * N + k] * b[k * N + col];
    }
    out[col * N + row] = sum;
}
"""
)

EXTRA_BINDING = VECTOR_HEAD.replace(
    "array<f32>;\n",
    "array<f32>;\n@group(0) @binding(3) var<storage, read_write> scratch: array<f32>;\n",
    1,
) + (
    "\n@compute @workgroup_size(64)\n"
    "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    scratch[id.x] = 0.0;\n"
    "    out[id.x] = a[id.x] + b[id.x];\n}\n"
)


class OfflineReviewTestCase(TutorRunTestCase):
    def review(self, source: str, lesson: str = "vector-add") -> tuple[Turn, list]:
        guided = self.start(lesson)
        api = FakeAPI()  # with no key, nothing may reach the API
        with api.patch():
            events = read_events(self.submit(guided, source))
        self.assertEqual(api.requests, [])
        self.assertEqual(names(events)[:3], ["turn", "running", "run"])
        self.assertEqual(names(events)[-2:], ["turn", "done"])
        review = guided.session.turns.order_by("number").last()
        self.assertEqual(review.role, Turn.Role.TUTOR)
        self.assertEqual(
            {k: review.meta[k] for k in ("kind", "automatic")},
            {"kind": "review", "automatic": True},
        )
        version = guided.kernel.versions.get()
        self.assertEqual(review.kernel_version, version)
        self.assertEqual(version.turn.kernel_version, version)
        self.assertIn("Tutor · automatic", events[-2][1]["html"])
        return review, events

    def test_it_explains_a_compile_error(self) -> None:
        review, events = self.review(vector_kernel(body="out[id.x] = a[id.x] + b[id.x]"))
        self.assertEqual(events[2][1]["status"], "compile_error")
        self.assertIn("**It does not compile.** naga stops at line 8, column 1", review.content)
        self.assertIn("expected `;`", review.content)
        self.assertIn("The line before it reads `out[id.x] = a[id.x] + b[id.x]`", review.content)
        self.assertIn("missing its semicolon", review.content)
        # The runner's notes about the backend only matter for results.
        self.assertNotIn("llvmpipe", review.content)

    def test_it_explains_a_transposed_result(self) -> None:
        review, events = self.review(TRANSPOSED, lesson="matmul")
        self.assertEqual(events[2][1]["status"], "mismatch")
        self.assertIn("**transpose** of the expected matrix", review.content)
        self.assertIn("| cell | expected | got |", review.content)

    def test_it_names_whole_rows_never_written(self) -> None:
        source = TRANSPOSED.replace(
            "    let row = id.y;", "    let row = id.y;\n    if (row >= 5u) { return; }"
        ).replace("out[col * N + row]", "out[row * N + col]")
        review, _ = self.review(source, lesson="matmul")
        self.assertIn(
            "Whole rows of the 8×8 result were never written: rows 5–7, every other cell was.",
            review.content,
        )
        # Enough invocations ran: the question is what stops them, not the dispatch.
        self.assertIn(
            "64 invocations ran for 64 cells. Which of them should have written those cells, "
            "and what in your kernel stops them",
            review.content,
        )

    def test_it_explains_too_few_invocations(self) -> None:
        review, _ = self.review(vector_kernel(32))
        self.assertIn(
            "**64 of 128 cells of `out` were never written**, the first at [64]", review.content
        )
        self.assertIn(
            "Only 64 invocations ran (2 workgroups × @workgroup_size 32) for 128 cells",
            review.content,
        )

    def test_it_explains_an_early_return(self) -> None:
        body = "if (id.x >= 100u) { return; }\n    out[id.x] = a[id.x] + b[id.x];"
        review, _ = self.review(vector_kernel(64, body))
        self.assertIn("28 of 128 cells of `out` were never written", review.content)
        self.assertIn("returned before writing", review.content)
        self.assertIn("bounds check", review.content)
        self.assertIn("Written: cells 0–99; never written: cells 100–127.", review.content)

    def test_it_names_local_invocation_id_when_one_workgroup_is_written(self) -> None:
        source = vector_kernel(body="out[lid.x] = a[lid.x] + b[lid.x];").replace(
            "global_invocation_id) id", "local_invocation_id) lid"
        )
        review, _ = self.review(source)
        self.assertIn("Written: cells 0–63; never written: cells 64–127.", review.content)
        self.assertIn("takes its position from `local_invocation_id` (`lid`)", review.content)
        self.assertIn("second* workgroup", review.content)
        self.assertNotIn("bounds check", review.content)

    def test_it_names_a_constant_offset(self) -> None:
        review, _ = self.review(
            vector_kernel(body="out[id.x] = a[(id.x + 5u) % 128u] + b[(id.x + 5u) % 128u];")
        )
        self.assertIn("**5 cells after** it", review.content)
        self.assertIn("Where in your index expressions does 5 come from?", review.content)

    def test_it_explains_infinities(self) -> None:
        review, events = self.review(
            vector_kernel(body="out[id.x] = exp(abs(a[id.x]) * 200.0 + 100.0);")
        )
        self.assertEqual(events[2][1]["status"], "nonfinite")
        self.assertIn("cells of `out` are NaN or infinite**", review.content)
        self.assertIn("softmax must subtract the row maximum", review.content)

    def test_it_explains_a_pipeline_error(self) -> None:
        review, events = self.review(EXTRA_BINDING)
        self.assertEqual(events[2][1]["status"], "pipeline_error")
        self.assertIn("the pipeline could not be set up", review.content)
        self.assertIn("different set of @group/@binding numbers", review.content)
        self.assertIn("@group(0) @binding(2) → `out`", review.content)

    def test_it_explains_a_wrong_formula(self) -> None:
        review, _ = self.review(vector_kernel(body="out[id.x] = a[id.x] * b[id.x];"))
        self.assertIn("It runs, but the results are wrong", review.content)
        self.assertIn("not a simple pattern", review.content)
        self.assertIn("The wrong cells are cells 0–127.", review.content)

    def test_it_confirms_a_pass(self) -> None:
        review, events = self.review(vector_kernel())
        self.assertEqual(events[2][1]["status"], "passed")
        self.assertIn("**It passes:** All 128 cells match", review.content)
        # The lesson's checks are instructions to the tutor: the learner gets a question.
        self.assertNotIn("Ask which element", review.content)
        # A pass is not a failure to hint at, and the page, not the review, offers publishing.
        self.assertNotIn("Which cell does invocation", review.content)
        self.assertNotIn("publish", review.content)

    def test_it_compiles_free_form_kernels(self) -> None:
        review, events = self.review(vector_kernel(), lesson="free")
        self.assertEqual(events[2][1]["status"], "no_reference")
        self.assertIn("no harness", review.content)
        # The panel does not say it ran next to "there is no harness to run it with".
        self.assertIn("Compiled, not run, on", events[2][1]["html"])
        self.assertNotIn("Ran on", events[2][1]["html"])

    def test_it_runs_an_unchanged_kernel_again_without_a_new_version(self) -> None:
        guided = self.start()
        read_events(self.submit(guided, vector_kernel(32)))
        events = read_events(self.submit(guided, vector_kernel(32)))
        self.assertEqual(guided.kernel.versions.count(), 1)
        learner = guided.session.turns.filter(role=Turn.Role.LEARNER).last()
        self.assertTrue(learner.meta["resubmit"])
        self.assertIn("v1 again (unchanged)", learner.content)
        self.assertEqual(names(events)[-1], "done")

    def test_it_notices_that_nothing_was_written(self) -> None:
        review, _ = self.review(vector_kernel(body="let unused = a[id.x];"))
        self.assertIn("128 of 128 cells of `out` were never written", review.content)
        self.assertIn("Not one cell was written", review.content)


class OfflineMessageTestCase(TutorTestCase):
    def test_it_answers_messages_with_a_short_automatic_note(self) -> None:
        guided = self.start()
        events = read_events(self.say(guided, "Hello?"))
        self.assertEqual(names(events), ["turn", "turn", "done"])
        note = guided.session.turns.order_by("number").last()
        self.assertEqual(note.meta, {"kind": "offline_notice", "automatic": True})
        self.assertIn("guided by the automatic reviewer", note.content)
        self.assertIn("It cannot answer messages", note.content)
        self.assertIn("A hint from the lesson (1 of 4): How many invocations run", note.content)
        self.assertIsNone(guided.pending_turn())

    def test_it_answers_each_question_with_the_next_hint(self) -> None:
        guided = self.start()
        read_events(self.say(guided, "Where do I start?"))
        read_events(self.say(guided, "And then?"))
        note = guided.session.turns.order_by("number").last()
        self.assertIn("(2 of 4): Every invocation has a builtin", note.content)

    def test_learners_see_the_reviewer_and_staff_see_how_to_turn_claude_on(self) -> None:
        guided = self.start()
        for url in (reverse("tutor:index"), self.url(guided, "session")):
            response = self.client.get(url)
            self.assertContains(response, "Guided by the automatic reviewer")
            self.assertNotContains(response, "ANTHROPIC_API_KEY")
            self.assertNotContains(response, "is offline")
            self.assertNotContains(response, "runserver")
        self.client.force_login(self.charlie)
        response = self.client.get(reverse("tutor:index"))
        self.assertContains(response, "Start it with <code>ANTHROPIC_API_KEY</code>")
