"""A curator hides a turn without renumbering anything (issue 13, point 10); the importer
hides its own housekeeping (lines of unknown types, Claude Code's compaction agent)."""

from __future__ import annotations

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from sessions.models import Session, Turn
from tests.sessions.importing import MATMUL, ImportingTestCase
from tests.sessions.test_claude_code_layout import session_with_agent
from tests.sessions.transcripts.build import AgentTranscript, text

SLUG = "matmul-the-dispatch-and-bounds-bugs"
# In matmul-review: 20 is an unknown content block (shown), 21 a line of an unknown type
# with a uuid (a bookmark), 22 one without (telemetry): both hidden.
BLOCK, BOOKMARK, TELEMETRY = 20, 21, 22


class ImportedHiddenTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.out = self.run_import(MATMUL, "--visibility", "public")
        self.imported = Session.objects.get(slug=SLUG)

    def turn(self, number: int) -> Turn:
        return self.imported.turns.get(number=number)

    def test_unknown_line_types_are_kept_hidden_and_reported(self) -> None:
        self.assertTrue(self.turn(BOOKMARK).hidden)
        self.assertTrue(self.turn(TELEMETRY).hidden)
        self.assertFalse(self.turn(BLOCK).hidden)
        self.assertIn('"label": "guard explained"', self.turn(BOOKMARK).content)
        self.assertIn(
            "Hidden (kept with their numbers, out of the reader's way): 2 lines of types "
            "this importer does not know.",
            self.out,
        )

    def test_the_page_leaves_them_out_and_keeps_every_number(self) -> None:
        page = self.client.get(f"/s/{SLUG}/").content.decode()
        self.assertNotIn(f'id="turn-{BOOKMARK}"', page)
        self.assertNotIn(f'id="turn-{TELEMETRY}"', page)
        for number in (BLOCK, TELEMETRY + 1, 33):
            self.assertIn(f'id="turn-{number}"', page)
        # A permalink to a hidden turn opens the page where it would be.
        self.assertEqual(self.client.get(f"/s/{SLUG}/?turn={BOOKMARK}").status_code, 200)

    def test_an_embed_across_a_hidden_turn_stays_valid(self) -> None:
        r = self.client.get(f"/s/{SLUG}/embed/", {"from": BLOCK, "to": TELEMETRY + 1})
        self.assertEqual(r.status_code, 200)
        page = r.content.decode()
        self.assertIn(f'id="turn-{BLOCK}"', page)
        self.assertIn(f'id="turn-{TELEMETRY + 1}"', page)
        self.assertNotIn(f'id="turn-{BOOKMARK}"', page)

    def test_exports_and_search(self) -> None:
        markdown = self.client.get(f"/s/{SLUG}/export.md").content.decode()
        self.assertNotIn(f"## Turn {BOOKMARK} ", markdown)
        self.assertIn(f"## Turn {TELEMETRY + 1} ", markdown)
        # The JSON export keeps them, flagged, and re-imports them hidden.
        data = self.client.get(f"/s/{SLUG}/export.json").json()
        flagged = [t["number"] for t in data["turns"] if t.get("hidden")]
        self.assertEqual(flagged, [BOOKMARK, TELEMETRY])
        self.run_import(self.write("copy.json", json.dumps(data)), "--slug", "copy")
        copy = Session.objects.get(slug="copy")
        self.assertEqual(
            list(copy.turns.filter(hidden=True).values_list("number", flat=True)), flagged
        )
        # Search does not find what only a hidden turn says.
        page = self.client.get("/", {"q": "guard explained"}).content.decode()
        self.assertNotIn(f"#turn-{BOOKMARK}", page)


class CuratorTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.run_import(MATMUL, "--visibility", "public")
        self.imported = Session.objects.get(slug=SLUG)
        self.charlie.is_superuser = True
        self.charlie.save()
        self.client.login(username="charlie", password="password")

    def act(self, action: str, *numbers: int) -> None:
        pks = list(self.imported.turns.filter(number__in=numbers).values_list("pk", flat=True))
        r = self.client.post(
            "/admin/tutoring_sessions/turn/", {"action": action, "_selected_action": pks}
        )
        self.assertEqual(r.status_code, 302)

    def test_hiding_many_turns_costs_what_hiding_one_does(self) -> None:
        already = set(self.imported.turns.filter(hidden=True).values_list("number", flat=True))
        counts = []
        for numbers in ((2,), (3, 4, 5, 6, 7, 8)):
            with CaptureQueriesContext(connection) as queries:
                self.act("hide", *numbers)
            counts.append(len(queries))
        self.assertEqual(counts[0], counts[1])
        hidden = self.imported.turns.filter(hidden=True).values_list("number", flat=True)
        self.assertEqual(set(hidden) - already, {2, 3, 4, 5, 6, 7, 8})

    def test_a_published_turn_is_hidden_without_renumbering_and_stays_so_on_reimport(self) -> None:
        numbers = list(self.imported.turns.values_list("number", flat=True))
        self.act("hide", 5)
        self.act("show", BOOKMARK)
        self.assertEqual(list(self.imported.turns.values_list("number", flat=True)), numbers)
        self.client.logout()
        page = self.client.get(f"/s/{SLUG}/").content.decode()
        self.assertNotIn('id="turn-5"', page)
        self.assertIn(f'id="turn-{BOOKMARK}"', page)
        # A re-import of the recording keeps the curator's choices.
        out = self.run_import(MATMUL)
        self.imported = Session.objects.get(slug=SLUG)
        hidden = set(self.imported.turns.filter(hidden=True).values_list("number", flat=True))
        self.assertEqual(hidden, {5, TELEMETRY})
        self.assertIn("Kept the curator's choice to hide or show 2 turn(s).", out)


class CompactionAgentTestCase(ImportingTestCase):
    def test_claude_codes_compaction_agent_is_kept_hidden(self) -> None:
        main, agent = session_with_agent()
        compactor = AgentTranscript(main, "acompact-7f3e21")
        compactor.user("Summarise the conversation so far.", parent=None)
        compactor.assistant("msg_K1", [text("Summary: the learner checks dispatch sizes.")])
        self.write("with-agent.jsonl", main)
        (self.tmp / "with-agent" / "subagents").mkdir(parents=True)
        self.write("with-agent/subagents/agent-a1b2c3d.jsonl", agent)
        self.write("with-agent/subagents/agent-acompact-7f3e21.jsonl", compactor)
        out = self.run_import(self.tmp / "with-agent")
        hidden = self.session().turns.filter(hidden=True)
        self.assertEqual(
            [t.meta.get("agent") for t in hidden], [None, "acompact-7f3e21", "acompact-7f3e21"]
        )
        self.assertIn("Summary: the learner checks", hidden.last().content)
        self.assertIn("2 turns of Claude Code's own agents (compaction, warm-up)", out)
