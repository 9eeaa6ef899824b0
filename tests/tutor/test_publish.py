"""Publishing a guided session makes it an archive entry like any other."""

from __future__ import annotations

from django.urls import reverse

from sessions.models import Session
from tests.tutor.helpers import TutorTestCase, read_events


class PublishTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.guided = self.start()
        read_events(self.say(self.guided, "My first question"))

    def test_it_publishes_to_the_archive(self) -> None:
        session = self.guided.session
        self.assertEqual(session.source, Session.Source.LIVE)
        self.assertNotContains(self.client.get(reverse("sessions:index")), session.title)

        response = self.client.post(self.url(self.guided, "publish"), {"visibility": "public"})
        self.assertRedirects(response, session.get_absolute_url())
        session.refresh_from_db()
        self.assertEqual(session.visibility, Session.Visibility.PUBLIC)
        self.assertIsNotNone(session.published_at)

        self.client.logout()
        self.assertContains(self.client.get(reverse("sessions:index")), session.title)
        detail = self.client.get(session.get_absolute_url())
        self.assertContains(detail, "My first question")
        self.assertContains(detail, 'id="turn-2"')
        embed = self.client.get(
            reverse("sessions:embed", args=[session.slug]), {"from": 1, "to": 3}
        )
        self.assertContains(embed, "My first question")

    def test_it_publishes_unlisted(self) -> None:
        self.client.post(self.url(self.guided, "publish"), {"visibility": "unlisted"})
        session = self.guided.session
        session.refresh_from_db()
        self.assertEqual(session.visibility, Session.Visibility.UNLISTED)
        self.client.logout()
        self.assertNotContains(self.client.get(reverse("sessions:index")), session.title)
        self.assertEqual(self.client.get(session.get_absolute_url()).status_code, 200)

    def test_it_freezes_turn_numbers(self) -> None:
        self.client.post(self.url(self.guided, "publish"), {"visibility": "public"})
        turn = Session.objects.get(pk=self.guided.session_id).turns.get(number=2)
        turn.number = 7
        with self.assertRaisesMessage(Exception, "frozen"):
            turn.save()
        # The conversation can go on: new turns get new numbers.
        read_events(self.say(self.guided, "After publishing"))
        self.assertEqual(self.guided.session.turns.get(content="After publishing").number, 4)

    def test_it_refuses_private_as_a_publication(self) -> None:
        response = self.client.post(
            self.url(self.guided, "publish"), {"visibility": "private"}, follow=True
        )
        self.assertContains(response, "Choose public or unlisted.")
        self.guided.session.refresh_from_db()
        self.assertFalse(self.guided.session.is_published)
