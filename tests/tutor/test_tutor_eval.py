"""manage.py tutor_eval: the recorded situations through the automatic reviewer, and
through Claude (here the fake Messages API), scored and tabled."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from tests.tutor.helpers import FAKE_KEY, FakeAPI, TutorRunTestCase, text_reply
from tutor.evaluation import SITUATIONS_DIR, load_situations

LESSONS = Path(settings.BASE_DIR) / "fixtures" / "lessons"


@override_settings(TUTOR_LESSONS_DIR=LESSONS)
class TutorEvalTestCase(TutorRunTestCase):
    def eval(self, directory: Path = SITUATIONS_DIR) -> str:
        out = io.StringIO()
        call_command("tutor_eval", situations=directory, stdout=out)
        return out.getvalue()

    def test_there_are_eight_to_twenty_four_situations(self) -> None:
        situations = load_situations()
        self.assertTrue(8 <= len(situations) <= 24)
        for s in situations:
            self.assertTrue({"lesson", "kernel", "message", "concepts", "evidence"} <= set(s))

    def test_the_automatic_reviewer_is_scored(self) -> None:
        output = self.eval()
        self.assertIn("Tutor: the automatic reviewer", output)
        self.assertRegex(output, r"local-invocation-id +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"host-math-floor-dispatch +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"host-readback-without-map-read +1 +1 +1 +1 +1 +5/5")
        # The failure patterns learners meet: races, off-by-one rows, a fixed bug followed
        # by a new one, a version that only adds a guard; each reply is honest.
        self.assertRegex(output, r"race-without-barriers +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"sum-tree-without-barriers +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"off-by-one-rows +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"fixed-bug-then-a-new-one +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"only-adds-a-guard +1 +1 +1 +1 +1 +5/5")
        # Row 0 right, every other row wrong: it asks about the row stride.
        self.assertRegex(output, r"wrong-stride +1 +1 +1 +1 +1 +5/5")
        self.assertRegex(output, r"total +94/95")
        self.assertNotIn("Side by side", output)

    def test_a_reply_that_hands_over_a_kernel_scores_no_point_for_it(self) -> None:
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        situation = load_situations()[0]
        (directory / "01.json").write_text(json.dumps(situation))
        kernel = (
            "Here it is:\n\n```wgsl\n@compute @workgroup_size(64)\n"
            "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
            "    out[id.x] = a[id.x] + b[id.x];\n}\n```\n"
        )
        with override_settings(ANTHROPIC_API_KEY=FAKE_KEY), FakeAPI(text_reply(kernel)).patch():
            output = self.eval(directory)
        self.assertIn("Tutor: Claude", output)
        self.assertRegex(output, r"local-invocation-id +0 ")

    def test_a_false_claim_fails_the_situation_and_claude_is_scored_beside_the_reviewer(
        self,
    ) -> None:
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        race = next(s for s in load_situations() if s["name"] == "race-without-barriers")
        (directory / "01.json").write_text(json.dumps(race))
        # Names the race and the line, but claims a shift the data contradicts.
        claim = (
            "There is a race on scratch: line 28 reads scratch[lid + s] with no "
            "workgroupBarrier() before it. Also, each wrong cell holds the value expected "
            "6 cells after it. Where must the invocations wait for each other?"
        )
        with override_settings(ANTHROPIC_API_KEY=FAKE_KEY), FakeAPI(text_reply(claim)).patch():
            output = self.eval(directory)
        self.assertIn("Tutor: the automatic reviewer", output)
        self.assertIn("Tutor: Claude", output)
        self.assertRegex(
            output, r"race-without-barriers +1 +1 +1 +1 +0 +0/5  false: cells after it"
        )
        self.assertRegex(output, r"Side by side\nsituation +the automatic reviewer +Claude")
        self.assertRegex(output, r"race-without-barriers +5/5 +0/5")
