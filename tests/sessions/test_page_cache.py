"""Cached session pages and embeds: a reader without cookies is answered with one query,
whatever the session's length and page, and only while the cached bytes are still right."""

from django.test import override_settings

from tests.base import BaseTestCase, make_session


@override_settings(TURNS_PER_PAGE=100)
class CachedPageTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("long", turns=250)

    def test_the_first_and_last_pages_are_served_again_with_one_query(self) -> None:
        for path in ("/s/long/", "/s/long/?page=3"):
            first = self.client.get(path)
            self.assertEqual(first.status_code, 200)
            with self.assertNumQueries(1):
                again = self.client.get(path)
            self.assertEqual(again.content, first.content)
        self.assertContains(again, "Turn 250 text")

    def test_an_embed_is_served_again_with_one_query(self) -> None:
        path = "/s/long/embed/?from=240&to=250"
        first = self.client.get(path)
        self.assertContains(first, "Turn 245 text")
        with self.assertNumQueries(1):
            again = self.client.get(path)
        self.assertEqual(again.content, first.content)

    def test_a_changed_turn_shows_at_once(self) -> None:
        self.client.get("/s/long/")
        self.client.get("/s/long/embed/?from=1&to=3")
        turn = self.session.turns.get(number=2)
        turn.content = "Turn 2, corrected"
        turn.save()
        self.assertContains(self.client.get("/s/long/"), "Turn 2, corrected")
        self.assertContains(self.client.get("/s/long/embed/?from=1&to=3"), "Turn 2, corrected")

    def test_a_session_made_private_is_not_served_from_the_cache(self) -> None:
        self.client.get("/s/long/")
        self.client.get("/s/long/embed/?from=1&to=3")
        self.session.visibility = "private"
        self.session.owner = self.alice
        self.session.save()
        self.assertEqual(self.client.get("/s/long/").status_code, 404)
        self.assertEqual(self.client.get("/s/long/embed/?from=1&to=3").status_code, 404)
        self.client.login(username="alice", password="password")
        self.assertContains(self.client.get("/s/long/"), "Turn 1 text")
