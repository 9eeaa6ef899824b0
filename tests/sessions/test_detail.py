from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from tests.base import BaseTestCase, add_kernel, make_session


class DetailTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=4, summary="A short summary")

    def test_it_shows_every_turn_with_a_permalink_anchor(self) -> None:
        r = self.client.get("/s/demo/")
        self.assertEqual(r.status_code, 200)
        for number in range(1, 5):
            self.assertContains(r, f'id="turn-{number}"')
            self.assertContains(r, f"Turn {number} text")

    def test_it_carries_oembed_discovery_and_open_graph(self) -> None:
        r = self.client.get("/s/demo/")
        self.assertContains(r, 'type="application/json+oembed"')
        self.assertContains(r, "/oembed/?url=http%3A%2F%2Ftestserver%2Fs%2Fdemo%2F&amp;format=json")
        self.assertContains(r, '<meta property="og:title" content="Session demo">', html=False)
        self.assertContains(
            r, '<meta property="og:description" content="A short summary">', html=False
        )

    def test_it_offers_embed_codes_per_turn(self) -> None:
        r = self.client.get("/s/demo/")
        self.assertContains(r, 'class="copy-embed" data-from="3" data-to="3"')
        self.assertContains(r, "http://testserver/s/demo/embed/?from=1&amp;amp;to=4")

    def test_it_is_not_frameable(self) -> None:
        r = self.client.get("/s/demo/")
        self.assertEqual(r["X-Frame-Options"], "DENY")
        self.assertIn("frame-ancestors 'none'", r["Content-Security-Policy"])

    def test_reviewed_turns_link_to_their_replay(self) -> None:
        add_kernel(self.session, turn=2)
        r = self.client.get("/s/demo/")
        self.assertContains(r, 'href="http://testserver/s/demo/turns/2/replay/"')
        self.assertContains(r, "add v1")

    def test_unknown_session_is_404(self) -> None:
        self.assertEqual(self.client.get("/s/nope/").status_code, 404)

    @override_settings(TURNS_PER_PAGE=10)
    def test_long_sessions_are_paginated_in_even_pages(self) -> None:
        make_session("long", turns=25)
        # At most 10 a page: three pages of 9, 9 and 7, not 10, 10 and 5.
        r = self.client.get("/s/long/")
        self.assertContains(r, 'id="turn-9"')
        self.assertNotContains(r, 'id="turn-10"')
        self.assertContains(r, "Later turns")
        r = self.client.get("/s/long/", {"page": 3})
        self.assertContains(r, 'id="turn-19"')
        self.assertContains(r, 'id="turn-25"')
        self.assertNotContains(r, 'id="turn-18"')

    @override_settings(TURNS_PER_PAGE=100)
    def test_109_turns_make_two_pages_of_55_and_54(self) -> None:
        make_session("showcase-sized", turns=109)
        r = self.client.get("/s/showcase-sized/")
        self.assertContains(r, "Turns 1–55 of 109")
        r = self.client.get("/s/showcase-sized/", {"page": 2})
        self.assertContains(r, "Turns 56–109 of 109")

    @override_settings(TURNS_PER_PAGE=10)
    def test_a_turn_link_opens_the_page_that_holds_it(self) -> None:
        make_session("long", turns=25)
        r = self.client.get("/s/long/", {"turn": 17})
        self.assertEqual(r.status_code, 200)
        self.assertContains(r, 'id="turn-17"')
        self.assertContains(r, "Turns 10–18 of 25")
        # It is the page a consumer of our oEmbed discovery reads: the link keeps the turn.
        self.assertContains(r, "url=http%3A%2F%2Ftestserver%2Fs%2Flong%2F%3Fturn%3D17&amp;format")
        self.assertContains(r, '<link rel="canonical" href="http://testserver/s/long/?page=2">')
        r = self.client.get("/s/long/", {"turn": 3})
        self.assertContains(r, "Turns 1–9 of 25")

    def test_go_to_a_missing_turn_says_so(self) -> None:
        for value in ("99", "0", "abc", "-1"):
            r = self.client.get("/s/demo/", {"turn": value})
            self.assertEqual(r.status_code, 404, value)
            self.assertContains(r, "This session has no turn", status_code=404)

    def test_tool_and_thinking_turns_are_collapsed(self) -> None:
        turn = self.session.turns.get(number=2)
        turn.role = "tool"
        turn.meta = {"tool": "Bash", "summary": "ran the tests"}
        turn.save()
        r = self.client.get("/s/demo/")
        self.assertContains(r, '<details class="turn-body collapsible">')
        self.assertContains(r, "<summary>ran the tests</summary>", html=False)


class DetailQueriesTestCase(BaseTestCase):
    def test_a_signed_in_readers_page_counts_the_turns_once(self) -> None:
        make_session("demo", turns=12)
        self.client.force_login(self.alice)
        with CaptureQueriesContext(connection) as queries:
            response = self.client.get("/s/demo/?page=1")
        self.assertEqual(response.status_code, 200)
        counts = [q["sql"] for q in queries if q["sql"].startswith("SELECT COUNT(*)")]
        self.assertEqual(len(counts), 1, counts)
