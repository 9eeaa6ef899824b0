"""A learner names their session, and takes a published one back to private: its pages
and embeds then answer as for any private session."""

from __future__ import annotations

from django.urls import reverse

from sessions.models import Session
from tests.tutor.helpers import TutorTestCase, read_events


class TitleAndUnpublishTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.guided = self.start()
        read_events(self.say(self.guided, "My first question"))

    def test_the_learner_renames_the_session(self) -> None:
        response = self.client.post(
            self.url(self.guided, "rename"), {"title": "  Vector add,\n my way  "}
        )
        self.assertRedirects(response, self.guided.get_absolute_url())
        self.guided.session.refresh_from_db()
        self.assertEqual(self.guided.session.title, "Vector add, my way")
        self.assertContains(self.client.get(self.guided.get_absolute_url()), "Vector add, my way")

    def test_an_empty_or_long_title_is_refused(self) -> None:
        for title in ("   ", "x" * 201):
            self.client.post(self.url(self.guided, "rename"), {"title": title})
            self.guided.session.refresh_from_db()
            self.assertEqual(self.guided.session.title, self.lesson().title)

    def test_only_the_learner_renames(self) -> None:
        self.client.force_login(self.bob)
        response = self.client.post(self.url(self.guided, "rename"), {"title": "Bob's now"})
        self.assertIn(response.status_code, (403, 404))
        self.guided.session.refresh_from_db()
        self.assertNotEqual(self.guided.session.title, "Bob's now")

    def test_a_published_session_goes_back_to_private(self) -> None:
        session = self.guided.session
        self.client.post(self.url(self.guided, "publish"), {"visibility": "public"})
        page = self.client.get(self.guided.get_absolute_url())
        self.assertContains(page, "Make private again")
        response = self.client.post(self.url(self.guided, "unpublish"))
        self.assertRedirects(response, self.guided.get_absolute_url())
        session.refresh_from_db()
        self.assertEqual(session.visibility, Session.Visibility.PRIVATE)
        self.assertNotContains(self.client.get(self.guided.get_absolute_url()), "Make private")

        self.client.logout()
        self.assertNotContains(self.client.get(reverse("sessions:index")), session.title)
        self.assertEqual(self.client.get(session.get_absolute_url()).status_code, 404)
        embed = self.client.get(
            reverse("sessions:embed", args=[session.slug]), {"from": 1, "to": 3}
        )
        self.assertEqual(embed.status_code, 404)
