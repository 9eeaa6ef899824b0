from datetime import timedelta

from django.utils import timezone

from sessions.models import Session, Tag, Turn
from tests.base import BaseTestCase, make_session


class IndexTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        now = timezone.now()
        self.old = make_session(
            "old-one", title="Reductions the hard way", created=now - timedelta(days=2)
        )
        self.new = make_session("new-one", title="Softmax that overflows", created=now)
        self.unlisted = make_session("secret-link", title="Unlisted matmul", visibility="unlisted")
        self.private = make_session(
            "private-one", title="Private matmul", visibility="private", owner=self.alice
        )

    def test_it_lists_public_sessions_newest_first(self) -> None:
        r = self.client.get("/")
        self.assertEqual(r.status_code, 200)
        body = r.content.decode()
        self.assertLess(body.index("Softmax that overflows"), body.index("Reductions the hard way"))

    def test_it_never_lists_unlisted_or_private(self) -> None:
        self.client.login(username="alice", password="password")
        r = self.client.get("/")
        self.assertNotContains(r, "Unlisted matmul")
        self.assertNotContains(r, "Private matmul")

    def test_it_searches_titles(self) -> None:
        r = self.client.get("/", {"q": "softmax"})
        self.assertContains(r, "<mark>Softmax</mark> that overflows")
        self.assertNotContains(r, "Reductions the hard way")

    def test_it_searches_turn_text(self) -> None:
        Turn.objects.create(
            session=self.old, number=4, role="tutor", content="Use workgroupBarrier() here"
        )
        r = self.client.get("/", {"q": "workgroupbarrier"})
        self.assertContains(r, "Reductions the hard way")
        self.assertNotContains(r, "Softmax that overflows")
        self.assertContains(r, "1 session matching")

    def test_search_does_not_reveal_unlisted_or_private_turns(self) -> None:
        for session in (self.unlisted, self.private):
            Turn.objects.create(
                session=session, number=9, role="tutor", content="needle-in-haystack"
            )
        r = self.client.get("/", {"q": "needle-in-haystack"})
        self.assertContains(r, "0 sessions matching")

    def test_it_filters_by_tag(self) -> None:
        tag = Tag.objects.create(name="reductions", slug="reductions")
        self.old.tags.add(tag)
        r = self.client.get("/", {"tag": "reductions"})
        self.assertContains(r, "Reductions the hard way")
        self.assertNotContains(r, "Softmax that overflows")

    def test_a_tag_of_private_or_unlisted_sessions_only_is_404_like_an_unknown_one(self) -> None:
        hidden = Tag.objects.create(name="Secret project", slug="secret-project")
        self.private.tags.add(hidden)
        self.unlisted.tags.add(hidden)
        self.client.login(username="alice", password="password")  # the owner, too
        r = self.client.get("/", {"tag": "secret-project"})
        self.assertEqual(r.status_code, 404)
        self.assertNotContains(r, "Secret project", status_code=404)

    def test_unknown_tag_is_404(self) -> None:
        self.assertEqual(self.client.get("/", {"tag": "nope"}).status_code, 404)

    def test_hostile_query_is_escaped_and_trimmed(self) -> None:
        r = self.client.get("/", {"q": "<script>alert(1)</script>" + "x" * 500})
        self.assertEqual(r.status_code, 200)
        self.assertNotContains(r, "<script>alert(1)")
        self.assertContains(r, "&lt;script&gt;")

    def test_out_of_range_page_shows_last_page(self) -> None:
        r = self.client.get("/", {"page": "999"})
        self.assertEqual(r.status_code, 200)
        self.assertEqual(Session.objects.listed().count(), 2)
