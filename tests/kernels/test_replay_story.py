"""Replay pages lead with the picture and tell the lesson's story; warnings only where
they could mislead; naga's words read as code."""

import re
from typing import Any

from django.template.loader import render_to_string
from django.test import SimpleTestCase

from kernels import pictures
from kernels.engine.outcome import WarningCode
from kernels.engine.run_warnings import coded, unused_binding, warnings_of
from pages.outcome_context import shown_warnings
from pages.templatetags.kernelbin import code_spans, naga_text
from sessions.models import Turn
from tests.base import BaseTestCase, add_kernel, make_session, store_run, stored_outcome
from tests.kernels.test_replay_embed import OUTPUT

LEGACY_OUT_OF_BOUNDS = (
    "Out-of-bounds writes are silently dropped on this backend (llvmpipe), so a missing "
    "bounds check does not show here."
)
LEGACY_LOOP_CAP = (
    "llvmpipe stops any loop after 65,535 iterations per invocation, so a mismatch in a "
    "long loop may not happen on a real GPU."
)
WHERE = {"kernel": "self", "entry_point": "main", "line": 4}
LOOP_CAP = coded(WarningCode.LOOP_CAP, {**WHERE, "condition": "i < dims.k"})
DROPPED = coded(WarningCode.DROPPED_WRITES, {**WHERE, "buffer": "out", "index": "i"})
UNUSED = unused_binding(1, "self", 0, 3, "extra")


class WarningsTestCase(SimpleTestCase):
    def shown(self, status: str, warnings: list | None = None) -> list[str]:
        outcome = {"status": status, "warnings": warnings or [DROPPED, LOOP_CAP, UNUSED]}
        return [w["code"] for w in shown_warnings(stored_outcome(outcome))]

    def test_nothing_ran_so_the_backend_cannot_mislead(self) -> None:
        for status in ("compile_error", "pipeline_error", "rejected"):
            with self.subTest(status=status):
                self.assertEqual(self.shown(status), ["unused_binding"])

    def test_the_loop_cap_only_beside_a_wrong_result(self) -> None:
        self.assertNotIn("llvmpipe_loop_cap", self.shown("passed"))
        self.assertIn("llvmpipe_loop_cap", self.shown("mismatch"))
        self.assertIn("llvmpipe_dropped_writes", self.shown("passed"))

    def test_sentences_of_runs_stored_before_codes_are_read_as_codes(self) -> None:
        legacy = [LEGACY_OUT_OF_BOUNDS, LEGACY_LOOP_CAP, "Pass 1: binding 3 unused"]
        self.assertEqual(
            [w["code"] for w in warnings_of({"warnings": legacy})],
            ["llvmpipe_dropped_writes", "llvmpipe_loop_cap", "note"],
        )
        # The old warning of dropped writes named no store: it said so of every kernel.
        self.assertEqual(self.shown("mismatch", legacy), ["llvmpipe_loop_cap", "note"])

    def test_the_page_shows_the_text_and_the_code(self) -> None:
        html = render_to_string(
            "kernels/_outcome.html",
            {
                "warnings": shown_warnings(
                    stored_outcome({"status": "passed", "warnings": [DROPPED]})
                )
            },
        )
        self.assertIn('data-code="llvmpipe_dropped_writes"', html)
        self.assertIn("out[i] on line 4", html)


class TextTestCase(SimpleTestCase):
    def test_nagas_headline_goes_and_the_frame_stays(self) -> None:
        text = "Shader '' parsing error: expected `;`\n   ┌─ wgsl:8:5\n 8 │ x\n"
        self.assertEqual(naga_text(text), "   ┌─ wgsl:8:5\n 8 │ x")
        self.assertEqual(
            naga_text("Binding size 12 is less than 16"), "Binding size 12 is less than 16"
        )

    def test_quoted_code_shows_as_code_and_the_rest_is_escaped(self) -> None:
        self.assertEqual(
            code_spans("convert `f32` to `i32` <b>"),
            "convert <code>f32</code> to <code>i32</code> &lt;b&gt;",
        )


class PicturesTestCase(SimpleTestCase):
    def test_a_heatmap_has_axes_a_scale_and_values_on_hover(self) -> None:
        [figure] = pictures.figures(stored_outcome({"outputs": [OUTPUT]}))
        expected, got, error = (str(svg) for _, svg in figure["panels"])
        self.assertIn("<title>[1, 2] expected 1, got 5</title>", got)
        self.assertIn("<title>[0, 0] expected 0, got 0</title>", expected)
        self.assertEqual(len(re.findall("<title>", error)), 6)
        self.assertIn('text-anchor="end" fill="currentColor">1</text>', got)  # row 1
        self.assertEqual(len(figure["scales"]), 2)
        self.assertIn(">-5</text>", str(figure["scales"][0]))
        self.assertIn(">4</text>", str(figure["scales"][1]))  # the worst error

    def test_a_large_output_that_is_all_right_is_one_line(self) -> None:
        output = {
            "name": "probs",
            "shape": [1000, 10],
            "count": 10000,
            "bad": 0,
            "grid": {"rows": 63, "cols": 10, "cells": "." * 630, "block": [16, 1]},
        }
        [figure] = pictures.figures(stored_outcome({"outputs": [output]}))
        self.assertEqual(figure, {"title": "probs: all 10,000 values right", "summary": True})

    def test_a_classifier_is_shown_by_its_labelled_confusion_matrix(self) -> None:
        output = {
            "name": "probs",
            "shape": [1000, 10],
            "count": 10000,
            "bad": 40,
            "grid": {"rows": 63, "cols": 10, "cells": "x" * 630, "block": [16, 1]},
        }
        confusion = [[5 if r == c else 0 for c in range(10)] for r in range(10)]
        report = {"kind": "classification", "accuracy": 0.5, "count": 1000, "confusion": confusion}
        summary, matrix = pictures.figures(stored_outcome({"outputs": [output], "report": report}))
        self.assertTrue(summary["summary"])
        self.assertIn("predicted digit", str(matrix["svg"]))
        self.assertIn("true digit", str(matrix["svg"]))
        self.assertIn("<title>5 × right</title>", str(matrix["svg"]))
        self.assertEqual(
            pictures.headline(stored_outcome({"outputs": [output], "report": report})), matrix
        )

    def test_a_large_wrong_output_says_where_on_hover(self) -> None:
        output: Any = {
            "name": "y",
            "shape": [4096],
            "count": 4096,
            "bad": 64,
            "grid": {"rows": 1, "cols": 64, "cells": "x" + "." * 63, "block": [1, 64]},
        }
        [figure] = pictures.figures(stored_outcome({"outputs": [output]}))
        self.assertIn("<title>[0–63]: wrong</title>", str(figure["svg"]))
        # A run stored before blocks were counted: the worst cell colours its square.
        self.assertIn("each square stands for 64 values, coloured by the worst", figure["title"])
        output["grid"]["counts"] = {"x": [64] + [0] * 63}
        [figure] = pictures.figures(stored_outcome({"outputs": [output]}))
        self.assertIn("<title>[0–63]: 64 wrong, 0 right</title>", str(figure["svg"]))
        self.assertIn("each square stands for 64 values, filled in proportion", figure["title"])


class ReplayPageStoryTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=5, title="Adding arrays")
        self.version = add_kernel(self.session, turn=2)
        self.version.expected_status = "mismatch"
        self.version.note = "bug: `b` is read twice"
        self.version.save()
        Turn.objects.filter(session=self.session, number=3).update(role="tutor")

    def test_the_story_is_told_and_checked_against_the_run(self) -> None:
        store_run(self.version, "mismatch", "1 of 6 cells wrong.", outputs=[OUTPUT])
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(
            r, "<strong>The bug this lesson is about:</strong> <code>b</code> is read twice"
        )
        self.assertContains(r, '<span class="intent-check ok">This run shows it.</span>')
        body = r.content.decode()
        # The picture comes before the table of numbers.
        self.assertLess(body.index('<figure class="replay-figure">'), body.index("first-bad"))

    def test_a_run_that_does_not_bear_the_story_out_says_so(self) -> None:
        store_run(self.version, "passed")
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "The lesson expects “wrong results”; this run ended in “passed”.")

    def test_it_links_to_the_tutors_answer_and_can_be_embedded(self) -> None:
        store_run(self.version, "mismatch", outputs=[OUTPUT])
        r = self.client.get("/s/demo/turns/2/replay/")
        # Turn 2 is the tutor's (make_session alternates), so it is its own answer.
        self.assertContains(r, 'The tutor\'s answer: <a href="/s/demo/?turn=2#turn-2">turn 2</a>')
        self.assertContains(
            r,
            'type="application/json+oembed" href="http://testserver/oembed/?url=http%3A%2F%2F'
            'testserver%2Fs%2Fdemo%2Fturns%2F2%2Freplay%2F&amp;format=json"',
        )
        self.assertContains(r, "kernelbin-embed")
