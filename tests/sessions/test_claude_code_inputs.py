"""Inputs issue 26 found in real transcripts: a first prompt left unanswered stays first,
a /doctor or /status run off to the side is noted, a summary of another session is not
the title."""

from __future__ import annotations

from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text


class InputsTestCase(ImportingTestCase):
    def test_a_first_unanswered_prompt_stays_first(self) -> None:
        t = Transcript("unanswered")
        t.user("Make the softmax numerically stable.", parent=None)
        # Interrupted before any answer; asked again as a new conversation.
        t.user("Make the softmax numerically stable, subtract the max first.", parent=None)
        t.assistant("msg_S1", [text("Subtracting the row's max before exp().")])
        out = self.run_import(self.write("unanswered.jsonl", t))
        first, second, reply = self.turns()
        self.assertEqual((first.role, first.kind), ("learner", "unanswered"))
        self.assertEqual(first.content, "Make the softmax numerically stable.")
        self.assertEqual(first.meta["context"], "not answered")
        self.assertEqual(second.role, "learner")
        self.assertEqual(reply.role, "tutor")
        self.assertNotIn("do not connect", "".join(turn.content for turn in self.turns()))
        self.assertIn("Created session", out)

    def test_a_doctor_run_off_to_the_side_is_noted(self) -> None:
        t = Transcript("doctor")
        t.user("Is my setup fine?", parent=None)
        reply = t.assistant("msg_D1", [text("Let me know what /doctor says.")])[-1]
        # Claude Code wrote the command's lines on a branch of their own.
        t.user("<command-name>/doctor</command-name>\n<command-args></command-args>", parent=reply)
        t.user("<local-command-stdout>Installation: OK\nAuto-updates: on</local-command-stdout>")
        t.user("It says OK.", parent=reply)
        t.assistant("msg_D2", [text("Good, then the bug is in the kernel.")])
        self.run_import(self.write("doctor.jsonl", t))
        contents = [turn.content for turn in self.turns()]
        self.assertIn("Ran `/doctor`", contents)
        self.assertTrue(any("Installation: OK" in c for c in contents))
        self.assertEqual(self.turns()[-1].content, "Good, then the bug is in the kernel.")

    def test_a_summary_of_another_session_is_not_the_title(self) -> None:
        t = Transcript("titled")
        t.plain(
            {
                "type": "summary",
                "summary": "Refactoring the billing service",
                "leafUuid": "0b1f2e3d-0000-4000-8000-000000000000",
            }
        )
        t.user("Why does my reduction return zero?", parent=None)
        t.assistant("msg_T1", [text("The barrier is missing.")])
        out = self.run_import(self.write("titled.jsonl", t))
        self.assertEqual(self.session().title, "Why does my reduction return zero?")
        self.assertIn("1 summary line(s) of other sessions of the project: not the title.", out)

    def test_lines_without_parents_are_read_in_file_order(self) -> None:
        # Other tools write transcripts without parentUuid: each line is its own root.
        t = Transcript("flat")
        t.user("What is a workgroup?", parent=None)
        t.assistant("msg_F1", [text("A group of invocations that share memory.")], parent=None)
        t.user("And a subgroup?", parent=None)
        t.assistant("msg_F2", [text("A hardware-sized slice of a workgroup.")], parent=None)
        out = self.run_import(self.write("flat.jsonl", t))
        self.assertEqual(
            [turn.content for turn in self.turns()],
            [
                "What is a workgroup?",
                "A group of invocations that share memory.",
                "And a subgroup?",
                "A hardware-sized slice of a workgroup.",
            ],
        )
        self.assertNotIn("unconnected", out)
