"""Finding one's way in a session page: outline, headings, badges, jumps, the embed panel."""

import re

from django.db import connection
from django.test.utils import CaptureQueriesContext

from pages.navigation import page_size
from sessions.models import Turn
from tests.base import BaseTestCase, add_kernel, make_session, store_run


class PageSizeTestCase(BaseTestCase):
    def test_pages_come_out_even(self) -> None:
        cases = {(109, 100): 55, (100, 100): 100, (25, 10): 9, (201, 100): 67, (3, 100): 3}
        for (count, most), size in cases.items():
            with self.subTest(count=count, most=most):
                self.assertEqual(page_size(count, most), size)
        self.assertEqual(page_size(0, 100), 1)


class OutlineTestCase(BaseTestCase):
    def lessons(self) -> None:
        self.session = make_session("course", turns=9)
        for number, title in ((1, "Lesson 1 · Buffers"), (5, "Lesson 2 · Workgroups")):
            Turn.objects.filter(session=self.session, number=number).delete()
            Turn.objects.create(
                session=self.session,
                number=number,
                role="system",
                content=f"**{title}.** What this lesson is about.",
                meta={"lesson": number},
            )

    def test_a_curated_session_has_one_heading_per_lesson(self) -> None:
        self.lessons()
        r = self.client.get("/s/course/")
        body = r.content.decode()
        self.assertEqual(
            re.findall(r'<h2 class="turn-title">(.*?)</h2>', body),
            ["Lesson 1 · Buffers", "Lesson 2 · Workgroups"],
        )
        self.assertContains(r, '<h2 id="outline-title">Lessons</h2>')
        self.assertContains(r, '<a href="#turn-5" data-turn="5">Lesson 2 · Workgroups</a>')
        # The note's bold opening is the heading; the page marks it so as not to repeat it.
        self.assertContains(r, 'class="turn role-system titled-by-lead" id="turn-5"')

    def test_lessons_on_other_pages_are_linked_to_their_page(self) -> None:
        self.lessons()
        with self.settings(TURNS_PER_PAGE=4):
            r = self.client.get("/s/course/")
        self.assertContains(
            r, '<a href="/s/course/?turn=5#turn-5" data-turn="5">Lesson 2 · Workgroups</a>'
        )

    def test_an_imported_session_is_outlined_by_its_prompts(self) -> None:
        session = make_session("imported", turns=4)
        Turn.objects.filter(session=session, number=3).update(
            content="Why does my **softmax** give NaN\nwhen x is large?"
        )
        Turn.objects.create(
            session=session, number=5, role="learner", content="ok", meta={"kind": "steering"}
        )
        r = self.client.get("/s/imported/")
        self.assertContains(r, '<h2 id="outline-title">Prompts</h2>')
        self.assertContains(r, '<a href="#turn-3" data-turn="3">Why does my softmax give NaN</a>')
        self.assertNotContains(r, 'data-turn="5"')
        self.assertContains(r, '<h2 class="visually-hidden">Prompt: Turn 1 text</h2>')


class BadgeTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=4)
        self.version = add_kernel(self.session, turn=2)
        self.version.expected_status = "mismatch"
        self.version.note = "bug: the rows and columns are swapped"
        self.version.save()

    def badge(self) -> str:
        body = self.client.get("/s/demo/").content.decode()
        return re.search(r'<a class="kernel-badge[^>]*>.*?</a>', body, re.S)[0]

    def test_a_badge_is_unknown_until_the_kernel_has_run(self) -> None:
        badge = self.badge()
        self.assertIn("status-unknown", badge)
        self.assertIn("not run yet", badge)
        # The story (the bug it is about) waits for the replay page.
        self.assertNotIn("mismatch", badge)
        self.assertNotIn("swapped", badge)

    def test_a_badge_shows_the_stored_run_not_the_curators_intent(self) -> None:
        store_run(self.version, "passed")
        self.session.touch()
        with CaptureQueriesContext(connection) as queries:
            badge = self.badge()
        self.assertIn("status-passed", badge)
        self.assertIn('<span class="badge-status">passed</span>', badge)
        # A badge needs the run's status: its outcome (cells and all) is never loaded.
        self.assertFalse([q for q in queries if '"kernels_run"."outcome"' in q["sql"]])

    def test_jumps_list_each_version_where_it_first_appears_and_the_failures(self) -> None:
        turn = self.session.turns.get(number=3)
        turn.kernel_version = self.version
        turn.save()
        store_run(self.version, "mismatch")
        r = self.client.get("/s/demo/")
        self.assertContains(r, 'data-kernel-turns="2" data-failing-turns="2"')
        self.assertContains(
            r,
            'href="/s/demo/?turn=2#turn-2">Next <span class="wide-only">failing run</span>'
            '<span class="narrow-only">failure</span>',
        )


class EmbedPanelTestCase(BaseTestCase):
    def test_the_default_code_is_the_script_embed_and_the_iframe_is_offered(self) -> None:
        make_session("demo", turns=3)
        body = self.client.get("/s/demo/").content.decode()
        panel = re.search(r'<details class="embed-panel".*?\n</details>', body, re.S)[0]
        script, iframe = re.findall(r"<textarea[^>]*>(.*?)</textarea>", panel, re.S)
        self.assertEqual(
            script,
            "&lt;a class=&quot;kernelbin-embed&quot; "
            "href=&quot;http://testserver/s/demo/embed/?from=1&amp;amp;to=3&quot;&gt;"
            "Session demo · turns 1–3&lt;/a&gt;&lt;script async "
            "src=&quot;http://testserver/static/js/embed.js&quot;&gt;&lt;/script&gt;",
        )
        self.assertIn("&lt;iframe", iframe)
        # The panel is in the page's flow, not in the sticky bar over the turns.
        bar = re.search(r'<nav class="turn-tools".*?</nav>', body, re.S)[0]
        self.assertNotIn("embed-panel", bar)
