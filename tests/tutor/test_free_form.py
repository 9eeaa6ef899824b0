"""Free-form sessions from a template: the buffers, dispatch and reference are set, so a
submission runs and is checked; without a template it is only compiled."""

from __future__ import annotations

from django.urls import reverse

from sessions.models import Turn
from tests.tutor.helpers import TutorRunTestCase, read_events
from tutor.free_form import FREE_FORM_HOST, FREE_FORM_KERNEL_STARTER, TEMPLATES
from tutor.models import GuidedSession

TRANSPOSE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    if (row >= 16u || col >= 32u) { return; }
    out[INDEX] = x[row * 32u + col];
}
"""


class FreeFormTemplateTestCase(TutorRunTestCase):
    def start_from(self, template: str) -> GuidedSession:
        self.client.force_login(self.alice)
        response = self.client.post(
            reverse("tutor:start"), {"lesson": "free", "template": template}
        )
        self.assertEqual(response.status_code, 302)
        return GuidedSession.objects.order_by("-pk").first()

    def run_source(self, guided: GuidedSession, source: str) -> tuple[str, Turn]:
        events = read_events(self.submit(guided, source))
        run = next(data for name, data in events if name == "run")
        return run["status"], guided.session.turns.order_by("number").last()

    def test_the_index_offers_every_template(self) -> None:
        self.client.force_login(self.alice)
        response = self.client.get(reverse("tutor:index"))
        for template in TEMPLATES.values():
            self.assertContains(response, f'<option value="{template.slug}">')

    def test_a_transpose_session_runs_fails_then_passes(self) -> None:
        guided = self.start_from("transpose")
        self.assertTrue(guided.is_free_form)
        self.assertEqual(guided.session.title, "Free-form: Transpose: 16×32 to 32×16")
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "var&lt;storage, read&gt; x: array&lt;f32&gt;;")
        self.assertContains(page, "checks it against the template's reference")
        status, review = self.run_source(guided, TRANSPOSE.replace("INDEX", "row * 32u + col"))
        self.assertEqual(status, "mismatch")
        self.assertIn("It runs, but the results are wrong", review.content)
        status, review = self.run_source(guided, TRANSPOSE.replace("INDEX", "col * 16u + row"))
        self.assertEqual(status, "passed")
        self.assertIn("**It passes:** All 512 cells match", review.content)

    def test_an_unknown_template_is_refused(self) -> None:
        self.client.force_login(self.alice)
        response = self.client.post(reverse("tutor:start"), {"lesson": "free", "template": "x"})
        self.assertRedirects(response, reverse("tutor:index"))
        self.assertFalse(GuidedSession.objects.exists())

    def test_without_a_template_the_learner_writes_the_host_program(self) -> None:
        guided = self.start_from("")
        self.assertEqual(guided.kernel.harness, {})
        self.assertEqual(guided.host_starter, FREE_FORM_HOST)
        self.assertEqual(guided.starter, FREE_FORM_KERNEL_STARTER)
        welcome = guided.session.turns.first().content
        self.assertIn("in the host program its buffers, their inputs, the dispatch", welcome)
        self.assertIn("there is no pass or fail", welcome)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, 'name="host_program"')
        self.assertContains(page, "what it reads back is shown")
        # The reviewer's note promises no reference that is not there.
        self.assertNotContains(page, "reference, cell by cell")


MAIN = "\n@compute @workgroup_size({size})\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n{body}\n}}\n"
# A plain correct kernel per template: each template's reference must agree with it.
SOLUTIONS = {
    "elementwise": (64, "    out[id.x] = a[id.x] + b[id.x];"),
    "reduction": (
        1,
        "    var s = 0.0;\n    for (var i = 0u; i < 1024u; i++) { s += x[i]; }\n    out[0] = s;",
    ),
    "scan": (
        256,
        "    var s = 0.0;\n    for (var i = 0u; i <= id.x; i++) { s += x[i]; }\n    out[id.x] = s;",
    ),
    "matmul": (
        "8, 8",
        "    var s = 0.0;\n    for (var k = 0u; k < 16u; k++) { s += a[id.y * 16u + k] * b[k * 16u + id.x]; }\n"
        "    out[id.y * 16u + id.x] = s;",
    ),
    "histogram": (64, "    atomicAdd(&counts[values[id.x]], 1u);"),
    "convolution": (
        64,
        "    var s = 0.0;\n    for (var k = 0u; k < 5u; k++) { s += x[id.x + k] * w[k]; }\n    out[id.x] = s;",
    ),
    "softmax": (
        1,
        "    let r = id.x * 64u;\n    var m = x[r];\n"
        "    for (var c = 1u; c < 64u; c++) { m = max(m, x[r + c]); }\n"
        "    var t = 0.0;\n    for (var c = 0u; c < 64u; c++) { t += exp(x[r + c] - m); }\n"
        "    for (var c = 0u; c < 64u; c++) { out[r + c] = exp(x[r + c] - m) / t; }",
    ),
}


class TemplateReferencesTestCase(TutorRunTestCase):
    def test_every_template_passes_a_correct_kernel(self) -> None:
        self.client.force_login(self.alice)
        for slug, (size, body) in SOLUTIONS.items():
            with self.subTest(slug):
                self.client.post(reverse("tutor:start"), {"lesson": "free", "template": slug})
                guided = GuidedSession.objects.order_by("-pk").first()
                source = TEMPLATES[slug].bindings + MAIN.format(size=size, body=body)
                events = read_events(self.submit(guided, source))
                run = next(data for name, data in events if name == "run")
                review = guided.session.turns.order_by("number").last().content
                self.assertEqual(run["status"], "passed", review)
