"""What the learner decided inside a tool call reads as the learner's own words (issue 13,
point 2): answers to AskUserQuestion, and why a call or a plan was rejected."""

from __future__ import annotations

from django.urls import reverse

from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text, tool_use

QUESTION = "Which workgroup size should the reduction use?"
OPTIONS = [
    {"label": "64", "description": "One warp-sized group per row"},
    {"label": "256", "description": "Fewer, larger groups"},
]
REJECTION = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
    "the user said:\n"
)


def asked(structured: bool, answer: str = "256") -> Transcript:
    t = Transcript("asked")
    t.user("Help me write a reduction.", parent=None)
    questions = [{"question": QUESTION, "header": "Size", "options": OPTIONS, "multiSelect": False}]
    t.assistant(
        "msg_Q1", [tool_use("toolu_Ask", "AskUserQuestion", questions=questions)], "tool_use"
    )
    detail = {"questions": questions, "answers": {QUESTION: answer}} if structured else None
    t.result(
        "toolu_Ask",
        f'User has answered your questions: "{QUESTION}"="{answer}". You can now continue '
        "with the user's answers in mind.",
        detail,
    )
    t.assistant("msg_Q2", [text(f"{answer} it is.")])
    return t


# Claude Code's newer wording (2.1).
REJECTION_WITH_REASON = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). The user provided the "
    "following reason for the rejection: "
)


def rejected(name: str, reason: str, wording: str = REJECTION, **params) -> Transcript:
    t = Transcript("rejected")
    t.user("Set up the test runner.", parent=None)
    t.assistant("msg_R1", [tool_use("toolu_R", name, **params)], "tool_use")
    t.result(
        "toolu_R", wording + reason if reason else REJECTION.split(" To tell")[0], is_error=True
    )
    t.assistant("msg_R2", [text("Understood.")])
    return t


class AnswersTestCase(ImportingTestCase):
    def test_an_answer_is_the_learners_turn_under_its_question(self) -> None:
        self.run_import(self.write("asked.jsonl", asked(structured=True)))
        shape = [(t.role, t.kind) for t in self.turns()]
        self.assertEqual(
            shape, [("learner", ""), ("tool", "tool_call"), ("learner", "answer"), ("tutor", "")]
        )
        call, answer = self.turns()[1], self.turns()[2]
        self.assertEqual(answer.content, f"> {QUESTION}\n\n**256**")
        self.assertEqual(answer.meta["context"], "answered the question")
        # The call shows the question and every option, the chosen one marked.
        self.assertIn(f"**{QUESTION}**", call.content)
        # Each option keeps its description.
        self.assertIn(
            "- 64 — One warp-sized group per row\n- **✔ 256** — Fewer, larger groups", call.content
        )
        self.assertEqual(call.meta["summary"], f"AskUserQuestion {QUESTION}")

    def test_an_answer_is_read_from_the_text_when_the_result_has_no_structure(self) -> None:
        self.run_import(self.write("asked.jsonl", asked(structured=False, answer="128, to try")))
        answer = self.turns()[2]
        self.assertEqual(answer.kind, "answer")
        self.assertIn("**128, to try**", answer.content)
        self.assertIn("**✔ 128, to try** *(typed)*", self.turns()[1].content)

    def test_the_session_page_shows_the_answer_outside_the_folded_call(self) -> None:
        self.run_import(self.write("asked.jsonl", asked(structured=True)))
        session = self.session()
        session.publish()
        page = self.client.get(reverse("sessions:detail", args=[session.slug])).content.decode()
        turn = page.split('id="turn-3"')[1].split("</article>")[0]
        self.assertNotIn("<details", turn)
        self.assertIn("answered the question", turn)
        self.assertIn("<strong>256</strong>", turn)


class RejectionsTestCase(ImportingTestCase):
    def test_the_reason_for_a_rejection_is_the_learners_turn(self) -> None:
        t = rejected("Bash", "use pnpm, not npm\n(we have a lockfile)", command="npm install")
        self.run_import(self.write("rejected.jsonl", t))
        call, said = self.turns()[1], self.turns()[2]
        self.assertTrue(call.meta["rejected"])
        self.assertEqual((said.role, said.kind), ("learner", "rejection"))
        self.assertEqual(said.content, "use pnpm, not npm\n(we have a lockfile)")
        self.assertEqual(said.meta["context"], "rejected the Bash call")
        self.assertEqual(said.meta["source_id"], "toolu_R:rejection")

    def test_the_newer_wording_of_a_reason_is_the_learners_turn_too(self) -> None:
        reason = "Ah no, this project uses pnpm: run pnpm install instead"
        t = rejected("Bash", reason, REJECTION_WITH_REASON, command="npm install")
        t.assistant("msg_R3", [text("Ah, the user prefers pnpm!")])
        self.run_import(self.write("rejected.jsonl", t))
        call, said = self.turns()[1], self.turns()[2]
        self.assertEqual((said.role, said.kind, said.content), ("learner", "rejection", reason))
        # The call's result keeps the whole message; the reason is not cut off inside it.
        self.assertIn(reason, call.content)
        session = self.session()
        session.publish()
        page = self.client.get(reverse("sessions:detail", args=[session.slug])).content.decode()
        turn = page.split('id="turn-3"')[1].split("</article>")[0]
        self.assertNotIn("<details", turn)
        self.assertIn("pnpm install instead", turn)

    def test_a_rejected_plan_gives_its_reason_and_shows_the_plan(self) -> None:
        plan = "## Plan\n\n1. Write the kernel\n2. Test it"
        t = rejected("ExitPlanMode", "Test first, then write it.", plan=plan)
        self.run_import(self.write("plan.jsonl", t))
        call, said = self.turns()[1], self.turns()[2]
        self.assertIn(plan, call.content)
        self.assertEqual(said.content, "Test first, then write it.")

    def test_a_rejection_without_words_adds_no_turn(self) -> None:
        self.run_import(self.write("bare.jsonl", rejected("Bash", "", command="rm -rf build")))
        self.assertEqual([t.role for t in self.turns()], ["learner", "tool", "tutor"])

    def test_the_report_calls_a_rejected_script_a_script_not_a_kernel(self) -> None:
        t = rejected("Write", "", file_path="/home/alice/demo/main.js", content="run();\n")
        out = self.run_import(self.write("script.jsonl", t))
        self.assertIn("Failed or rejected edits, which made no version: 1 of .js files.", out)
        self.assertNotIn("kernel", out.split("Failed")[1].splitlines()[0])

    def test_an_approved_plan_says_so(self) -> None:
        t = Transcript("approved")
        t.user("Plan the lesson.", parent=None)
        t.assistant("msg_P1", [tool_use("toolu_P", "ExitPlanMode", plan="1. Kernels")], "tool_use")
        t.result("toolu_P", "User has approved your plan. You can now start coding.")
        self.run_import(self.write("approved.jsonl", t))
        self.assertEqual(self.turns()[1].meta["summary"], "ExitPlanMode · approved")
