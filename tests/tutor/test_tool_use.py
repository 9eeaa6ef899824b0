"""The run_kernel tool: Claude asks, the app runs the learner's kernel for real, the
result goes back as a tool_result, and every step is recorded as a turn."""

from __future__ import annotations

import json

from django.test import override_settings

from sessions.models import Turn
from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorRunTestCase,
    names,
    read_events,
    text_reply,
    tool_reply,
    vector_kernel,
)
from tutor.models import ApiCall


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class RunKernelToolTestCase(TutorRunTestCase):
    def test_it_runs_the_kernel_when_claude_asks(self) -> None:
        guided = self.start()
        # v1 is submitted with a bug; the review comes from Claude too.
        with FakeAPI(text_reply("What does line 7 compute?")).patch():
            read_events(self.submit(guided, vector_kernel(body="out[id.x] = a[id.x] - b[id.x];")))

        api = FakeAPI(
            tool_reply("toolu_run1", {}, text="Let me run it first."),
            text_reply("Every cell is off: the sign of b is flipped. Which operator is on line 7?"),
        )
        with api.patch():
            events = read_events(self.say(guided, "Is my kernel right now?"))

        self.assertEqual(
            names(events)[:3], ["turn", "start", "delta"], "learner turn, then the tutor streams"
        )
        self.assertIn("run", names(events))
        self.assertEqual(names(events)[-2:], ["turn", "done"])
        run_event = next(data for name, data in events if name == "run")
        self.assertEqual(run_event["status"], "mismatch")

        # The tool call and its result are turns, between the two parts of the reply.
        turns = list(guided.session.turns.order_by("number"))[3:]
        self.assertEqual(
            [(t.role, t.kind) for t in turns],
            [
                ("learner", "message"),
                ("tutor", "reply"),
                ("tool", "tool_call"),
                ("tool", "tool_result"),
                ("tutor", "reply"),
            ],
        )
        _, preamble, call, result, final = turns
        version = guided.kernel.versions.get(number=1)
        self.assertEqual(preamble.content, "Let me run it first.")
        self.assertEqual(call.meta["tool"], "run_kernel")
        self.assertEqual(call.meta["tool_use_id"], "toolu_run1")
        self.assertEqual(result.meta["tool_use_id"], "toolu_run1")
        self.assertFalse(result.meta["is_error"])
        self.assertEqual(result.meta["run"]["status"], "mismatch")
        self.assertEqual(result.kernel_version, version)
        self.assertIn("wrong results", result.content)
        # The final reply reviews the version the tool ran.
        self.assertEqual(final.kernel_version, version)
        self.assertIsNone(preamble.kernel_version)

        # The second request carries Claude's tool call and the real run's result.
        second = api.requests[1]["body"]["messages"]
        assistant, user = second[-2], second[-1]
        self.assertEqual(assistant["role"], "assistant")
        self.assertEqual([b["type"] for b in assistant["content"]], ["text", "tool_use"], assistant)
        self.assertEqual(assistant["content"][1]["id"], "toolu_run1")
        tool_result = user["content"][0]
        self.assertEqual(tool_result["type"], "tool_result")
        self.assertEqual(tool_result["tool_use_id"], "toolu_run1")
        facts = json.loads(tool_result["content"])
        self.assertEqual(facts["status"], "mismatch")
        self.assertEqual(facts["outputs"][0]["bad"], 128)
        # The state and the reminder ride along after the tool result.
        self.assertEqual(user["content"][-1]["type"], "text")
        self.assertIn("<reminder>", user["content"][-1]["text"])
        # Both rounds' tokens are counted, each on its own first turn.
        calls = ApiCall.objects.filter(guided=guided).order_by("pk")
        self.assertEqual(
            [c.turn for c in calls], [turns[0].session.turns.get(number=3), preamble, final]
        )

    def test_it_reports_a_tool_call_before_any_submission(self) -> None:
        guided = self.start()
        api = FakeAPI(tool_reply("toolu_none", {}), text_reply("Submit a first version, then."))
        with api.patch():
            events = read_events(self.say(guided, "Can you check my code?"))

        self.assertEqual(names(events)[-1], "done")
        result = guided.session.turns.get(meta__kind="tool_result")
        self.assertTrue(result.meta["is_error"])
        self.assertIsNone(result.kernel_version)
        sent = api.requests[1]["body"]["messages"][-1]["content"][0]
        self.assertTrue(sent["is_error"])
        self.assertIn("not submitted a kernel yet", sent["content"])
        # With no text before the call, the round's usage is on the call's turn.
        call = guided.session.turns.get(meta__kind="tool_call")
        self.assertEqual(call.meta["usage"]["input_tokens"], 120)
        self.assertEqual(call.role, Turn.Role.TOOL)
