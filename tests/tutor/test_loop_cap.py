"""llvmpipe ends every loop after 65,535 iterations: a kernel whose loop is known to run
longer is reported as not run, never as passed, and the review says which loop."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.test import override_settings

from sessions.models import Turn
from tests.tutor.helpers import TutorRunTestCase, read_events, vector_kernel

LONG_LOOP = (
    "var extra = 0.0;\n"
    "    for (var i = 0u; i < 4000000000u; i++) { extra += 0.0; }\n"
    "    out[id.x] = a[id.x] + b[id.x] + extra;"
)
SHORT_LOOP = LONG_LOOP.replace("4000000000u", "1000u")


class LoopCapTestCase(TutorRunTestCase):
    def run_kernel(self, body: str) -> tuple[dict, Turn]:
        guided = self.start()
        events = read_events(self.submit(guided, vector_kernel(body=body)))
        run = next(data for name, data in events if name == "run")
        return run, guided.session.turns.order_by("number").last()

    def test_a_loop_llvmpipe_would_cut_is_not_passed(self) -> None:
        run, review = self.run_kernel(LONG_LOOP)
        self.assertEqual(run["status"], "rejected")
        self.assertIn("**It was not run:** Not run: the loop on line 8", review.content)
        self.assertIn("runs 4,000,000,000 times per invocation", review.content)
        self.assertIn("stops every loop after 65,535 iterations", review.content)
        self.assertIn("How many times must that loop run", review.content)

    def test_a_short_loop_runs_and_passes(self) -> None:
        run, review = self.run_kernel(SHORT_LOOP)
        self.assertEqual(run["status"], "passed")
        self.assertIn("**It passes:**", review.content)


@override_settings(TUTOR_LESSONS_DIR=Path(settings.BASE_DIR) / "fixtures" / "lessons")
class UnguardedOverrunTestCase(TutorRunTestCase):
    """1,024 invocations for 1,000 cells with nothing stopping the last 24: llvmpipe drops
    their writes and the run would pass; it is reported as not run."""

    def test_a_store_past_the_end_without_a_check_is_not_passed(self) -> None:
        guided = self.start("first-compute-shader")
        events = read_events(self.submit(guided, vector_kernel()))
        run = next(data for name, data in events if name == "run")
        self.assertEqual(run["status"], "rejected")
        review = guided.session.turns.order_by("number").last().content
        self.assertIn("1,024 invocations run along x (16 workgroups × 64)", review)
        self.assertIn("stops the last 24 before they store into out[id.x] (line 7)", review)
        self.assertIn("What should an invocation with no cell of its own do", review)

    def test_with_a_bounds_check_it_passes(self) -> None:
        guided = self.start("first-compute-shader")
        body = "if (id.x >= arrayLength(&out)) { return; }\n    out[id.x] = a[id.x] + b[id.x];"
        events = read_events(self.submit(guided, vector_kernel(body=body)))
        run = next(data for name, data in events if name == "run")
        self.assertEqual(run["status"], "passed")
