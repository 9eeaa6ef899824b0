from typing import Any

from tests.base import BaseTestCase, make_session


class EmbedTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=6)

    def get(self, **params):
        return self.client.get("/s/demo/embed/", params)

    def test_it_shows_the_range_inclusive(self) -> None:
        r = self.get(**{"from": 2, "to": 4})
        self.assertEqual(r.status_code, 200)
        for number in (2, 3, 4):
            self.assertContains(r, f'id="turn-{number}"')
        for number in (1, 5):
            self.assertNotContains(r, f'id="turn-{number}"')

    def test_it_links_back_to_the_full_session(self) -> None:
        r = self.get(**{"from": 2, "to": 3})
        self.assertContains(r, 'href="http://testserver/s/demo/?turn=2#turn-2"')
        self.assertContains(r, "Read the whole session on Kernelbin")

    def test_it_is_frameable_by_any_site(self) -> None:
        r = self.get(**{"from": 1, "to": 1})
        self.assertNotIn("X-Frame-Options", r)
        self.assertIn("frame-ancestors *", r["Content-Security-Policy"])
        self.assertNotIn(
            "'none'", r["Content-Security-Policy"].split("frame-ancestors")[1].split(";")[0]
        )

    def test_it_is_self_contained_and_sets_no_cookie(self) -> None:
        r = self.get(**{"from": 1, "to": 2})
        body = r.content.decode()
        # Its only link is the oEmbed discovery link, which loads nothing.
        self.assertEqual(body.count("<link"), 1)
        self.assertIn('<link rel="alternate" type="application/json+oembed"', body)
        self.assertNotIn("<script src", body)
        self.assertIn("postMessage", body)
        self.assertEqual(r.cookies, {})

    def test_only_its_own_inline_code_is_allowed_to_run(self) -> None:
        import base64
        import hashlib
        import re

        r = self.get(**{"from": 1, "to": 2})
        body = r.content.decode()
        policy = r["Content-Security-Policy"]
        for tag in ("script", "style"):
            inline = re.search(rf"<{tag}>(.*?)</{tag}>", body, re.S)[1]
            digest = base64.b64encode(hashlib.sha256(inline.encode()).digest()).decode()
            directive = re.search(rf"{tag}-src ([^;]*)", policy)[1]
            self.assertEqual(directive.split(), [f"'sha256-{digest}'"])
        self.assertNotIn("unsafe-inline", policy)

    def test_themes(self) -> None:
        self.assertContains(self.get(**{"from": 1, "to": 1, "theme": "dark"}), 'data-theme="dark"')
        self.assertContains(self.get(**{"from": 1, "to": 1, "theme": "auto"}), 'data-theme="auto"')
        # Light unless asked: most pages an embed sits in are light.
        self.assertContains(self.get(**{"from": 1, "to": 1}), 'data-theme="light"')

    def test_bad_bounds_say_what_is_wrong(self) -> None:
        cases: list[tuple[dict[str, Any], str]] = [
            ({"to": 2}, "The &#x27;from&#x27; parameter is required"),
            ({"from": 2}, "The &#x27;to&#x27; parameter is required"),
            ({"from": "two", "to": 3}, "must be a whole turn number"),
            ({"from": "1.5", "to": 3}, "must be a whole turn number"),
            ({"from": 4, "to": 2}, "is after"),
            ({"from": 0, "to": 2}, "Turn numbers start at 1"),
            ({"from": 1, "to": 7}, "This session has 6 turns"),
            ({"from": 1, "to": 99999999999}, "must be a whole turn number"),
            ({"from": 1, "to": 2, "theme": "neon"}, "theme must be one of"),
        ]
        for params, message in cases:
            with self.subTest(params=params):
                r = self.get(**params)
                self.assertEqual(r.status_code, 400)
                self.assertContains(r, message, status_code=400)
                self.assertNotIn("X-Frame-Options", r)

    def test_too_many_turns(self) -> None:
        make_session("long", turns=60)
        r = self.client.get("/s/long/embed/", {"from": 1, "to": 60})
        self.assertContains(r, "at most 50 turns", status_code=400)

    def test_unknown_and_private_sessions_are_404(self) -> None:
        make_session("mine", visibility="private", owner=self.alice)
        self.client.login(username="alice", password="password")
        for slug in ("nope", "mine"):
            r = self.client.get(f"/s/{slug}/embed/", {"from": 1, "to": 1})
            self.assertEqual(r.status_code, 404, slug)
            self.assertContains(r, "no public session", status_code=404)

    def test_unlisted_sessions_embed(self) -> None:
        make_session("by-link", visibility="unlisted")
        self.assertEqual(
            self.client.get("/s/by-link/embed/", {"from": 1, "to": 1}).status_code, 200
        )
