"""A private session is invisible to everyone but its owner and staff, in every view."""

from sessions.models import Turn
from tests.base import BaseTestCase, add_kernel, make_session


class PrivacyTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session(
            "alices", turns=2, title="Alice's draft", visibility="private", owner=self.alice
        )
        Turn.objects.filter(session=self.session, number=1).update(content="private-needle")
        add_kernel(self.session, turn=1)

    OWNER_VIEWS = [
        "/s/alices/",
        "/s/alices/export.json",
        "/s/alices/export.md",
        "/s/alices/turns/1/replay/",
        "/s/alices/kernels/add/",
    ]
    PUBLIC_ONLY_VIEWS = [
        "/s/alices/embed/?from=1&to=1",
        "/oembed/?url=http://testserver/s/alices/&format=json",
    ]

    def assert_hidden(self) -> None:
        for url in self.OWNER_VIEWS + self.PUBLIC_ONLY_VIEWS:
            with self.subTest(url=url):
                r = self.client.get(url)
                self.assertEqual(r.status_code, 404)
                self.assertNotContains(r, "private-needle", status_code=404)
                self.assertNotContains(r, "Alice&#x27;s draft", status_code=404)
        for params in ({}, {"q": "private-needle"}, {"q": "Alice"}):
            r = self.client.get("/", params)
            self.assertNotContains(r, "Alice&#x27;s draft")

    def test_anonymous_readers_see_nothing(self) -> None:
        self.assert_hidden()
        # The JSON replay endpoint too (it must not start a run for them either).
        self.assertEqual(self.client.get("/s/alices/turns/1/replay.json").status_code, 404)

    def test_other_users_see_nothing(self) -> None:
        self.client.login(username="bob", password="password")
        self.assert_hidden()

    def test_the_owner_and_staff_see_it_but_never_in_lists_or_embeds(self) -> None:
        for user in ("alice", "charlie"):
            self.client.login(username=user, password="password")
            for url in (
                "/s/alices/",
                "/s/alices/export.json",
                "/s/alices/export.md",
                "/s/alices/kernels/add/",
            ):
                with self.subTest(user=user, url=url):
                    self.assertEqual(self.client.get(url).status_code, 200)
            for url in self.PUBLIC_ONLY_VIEWS:
                self.assertEqual(self.client.get(url).status_code, 404)
            self.assertNotContains(
                self.client.get("/", {"q": "private-needle"}), "Alice&#x27;s draft"
            )

    def test_private_pages_offer_no_embed_code_or_oembed_link(self) -> None:
        self.client.login(username="alice", password="password")
        r = self.client.get("/s/alices/")
        self.assertNotContains(r, "application/json+oembed")
        self.assertNotContains(r, "copy-embed")

    def test_unlisted_is_reachable_by_link(self) -> None:
        self.session.visibility = "unlisted"
        self.session.save()
        self.assertEqual(self.client.get("/s/alices/").status_code, 200)
        self.assertContains(self.client.get("/s/alices/"), 'name="robots" content="noindex"')
        self.assertNotContains(self.client.get("/", {"q": "private-needle"}), "Alice&#x27;s draft")
