"""Continue with the tutor from a turn of a published session, and submissions shown as
their diff in the chat."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from sessions.models import Session, Turn
from sessions.programs import KernelVersion
from tests.base import ADD_HARNESS, ADD_SOURCE, add_kernel, make_session
from tests.kernels.test_host_program import VECTOR_ADD
from tests.tutor.helpers import (
    FakeAPI,
    TutorRunTestCase,
    TutorTestCase,
    read_events,
    vector_kernel,
)
from tutor import prompts
from tutor.models import GuidedSession


class ContinueTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.origin = make_session("demo", turns=4, title="Adding vectors")
        self.version = add_kernel(self.origin, turn=2)

    def continue_from(self, number: int = 3, slug: str = "demo"):
        return self.client.post(reverse("tutor:continue", args=[slug, number]))

    def test_a_learner_continues_with_the_kernel_as_it_stood_and_a_link_back(self) -> None:
        self.client.force_login(self.alice)
        r = self.continue_from(3)
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertRedirects(r, guided.get_absolute_url())
        self.assertEqual(guided.continued_from, self.origin.turns.get(number=3))
        session = guided.session
        self.assertEqual(session.visibility, Session.Visibility.PRIVATE)
        self.assertEqual(session.owner, self.alice)
        self.assertEqual(guided.kernel.name, "add")
        self.assertEqual(guided.kernel.harness, ADD_HARNESS)
        first = guided.latest_version()
        self.assertEqual((first.number, first.source), (1, ADD_SOURCE))
        welcome = session.turns.get()
        self.assertEqual(welcome.kernel_version, first)
        self.assertIn("Continuing from turn 3 of “Adding vectors”", welcome.content)

        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, 'href="/s/demo/?turn=3#turn-3"')
        self.assertContains(page, "out[id.x] = a[id.x] + b[id.x];\n}\n</textarea>")
        # The origin is untouched.
        self.assertEqual(self.origin.turns.count(), 4)

    def test_the_earlier_turns_are_summarised_for_claude_in_the_cached_lesson_block(
        self,
    ) -> None:
        self.client.force_login(self.alice)
        self.continue_from(3)
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertIn("#1 learner: Turn 1 text", guided.earlier_turns)
        self.assertIn("#2 tutor: Turn 2 text [kernel add v1]", guided.earlier_turns)
        self.assertIn("#3 learner: Turn 3 text", guided.earlier_turns)
        self.assertNotIn("Turn 4 text", guided.earlier_turns)
        _rules, lesson = prompts.system_blocks(guided)
        self.assertIn("<earlier_session", lesson["text"])
        self.assertIn("Turn 2 text", lesson["text"])
        # Without a lesson plan, the tutor is told about the harness the kernel keeps.
        self.assertIn("@group(0) @binding(2) out", lesson["text"])
        self.assertEqual(lesson["cache_control"], prompts.CACHE)

    def test_the_lesson_plan_of_a_guided_session_comes_along(self) -> None:
        earlier = self.start("vector-add", user=self.bob)
        earlier.session.publish()
        self.client.force_login(self.alice)
        self.continue_from(1, earlier.session.slug)
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertEqual(guided.lesson_slug, "vector-add")
        self.assertEqual(guided.lesson, earlier.lesson)
        self.assertIn("lesson plan", guided.session.turns.get().content)

    def test_a_host_program_comes_along_and_stays_with_each_submission(self) -> None:
        KernelVersion.objects.filter(pk=self.version.pk).update(host_program=VECTOR_ADD)
        self.client.force_login(self.alice)
        self.continue_from(2)
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertEqual(guided.latest_version().host_program, VECTOR_ADD)
        self.assertIn("and its host program", guided.session.turns.get().content)

    def test_only_signed_in_readers_of_the_session_may_continue(self) -> None:
        r = self.continue_from(3)
        self.assertEqual(r.status_code, 302)
        self.assertIn("/accounts/login/", r["Location"])
        self.client.force_login(self.alice)
        self.assertEqual(
            self.client.get(reverse("tutor:continue", args=["demo", 3])).status_code, 405
        )
        self.assertEqual(self.continue_from(9).status_code, 404)
        Session.objects.filter(pk=self.origin.pk).update(
            visibility=Session.Visibility.PRIVATE, owner=self.bob
        )
        self.assertEqual(self.continue_from(3).status_code, 404)
        self.assertFalse(GuidedSession.objects.exists())

    def test_the_link_back_goes_when_the_origin_becomes_private(self) -> None:
        self.client.force_login(self.alice)
        self.continue_from(3)
        guided = GuidedSession.objects.get(learner=self.alice)
        Session.objects.filter(pk=self.origin.pk).update(
            visibility=Session.Visibility.PRIVATE, owner=self.bob
        )
        page = self.client.get(guided.get_absolute_url())
        self.assertEqual(page.status_code, 200)
        self.assertNotContains(page, 'href="/s/demo/?turn=3#turn-3"')

    def test_the_replay_page_offers_it(self) -> None:
        page = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(page, "</a> to continue with the tutor from here:")
        self.client.force_login(self.alice)
        page = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(page, 'action="/tutor/continue/demo/2/"')
        self.assertContains(page, "Continue with the tutor from turn 2")


class SubmissionDiffTestCase(TutorRunTestCase):
    def test_a_submission_shows_its_diff_not_the_whole_kernel_again(self) -> None:
        guided = self.start("vector-add")
        first = vector_kernel(body="out[id.x] = a[id.x] - b[id.x];")
        second = vector_kernel(body="out[id.x] = a[id.x] + b[id.x];")
        with FakeAPI().patch():
            read_events(self.submit(guided, first))
            read_events(self.submit(guided, second))
        turns = Turn.objects.filter(session=guided.session, meta__kind="submission")
        one, two = turns.order_by("number")
        # The first: what changed from the starter code.
        self.assertIn("Submitted **vector-add** v1, the changes to the starter code:", one.content)
        self.assertIn("```diff\n--- starter\n+++ v1\n", one.content)
        # The second: only the changed line, not the kernel again.
        self.assertIn("Submitted **vector-add** v2, the changes:", two.content)
        self.assertIn("-    out[id.x] = a[id.x] - b[id.x];", two.content)
        self.assertIn("+    out[id.x] = a[id.x] + b[id.x];", two.content)
        self.assertNotIn("@group(0) @binding(0)", two.content)
        self.assertIn('<span class="gi">', two.html)


@override_settings(TUTOR_LESSONS_DIR=Path(settings.BASE_DIR) / "fixtures" / "lessons")
class ContinueKeepsTheLessonTestCase(TutorRunTestCase):
    def test_from_a_guided_session_the_versions_and_objectives_carry_on(self) -> None:
        earlier = self.start("first-compute-shader", user=self.bob)
        guarded = vector_kernel(
            body="if (id.x >= arrayLength(&out)) { return; }\n    out[id.x] = a[id.x] + b[id.x];"
        )
        with FakeAPI().patch():
            read_events(self.submit(earlier, vector_kernel(body="out[id.x] = a[id.x];")))
            read_events(self.submit(earlier, vector_kernel(body="out[id.x] = b[id.x];")))
            read_events(self.submit(earlier, guarded))
        earlier.session.publish()
        review = earlier.session.turns.filter(meta__kind="review").order_by("number").last()
        self.assertEqual(review.kernel_version.number, 3)

        self.client.force_login(self.alice)
        self.client.post(reverse("tutor:continue", args=[earlier.session.slug, review.number]))
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertEqual(guided.lesson_slug, "first-compute-shader")
        first = guided.latest_version()
        self.assertEqual((first.number, first.source), (3, guarded))
        self.assertIn("continued from v3", first.note)
        welcome = guided.session.turns.get()
        self.assertIn(
            "this session continues from v3, so your next submission is v4", welcome.content
        )
        self.assertIn("Objectives met so far: Tell workgroups from invocations", welcome.content)
        self.assertIn("Use arrayLength on a runtime-sized storage array. (v3)", welcome.content)
        page = self.client.get(guided.get_absolute_url())
        self.assertEqual(page.content.decode().count('<li class="met">'), 2)
        self.assertContains(page, "last submitted: v3")

        with FakeAPI().patch():
            read_events(self.submit(guided, guarded.replace("+ b[id.x]", "+ b[id.x] ")))
        self.assertEqual(guided.latest_version().number, 4)
        submission = guided.session.turns.filter(meta__kind="submission").get()
        self.assertIn("Submitted **add** v4, the changes:", submission.content)

    def test_from_a_showcase_turn_the_lesson_of_its_kernel_comes_along(self) -> None:
        origin = make_session("showcase", turns=3, title="Adding vectors")
        version = add_kernel(origin, turn=2)
        self.assertEqual(version.kernel.name, "add")
        self.client.force_login(self.alice)
        self.client.post(reverse("tutor:continue", args=["showcase", 3]))
        guided = GuidedSession.objects.get(learner=self.alice)
        self.assertEqual(guided.lesson_slug, "first-compute-shader")
        self.assertTrue(guided.lesson["objectives"])
        self.assertIn("lesson plan *A first compute shader", guided.session.turns.get().content)
        page = self.client.get(guided.get_absolute_url())
        self.assertContains(page, "Lesson plan")
