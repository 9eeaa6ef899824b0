"""Publishing a guided session makes it an archive entry like any other."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

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
        self.assertContains(response, "Choose public or unlisted: it stays as it is until you do.")
        self.guided.session.refresh_from_db()
        self.assertFalse(self.guided.session.is_published)

    def test_a_new_session_is_private_and_publishing_without_a_choice_keeps_it_so(self) -> None:
        session = self.guided.session
        self.assertEqual(session.visibility, Session.Visibility.PRIVATE)
        page = self.client.get(self.url(self.guided, "session"))
        # No choice is made for the learner on their page: it links to the preview.
        self.assertNotContains(page, 'name="visibility"')
        self.assertContains(page, "Preview and publish…")
        response = self.client.post(self.url(self.guided, "publish"), follow=True)
        self.assertContains(response, "Choose public or unlisted")
        session.refresh_from_db()
        self.assertEqual(session.visibility, Session.Visibility.PRIVATE)
        self.assertFalse(session.is_published)

    def test_the_preview_shows_what_will_be_public_and_offers_a_choice(self) -> None:
        preview = self.client.get(self.url(self.guided, "publish"))
        self.assertContains(preview, "My first question")
        self.assertContains(preview, 'value="unlisted" required>')
        self.assertContains(preview, 'value="public" required>')
        self.assertNotContains(preview, "checked")
        # The automatic reviewer's notice about what it can do is left out, and said so.
        self.assertContains(preview, "1 automatic notice (what the reviewer can do")
        self.assertNotContains(preview, "It cannot answer messages")
        self.assertEqual(self.guided.session.visibility, Session.Visibility.PRIVATE)
        # Nobody else may see the preview.
        self.client.force_login(self.bob)
        self.assertEqual(self.client.get(self.url(self.guided, "publish")).status_code, 404)

    def test_published_it_leaves_out_the_chatter_and_keeps_the_numbers(self) -> None:
        notice = self.guided.session.turns.get(meta__kind="offline_notice")
        self.client.post(self.url(self.guided, "publish"), {"visibility": "unlisted"})
        self.client.logout()
        detail = self.client.get(self.guided.session.get_absolute_url())
        self.assertContains(detail, "My first question")
        self.assertNotContains(detail, "It cannot answer messages")
        self.assertNotContains(detail, f'id="turn-{notice.number}"')
        notice.refresh_from_db()
        self.assertTrue(notice.hidden)

    def test_a_learners_session_is_listed_after_the_curated_ones_unless_featured(self) -> None:
        curated = Session.objects.create(
            slug="curated", title="A curated session", source=Session.Source.FIXTURE
        )
        curated.publish(Session.Visibility.PUBLIC)
        Session.objects.filter(pk=curated.pk).update(created=timezone.now() - timedelta(days=30))
        self.client.post(self.url(self.guided, "publish"), {"visibility": "public"})
        titles = [s.title for s in self.client.get(reverse("sessions:index")).context["page"]]
        self.assertEqual(titles, ["A curated session", self.guided.session.title])
        Session.objects.filter(pk=self.guided.session_id).update(featured=True)
        titles = [s.title for s in self.client.get(reverse("sessions:index")).context["page"]]
        self.assertEqual(titles, [self.guided.session.title, "A curated session"])
