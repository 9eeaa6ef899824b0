"""Lesson plans, starting a guided session, and signing up."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse
from django.utils.html import escape

from sessions.models import Session, Turn
from sessions.programs import Kernel
from tests.tutor.helpers import LESSONS_DIR, TutorTestCase
from tutor.lessons import load_lessons
from tutor.models import GuidedSession


class StartTestCase(TutorTestCase):
    def test_it_lists_the_lesson_plans(self) -> None:
        self.client.force_login(self.alice)
        response = self.client.get(reverse("tutor:index"))
        self.assertContains(response, "Your first compute shader: adding two vectors")
        self.assertContains(response, "Matrix multiply, one output cell per invocation")
        self.assertContains(response, "Free-form session")
        self.assertContains(response, 'href="/tutor/">Learn with a tutor</a>')

    def test_it_starts_a_lesson(self) -> None:
        guided = self.start("vector-add")
        session = guided.session
        self.assertEqual(session.source, Session.Source.LIVE)
        self.assertEqual(session.visibility, Session.Visibility.PRIVATE)
        self.assertEqual(session.owner, self.alice)
        self.assertEqual(session.learner, "alice")
        self.assertEqual(session.title, "Your first compute shader: adding two vectors")
        lesson = self.lesson()
        kernel = Kernel.objects.get(session=session)
        self.assertEqual(kernel, guided.kernel)
        self.assertEqual(kernel.name, "vector-add")
        self.assertEqual(kernel.harness, lesson.harness)
        self.assertEqual(guided.lesson["slug"], "vector-add")
        self.assertEqual(guided.starter, lesson.starter)

        welcome = session.turns.get()
        self.assertEqual(welcome.role, Turn.Role.TUTOR)
        self.assertEqual(welcome.meta, {"kind": "welcome", "automatic": True})
        self.assertIn("First step: Declare an entry point", welcome.content)

        page = self.client.get(self.url(guided, "session"))
        self.assertContains(page, escape(lesson.starter.splitlines()[0]))
        self.assertContains(page, "Submit &amp; run")
        self.assertContains(
            page, "Explain what @workgroup_size and the dispatch size decide together"
        )

    def test_it_starts_a_free_form_session(self) -> None:
        guided = self.start("free")
        self.assertTrue(guided.is_free_form)
        self.assertEqual(guided.kernel.harness, {})
        self.assertEqual(guided.kernel.name, "kernel")
        page = self.client.get(self.url(guided, "session"))
        self.assertContains(page, "runs your host program and shows what it reads back")

    def test_it_refuses_an_unknown_lesson(self) -> None:
        self.client.force_login(self.alice)
        response = self.client.post(reverse("tutor:start"), {"lesson": "nope"}, follow=True)
        self.assertContains(response, "There is no such lesson")
        self.assertFalse(GuidedSession.objects.exists())

    def test_it_skips_a_broken_lesson_plan(self) -> None:
        folder = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, folder)
        shutil.copy(LESSONS_DIR / "01-vector-add.json", folder)
        (folder / "02-broken.json").write_text("{ not json")
        bad_harness = json.loads((LESSONS_DIR / "02-matmul.json").read_text())
        bad_harness["kernel"]["harness"]["reference"]["name"] = "no_such_reference"
        (folder / "03-bad-harness.json").write_text(json.dumps(bad_harness))
        with override_settings(TUTOR_LESSONS_DIR=folder), self.assertLogs("tutor.lessons") as logs:
            lessons = load_lessons()
        self.assertEqual([lesson.slug for lesson in lessons], ["vector-add"])
        self.assertIn("02-broken.json", logs.output[0])
        self.assertIn("kernel.harness.reference.name", logs.output[1])

    def test_it_lists_the_learners_own_sessions(self) -> None:
        mine = self.start()
        theirs = self.start(user=self.bob)
        self.client.force_login(self.alice)
        response = self.client.get(reverse("tutor:index"))
        self.assertContains(response, self.url(mine, "session"))
        self.assertNotContains(response, self.url(theirs, "session"))


class SignupTestCase(TutorTestCase):
    def test_it_signs_up_and_signs_in(self) -> None:
        response = self.client.post(
            reverse("signup"),
            {"username": "dana", "password1": "kernel-bin-42x", "password2": "kernel-bin-42x"},
        )
        self.assertRedirects(response, reverse("tutor:index"))
        self.assertTrue(User.objects.filter(username="dana").exists())
        self.assertContains(self.client.get(reverse("tutor:index")), "Sign out")

    def test_it_shows_the_forms(self) -> None:
        self.assertContains(self.client.get(reverse("signup")), "Create account")
        login = self.client.get(reverse("login"))
        self.assertContains(login, "Sign in")
        self.assertContains(login, reverse("signup"))

    @override_settings(TUTOR_SIGNUPS_PER_HOUR=2)
    def test_it_limits_sign_ups_per_address(self) -> None:
        for name in ("u1", "u2"):
            self.client.post(
                reverse("signup"),
                {"username": name, "password1": "kernel-bin-42x", "password2": "kernel-bin-42x"},
            )
            self.client.logout()
        response = self.client.post(
            reverse("signup"),
            {"username": "u3", "password1": "kernel-bin-42x", "password2": "kernel-bin-42x"},
        )
        self.assertEqual(response.status_code, 429)
        self.assertContains(response, "Too many sign-ups", status_code=429)
        self.assertFalse(User.objects.filter(username="u3").exists())

    def test_it_ignores_a_foreign_next_url(self) -> None:
        response = self.client.post(
            reverse("signup"),
            {
                "username": "erin",
                "password1": "kernel-bin-42x",
                "password2": "kernel-bin-42x",
                "next": "https://evil.example/",
            },
        )
        self.assertRedirects(response, reverse("tutor:index"))
