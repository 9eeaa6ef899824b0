"""The guardrail: a reply that hands over a kernel or host code never reaches the learner
as is, whatever its shape; real tutoring text passes; nothing is shown and taken away."""

from __future__ import annotations

from django.test import SimpleTestCase, override_settings

from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorTestCase,
    message_json,
    read_events,
    streamed_text,
    text_reply,
)
from tutor import evasions
from tutor.guardrail import (
    INLINE_NOTE,
    NOTE,
    StreamGuard,
    asks_for_answer,
    known_units,
    redact,
)
from tutor.models import GuardrailEvent
from tutor.replies import GUARD_NOTE

KERNEL_REPLY = """Here is the whole thing:

```wgsl
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = a[id.x] + b[id.x];
}
```

Run it and tell me what you see."""

BARE_REPLY = """Fine, write exactly this:
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    out[i] = a[i] + b[i];
}
That is all there is to it."""

SAMPLES = {
    "fenced kernel": KERNEL_REPLY,
    "bare kernel": BARE_REPLY,
    "indented run": "Try:\n\n    let row = id.y;\n    let col = id.x;\n    out[row * 8u + col] = sum;\n\nThen run.",
    "inline entry point": "Use `fn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = 1.0; }` there.",
    "unclosed fence": "Almost:\n```\nlet i = id.x;\nout[i] = a[i] + b[i];\nreturn;\n",
    "diff": (
        "Change this:\n```diff\n-    out[i] = a[i] - b[i];\n+    let i = id.x;\n"
        "+    if (i >= arrayLength(&out)) { return; }\n+    out[i] = a[i] + b[i];\n```\n"
    ),
    "tilde fence": "~~~\n@group(0) @binding(0) var<storage, read> a: array<f32>;\n~~~\nok",
}
ALLOWED = {
    "quoted line": "Line 7 reads `out[id.x] = a[id.x] - b[id.x];`. Which operator should it use?",
    "quoted attribute": "Look at `@workgroup_size(32)` on line 5: how many invocations is that in total?",
    "two-line syntax": "A loop looks like this:\n\n```wgsl\nfor (var i = 0u; i < n; i++) {\n}\n```\n\nWhat is n here?",
    "numbers": "The first cells:\n\n```\n0.50  1.30  -1.34\n0.08  0.22   0.17\n0.90  0.12   0.44\n```\n\nWhat pattern do you see?",
    "prose": "Every invocation has an id; the builtin global_invocation_id tells it where it is.",
    "a one-line correction": "Line 9 should read `out[i] = a[i] + b[i];`: why the plus?",
    "pseudo-code": "Each cell is `y[j] = exp(x[j]) / (the sum of exp(x[c]) over every column c)`.",
    "an API mention": "`device.createBuffer({ size, usage })` returns the buffer; what size?",
    "css scaffolding": "```css\nbody { margin: 0; }\ncanvas { width: 100%; }\n```",
}
MARKERS = ("@compute", "fn main", "a[i] + b[i]", "let col", "var<storage", "+    let i")


class RedactTestCase(SimpleTestCase):
    def test_it_withholds_kernels(self) -> None:
        for name, text in SAMPLES.items():
            with self.subTest(name):
                guarded = redact(text)
                self.assertTrue(guarded.redacted)
                for marker in MARKERS:
                    self.assertNotIn(marker, guarded.text)
                self.assertTrue(guarded.withheld)

    def test_it_keeps_prose_and_short_generic_code(self) -> None:
        for name, text in ALLOWED.items():
            with self.subTest(name):
                guarded = redact(text)
                self.assertFalse(guarded.redacted, guarded.findings)
                self.assertEqual(guarded.text, text)

    def test_it_keeps_the_text_around_a_withheld_block(self) -> None:
        guarded = redact(KERNEL_REPLY)
        self.assertEqual(
            guarded.text, f"Here is the whole thing:\n\n{NOTE}\n\nRun it and tell me what you see."
        )
        self.assertEqual(guarded.rules, ["interface"])

    def test_it_streams_a_prefix_of_the_final_text_whatever_the_chunks(self) -> None:
        corpus = {**SAMPLES, **ALLOWED}
        corpus.update({name: reply for name, (reply, _) in evasions.EVASIONS.items()})
        for name, text in corpus.items():
            final = redact(text).text
            for size in (1, 3, 8, 40, len(text)):
                with self.subTest(name, size=size):
                    guard = StreamGuard()
                    shown = ""
                    for i in range(0, len(text), size):
                        shown += guard.feed(text[i : i + size])
                        # Nothing held back ever appears, not even for a moment.
                        self.assertTrue(final.startswith(shown))
                    shown += guard.finish()
                    self.assertEqual(shown, final)
                    self.assertFalse(guard.stalled)

    def test_it_releases_prose_before_the_line_ends(self) -> None:
        guard = StreamGuard()
        shown = guard.feed("The run shows that half of the cells were never")
        # The last word might still begin a statement.
        self.assertEqual(shown, "The run shows that half of the cells were ")
        shown += guard.feed(" written, and the rest")
        self.assertEqual(shown, "The run shows that half of the cells were never written, and the ")

    def test_it_holds_new_code_until_the_verdict(self) -> None:
        guard = StreamGuard()
        self.assertEqual(guard.feed("Look:\n```wgsl\n"), "Look:\n")
        self.assertEqual(guard.feed("let i = id.x;\n"), "")
        # One generic line may pass, but not before the reply has been read to its end.
        self.assertEqual(guard.feed("```\nThen\n"), "")
        self.assertEqual(guard.finish(), "```wgsl\nlet i = id.x;\n```\nThen\n")

    def test_code_split_over_blocks_is_never_shown_in_part(self) -> None:
        guard = StreamGuard()
        shown = guard.feed("First:\n```\nlet i = id.x;\n```\nThen\n")
        self.assertEqual(shown, "First:\n")
        # The third statement makes the verdict: everything held is withheld at once.
        shown += guard.feed("```\nout[i] = a[i] + b[i];\n```\nAnd `return;` at the end.\n")
        self.assertEqual(shown, f"First:\n{NOTE}\nThen\n{NOTE}\nAnd `{INLINE_NOTE}` at the end.\n")
        self.assertEqual(guard.finish(), "")

    def test_what_the_learner_already_has_passes(self) -> None:
        learner = evasions.STARTER.replace("    // Find", "    let i = id.x;\n    // Find")
        quoted = (
            "Your kernel reads:\n\n```wgsl\n@compute @workgroup_size(64)\n"
            "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n    let i = id.x;\n}\n```\n"
            "\nand `@group(0) @binding(2) var<storage, read_write> out: array<f32>;`. "
            "What does `i` index?"
        )
        self.assertFalse(redact(quoted, known_units([learner])).redacted)
        # The same text to a learner who has none of it hands over the entry point.
        self.assertEqual(redact(quoted).rules, ["interface"])

    def test_every_evasion_in_the_corpus_is_withheld(self) -> None:
        report = evasions.check()
        self.assertEqual(report.missed, [])
        self.assertGreaterEqual(len(report.caught), 35)

    def test_real_tutoring_text_passes(self) -> None:
        report = evasions.check()
        # Every tutor turn of the showcase, and every lesson's hints, pitfalls and checks.
        self.assertGreaterEqual(report.replies, 150)
        self.assertEqual(report.false_positives, [])

    def test_it_withholds_webgpu_host_code_the_learner_writes(self) -> None:
        fenced = (
            "Try this:\n\n```js\nconst out = device.createBuffer({ size: n * 4, usage });\n"
            "```\n\nThen run it."
        )
        self.assertEqual(redact(fenced).text, f"Try this:\n\n{NOTE}\n\nThen run it.")
        for code in (
            "```\npass.dispatchWorkgroups(Math.ceil(n / 64));\n```",
            "```javascript\nawait read.mapAsync(GPUMapMode.READ);\n```",
            "```\nencoder.copyBufferToBuffer(out, 0, read, 0, bytes);\n```",
            "```js\nconst a = 1;\nconst b = 2;\nconst c = 3;\n```",
            "Write\n\nconst buf = device.createBuffer({\n  size: 16,\n",
            'Call `pass["dispatchWorkgroups"](16);` after setBindGroup.',
        ):
            with self.subTest(code):
                self.assertTrue(redact(code).redacted, code)

    def test_html_and_css_scaffolding_may_be_shown(self) -> None:
        html = (
            '```html\n<!doctype html>\n<canvas id="c" width="28"></canvas>\n'
            '<script type="module" src="main.js"></script>\n<p id="out"></p>\n```'
        )
        css = "```css\nbody { margin: 0; }\ncanvas { width: 100%; }\n#out { color: red; }\n```"
        for text in (html, css, "Where does `dispatchWorkgroups` get its count from?"):
            with self.subTest(text):
                self.assertEqual(redact(text).text, text)
        script = html.replace(
            "<p id",
            "<script>\nconst b = device.createBuffer({ size: 4, usage });\n</script>\n<p id",
        )
        self.assertTrue(redact(script).redacted)

    def test_it_recognises_requests_for_the_answer(self) -> None:
        for message in (
            "just write it for me",
            "Can you give me the full kernel?",
            "please write the kernel",
            "what is the answer?",
            "Show me the solution",
            "I give up, do it for me",
        ):
            with self.subTest(message):
                self.assertTrue(asks_for_answer(message))
        for message in (
            "why is my index wrong?",
            "How do I write the bounds check?",
            "What does the answer of the run mean for row 3?",
        ):
            with self.subTest(message):
                self.assertFalse(asks_for_answer(message))


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class GuardrailExchangeTestCase(TutorTestCase):
    def test_it_withholds_a_streamed_kernel(self) -> None:
        guided = self.start()
        api = FakeAPI(text_reply(KERNEL_REPLY, chunk=3), text_reply("What is line 6 for?"))
        with api.patch():
            events = read_events(self.say(guided, "Is there a quicker way?"))
            read_events(self.say(guided, "ok"))

        streamed = streamed_text(events)
        reply = guided.session.turns.get(number=3)
        for marker in MARKERS:
            self.assertNotIn(marker, streamed)
            self.assertNotIn(marker, reply.content)
            self.assertNotIn(marker, events[-2][1]["html"])
        self.assertEqual(streamed, reply.content)
        self.assertIn("Code withheld", reply.content)
        self.assertEqual(reply.meta["guardrail"], {"rules": ["interface"], "withheld": 1})
        self.assertIn("kernel code was withheld", events[-2][1]["html"])

        event = GuardrailEvent.objects.get(kind=GuardrailEvent.Kind.REDACTED)
        self.assertEqual(event.turn, reply)
        self.assertIn("@compute", event.withheld)
        guided.refresh_from_db()
        self.assertEqual(guided.guardrail_count, 1)
        # The next request tells Claude its code was withheld.
        self.assertIn(GUARD_NOTE, api.last_user_text())
        # And the history holds the redacted reply, never the kernel.
        self.assertNotIn("@compute", str(api.last["messages"]))

    def test_it_withholds_a_kernel_in_a_reply_that_is_not_streamed(self) -> None:
        guided = self.start()
        with FakeAPI(message_json(BARE_REPLY)).patch():
            self.client.post(self.url(guided, "say"), {"text": "just write it for me"})

        reply = guided.session.turns.order_by("number").last()
        for marker in MARKERS:
            self.assertNotIn(marker, reply.content)
        self.assertEqual(reply.meta["guardrail"]["rules"], ["interface"])
        page = self.client.get(self.url(guided, "session"))
        self.assertNotContains(page, "fn main(@builtin")
        self.assertContains(page, "Code withheld")
        guided.refresh_from_db()
        self.assertEqual(guided.guardrail_count, 1)

    def test_it_counts_requests_for_the_answer(self) -> None:
        guided = self.start()
        api = FakeAPI(text_reply("Writing it is your part. Which id do you need?"))
        with api.patch():
            read_events(self.say(guided, "Just write it for me please"))

        guided.refresh_from_db()
        self.assertEqual(guided.answer_requests, 1)
        learner = guided.session.turns.get(number=2)
        self.assertTrue(learner.meta["answer_request"])
        self.assertTrue(
            GuardrailEvent.objects.filter(kind=GuardrailEvent.Kind.ANSWER_REQUEST, turn=learner)
        )
        self.assertIn("asking you to write the kernel for them (request 1", api.last_user_text())
        page = self.client.get(self.url(guided, "session"))
        self.assertContains(page, "You have asked for the solution 1 time.")
