"""Importing is atomic and idempotent, and one writer serves both formats."""

from __future__ import annotations

import json
from unittest.mock import patch

from sessions.importers.claude_code.tools import ToolCalls
from sessions.importers.specs import SessionSpec, TurnSpec
from sessions.importers.writer import write_session
from sessions.models import Session, Turn
from sessions.programs import Kernel, KernelVersion
from tests.sessions.importing import MATMUL, SOFTMAX, ImportingTestCase, tiny
from tests.sessions.transcripts.build import Transcript, text


def snapshot() -> list:
    """Everything an import writes, in a comparable form."""
    return [
        list(Session.objects.order_by("pk").values("slug", "title", "source_key", "visibility")),
        list(
            Turn.objects.order_by("session", "number").values_list(
                "number", "role", "content", "meta"
            )
        ),
        list(
            KernelVersion.objects.order_by("pk").values_list(
                "kernel__name", "number", "source", "turn__number"
            )
        ),
    ]


class ReportTestCase(ImportingTestCase):
    def test_the_command_says_what_it_did(self) -> None:
        out = self.run_import(MATMUL)
        self.assertEqual(
            out.splitlines()[:2],
            [
                "Created session 'matmul-the-dispatch-and-bounds-bugs': 33 turns, 1 kernel, 5 kernel versions.",
                "Read 51 lines (Claude Code JSONL).",
            ],
        )
        self.assertIn(
            "Sub-agents: 1 transcript(s) nested in their calls, 0 shown on their own.", out
        )
        self.assertIn("Not shown: 1 bookkeeping lines", out)
        # The fixture's image is cut off: noted, not fatal.
        self.assertIn("Images not kept (a note in each turn says so): 1 not valid base64.", out)
        self.assertTrue(out.endswith("Session: /s/matmul-the-dispatch-and-bounds-bugs/\n"))

    def test_options(self) -> None:
        self.run_import(
            SOFTMAX, "--slug", "softmax", "--title", "Softmax", "--visibility", "unlisted"
        )
        session = self.session()
        self.assertEqual(
            (session.slug, session.title, session.visibility), ("softmax", "Softmax", "unlisted")
        )
        self.assertIsNotNone(session.published_at)
        self.assertIn(
            "'no spaces' is not a valid slug", self.import_fails(MATMUL, "--slug", "no spaces")
        )


class AtomicTestCase(ImportingTestCase):
    def fail_on_the_third_tool_call(self):
        original = ToolCalls.call
        calls = []

        def failing(reader, block, group):
            calls.append(Turn.objects.count())
            if len(calls) == 3:
                raise RuntimeError("boom")
            return original(reader, block, group)

        return patch.object(ToolCalls, "call", failing), calls

    def test_a_failure_mid_import_writes_nothing(self) -> None:
        failing, calls = self.fail_on_the_third_tool_call()
        with failing, patch("sessions.importers.writer.WRITE_BATCH", 2):
            error = self.import_fails(MATMUL)
        self.assertIn("The import failed on an unexpected problem (RuntimeError: boom).", error)
        self.assertGreater(calls[-1], 2)  # turns had been written when it failed…
        self.assertEqual(snapshot(), [[], [], []])  # …and were rolled back
        self.assertEqual(Kernel.objects.count(), 0)

    def test_a_failure_mid_update_leaves_the_old_session(self) -> None:
        self.run_import(MATMUL)
        before = snapshot()
        failing, _ = self.fail_on_the_third_tool_call()
        with failing, patch("sessions.importers.writer.WRITE_BATCH", 2):
            self.import_fails(MATMUL, "--title", "Changed")
        self.assertEqual(snapshot(), before)

    def test_the_writer_inserts_batches_while_it_reads(self) -> None:
        seen = []

        def turns():
            for number in range(1, 11):
                seen.append(Turn.objects.count())
                yield TurnSpec(number=number, role="learner", content=f"turn {number}")

        spec = SessionSpec(slug="stream", fields={"title": "Stream"})
        written = write_session(spec, turns(), batch_size=3)
        self.assertEqual(written.turns, 10)
        # Before turn 10 was made, nine were already in the database: three batches.
        self.assertEqual(seen, [0, 0, 0, 3, 3, 3, 6, 6, 6, 9])
        self.assertIn("<p>turn 7</p>", Turn.objects.get(number=7).html)


class IdempotentTestCase(ImportingTestCase):
    def test_importing_twice_updates_in_place(self) -> None:
        self.run_import(MATMUL)
        first = snapshot()
        out = self.run_import(MATMUL)
        self.assertIn("Updated session 'matmul-the-dispatch-and-bounds-bugs'", out)
        self.assertEqual(snapshot(), first)
        self.assertEqual(Session.objects.count(), 1)

    def test_a_published_session_that_grew_keeps_its_slug_and_numbers(self) -> None:
        t = tiny()
        path = self.write("t.jsonl", t)
        self.run_import(path)
        session = self.session()
        session.title = "Fixed by a curator"
        session.save()
        session.publish()
        old = list(session.turns.values_list("number", "role", "content"))

        t.user("Thanks. What about uniforms?")
        t.assistant("msg_T9", [text("Uniforms hold small read-only values.")])
        t.plain({"type": "custom-title", "customTitle": "A new title", "sessionId": t.session})
        out = self.run_import(self.write("t.jsonl", t))
        self.assertIn(f"Updated session '{session.slug}': 6 turns", out)
        session = self.session()  # a re-import puts a new row in the old one's place
        self.assertEqual(session.title, "Fixed by a curator")  # curators' edits stay
        self.assertEqual(session.visibility, "public")
        turns = list(session.turns.values_list("number", "role", "content"))
        self.assertEqual(turns[: len(old)], old)
        self.assertEqual(
            turns[len(old) :],
            [
                (5, "learner", "Thanks. What about uniforms?"),
                (6, "tutor", "Uniforms hold small read-only values."),
            ],
        )

    def test_published_turns_cannot_be_dropped_or_replaced(self) -> None:
        t = tiny()
        self.run_import(self.write("t.jsonl", t))
        self.session().publish()
        before = snapshot()
        shorter = without_last_line(t)
        self.assertIn(
            "the file drops turns 4: published turn numbers are frozen",
            self.import_fails(self.write("s.jsonl", shorter)),
        )
        # A rewind that replaces the last answer: the new answer would take a new number,
        # and turn 4's message would be gone.
        t.assistant("msg_OTHER", [text("A different answer")], parent=t.lines[-2]["uuid"])
        error = self.import_fails(self.write("r.jsonl", t))
        self.assertIn("the file drops turns 4: published turn numbers are frozen", error)
        self.assertEqual(snapshot(), before)

    def test_an_unpublished_session_may_shrink(self) -> None:
        t = tiny()
        self.run_import(self.write("t.jsonl", t))
        self.run_import(self.write("s.jsonl", without_last_line(t)))
        self.assertEqual(len(self.turns()), 3)

    def test_slugs(self) -> None:
        make = Session.objects.create
        make(slug="how-do-i-declare-a-storage-buffer-in-wgsl", title="Taken")
        self.run_import(self.write("t.jsonl", tiny()))
        imported = Session.objects.exclude(title="Taken").get()
        self.assertEqual(imported.slug, "how-do-i-declare-a-storage-buffer-in-wgsl-2")
        self.assertIn(
            "belongs to another session",
            self.import_fails(
                self.write("t.jsonl", tiny()), "--slug", "how-do-i-declare-a-storage-buffer-in-wgsl"
            ),
        )
        self.run_import(self.write("t.jsonl", tiny()), "--slug", "renamed")
        imported = Session.objects.exclude(title="Taken").get()
        self.assertEqual(imported.slug, "renamed")
        imported.publish()
        self.assertIn(
            "its slug is frozen",
            self.import_fails(self.write("t.jsonl", tiny()), "--slug", "again"),
        )


def without_last_line(t: Transcript) -> list[dict]:
    return t.lines[:-1]


class RoundTripTestCase(ImportingTestCase):
    def test_claude_code_to_kernelbin_and_back(self) -> None:
        self.run_import(MATMUL)
        self.client.force_login(self.charlie)
        first = json.loads(
            self.client.get("/s/matmul-the-dispatch-and-bounds-bugs/export.json").content
        )
        out = self.run_import(self.write("export.json", json.dumps(first)), "--slug", "copy")
        self.assertIn("Created session 'copy': 33 turns, 1 kernel, 5 kernel versions.", out)
        self.assertIn("already holds this recording's source key, so this copy has none", out)
        second = json.loads(self.client.get("/s/copy/export.json").content)
        for doc in (first, second):
            del doc["session"]["slug"], doc["session"]["source_key"]
        self.assertEqual(first, second)
        self.assertEqual(first["turns"][8]["kernel"], {"name": "matmul", "version": 3})
        self.assertEqual(first["kernels"][0]["versions"][2]["meta"]["how"], "edit_original")
