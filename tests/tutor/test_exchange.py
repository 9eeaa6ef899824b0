"""A lesson exchange with Claude, streamed: what the browser receives, what is stored,
and what is sent to the Messages API."""

from __future__ import annotations

from django.test import override_settings
from django.urls import reverse

from sessions.models import Turn
from sessions.programs import KernelVersion
from tests.tutor.helpers import (
    FAKE_KEY,
    MODEL,
    FakeAPI,
    TutorRunTestCase,
    TutorTestCase,
    message_json,
    names,
    read_events,
    streamed_text,
    text_reply,
    vector_kernel,
)
from tutor.models import ApiCall

REVIEW = (
    "Your run shows 64 of 128 cells never written, starting at cell 64.\n\n"
    "Look at line 5: `@workgroup_size(32)`. With 2 workgroups, how many invocations run?"
)


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class LessonExchangeTestCase(TutorRunTestCase):
    def test_it_streams_a_review_of_each_submission(self) -> None:
        guided = self.start()
        api = FakeAPI(text_reply(REVIEW), text_reply("It passes now. Why 64?"))
        buggy, fixed = vector_kernel(32), vector_kernel(64)

        with api.patch():
            first = read_events(self.submit(guided, buggy, note="First try"))
            second = read_events(self.submit(guided, fixed))

        # The browser sees: the learner's turn, the run, the tutor writing, the stored reply.
        self.assertEqual(
            names(first)[:5], ["turn", "running", "run", "start", "delta"], names(first)
        )
        self.assertEqual(names(first)[-2:], ["turn", "done"])
        self.assertEqual(first[2][1]["status"], "mismatch")
        self.assertFalse(first[1][1]["comparable"])  # no host program: nothing to compare
        self.assertIn("never written", first[2][1]["html"])
        # The submission's badge, shown "not run yet" a moment ago, is told the outcome.
        self.assertIn(f'data-version="{first[2][1]["version_id"]}"', first[0][1]["html"])
        self.assertEqual(first[2][1]["status_label"], "wrong results")
        self.assertEqual(streamed_text(first), REVIEW)
        reply = first[-2][1]
        self.assertEqual(reply["role"], "tutor")
        # The review's badge, drawn after the run, says how it ran.
        self.assertIn('<span class="badge-status">wrong results</span>', reply["html"])
        self.assertTrue(reply["replaces_live"])
        self.assertIn("<code>@workgroup_size(32)</code>", reply["html"])
        # Token counts are the operator's: a learner's page has none.
        self.assertNotIn("cache read", reply["html"])
        self.assertEqual(first[-1][1]["usage_html"], "")

        # Stored: learner submission → version → tutor review, linked both ways.
        turns = list(guided.session.turns.order_by("number"))
        self.assertEqual(
            [(t.role, t.kind) for t in turns],
            [
                ("tutor", "welcome"),
                ("learner", "submission"),
                ("tutor", "reply"),
                ("learner", "submission"),
                ("tutor", "reply"),
            ],
        )
        v1, v2 = KernelVersion.objects.filter(kernel=guided.kernel).order_by("number")
        self.assertEqual(v1.turn, turns[1])
        self.assertEqual(turns[1].kernel_version, v1)
        self.assertEqual(turns[2].kernel_version, v1)
        self.assertEqual(turns[4].kernel_version, v2)
        self.assertEqual(turns[1].meta["run"]["status"], "mismatch")
        self.assertEqual(turns[3].meta["run"]["status"], "passed")
        self.assertIn("First try", turns[1].content)
        self.assertEqual(turns[2].content, REVIEW)
        self.assertEqual(turns[2].meta["model"], MODEL)
        self.assertEqual(
            turns[2].meta["usage"],
            {
                "input_tokens": 120,
                "output_tokens": 42,
                "cache_read_tokens": 2000,
                "cache_write_tokens": 300,
            },
        )
        self.assertFalse(turns[2].meta["automatic"])
        self.assertEqual(turns[2].meta["reply_to"], 2)

        # Usage is stored per API call and summed per session.
        calls = ApiCall.objects.filter(guided=guided)
        self.assertEqual(calls.count(), 2)
        self.assertEqual(guided.usage_totals()["total"], 2 * (120 + 42 + 2000 + 300))
        self.assertEqual(calls.first().turn, turns[2])

        # What was sent: cached rules, lesson and tool; the learner's state at the end.
        sent = api.requests[0]["body"]
        self.assertEqual(sent["model"], MODEL)
        self.assertTrue(sent["stream"])
        system = sent["system"]
        self.assertEqual([block["cache_control"] for block in system], [{"type": "ephemeral"}] * 2)
        self.assertIn("never write the kernel", system[0]["text"])
        self.assertIn('<lesson slug="vector-add">', system[1]["text"])
        self.assertIn("dispatchWorkgroups(2, 1, 1)", system[1]["text"])
        self.assertEqual(sent["tools"][0]["name"], "run_kernel")
        self.assertEqual(sent["tools"][0]["cache_control"], {"type": "ephemeral"})
        state = api.last_user_text(0)
        self.assertIn('<kernel name="vector-add" version="1">', state)
        self.assertIn("5 | @compute @workgroup_size(32)", state)
        self.assertIn('<diff to="1">first version</diff>', state)
        self.assertIn('<run_result version="1">', state)
        self.assertIn('"unwritten": 64', state)
        self.assertTrue(state.rstrip().endswith("</reminder>"))
        # The reminder comes after the cache breakpoint: in the messages, not the system.
        self.assertNotIn("<reminder>", system[0]["text"] + system[1]["text"])

        second_state = api.last_user_text(1)
        self.assertIn('<diff from="1" to="2">', second_state)
        self.assertIn("-@compute @workgroup_size(32)", second_state)
        self.assertIn("+@compute @workgroup_size(64)", second_state)
        self.assertIn('"status": "passed"', second_state)
        # The history carries the first review as Claude's own words.
        history = api.requests[1]["body"]["messages"]
        self.assertEqual([m["role"] for m in history], ["user", "assistant", "user"])
        self.assertEqual(history[1]["content"][0]["text"], REVIEW)
        # The key went in the request header, and nowhere the browser can see.
        self.assertEqual(api.requests[0]["headers"]["authorization"], f"Bearer {FAKE_KEY}")
        for _, data in first + second:
            self.assertNotIn(FAKE_KEY, str(data))


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class MessageExchangeTestCase(TutorTestCase):
    def test_it_streams_a_reply_to_a_message(self) -> None:
        guided = self.start()
        api = FakeAPI(text_reply("How many invocations does one workgroup hold?"))
        with api.patch():
            events = read_events(self.say(guided, "Where do I start?"))

        kinds = names(events)
        self.assertEqual(kinds[:2] + kinds[-2:], ["turn", "start", "turn", "done"])
        # Released as it arrives (the guardrail holds only the first words of a line).
        self.assertGreater(kinds.count("delta"), 2)
        self.assertEqual(events[0][1]["role"], "learner")
        self.assertEqual(streamed_text(events), "How many invocations does one workgroup hold?")
        state = api.last_user_text()
        self.assertIn("</opening>\nWhere do I start?", state)
        self.assertIn('<kernel name="vector-add" version="starter" submitted="no">', state)
        self.assertIn("<run_result>nothing submitted yet</run_result>", state)
        # The app's welcome opens the first user message as context, not as Claude's turn.
        self.assertEqual([m["role"] for m in api.last["messages"]], ["user"])
        opening = api.last["messages"][0]["content"][0]["text"]
        self.assertTrue(opening.startswith("<opening shown_to_learner>"))
        self.assertIn("what do you already know about compute shaders?", opening)
        self.assertEqual(guided.session.turns.count(), 3)

    def test_it_works_without_javascript(self) -> None:
        guided = self.start()
        api = FakeAPI(message_json("What does global_invocation_id hold?"))
        with api.patch():
            response = self.client.post(self.url(guided, "say"), {"text": "Hello"})

        self.assertRedirects(response, f"{self.url(guided, 'session')}#composer")
        # Without a stream the app makes a plain (non-streaming) request.
        self.assertNotIn("stream", api.last)
        reply = guided.session.turns.order_by("number").last()
        self.assertEqual(reply.role, Turn.Role.TUTOR)
        self.assertEqual(reply.content, "What does global_invocation_id hold?")
        self.assertEqual(reply.meta["usage"]["output_tokens"], 55)
        page = self.client.get(self.url(guided, "session"))
        self.assertContains(page, "What does global_invocation_id hold?")

    def test_it_shows_usage_per_session(self) -> None:
        guided = self.start()
        with FakeAPI(text_reply("One question.")).patch():
            read_events(self.say(guided, "Hi"))
        page = self.client.get(self.url(guided, "session"))
        self.assertNotContains(page, "tokens this session")
        self.assertNotContains(page, "cache read")
        # Staff, who run the server, read them on the same page.
        self.client.force_login(self.charlie)
        page = self.client.get(self.url(guided, "session"))
        self.assertContains(page, "2,462 of 500,000 tokens this session (1 API call)")
        self.assertContains(page, "cache read 2000")

    def test_it_keeps_the_key_out_of_pages_and_exports(self) -> None:
        guided = self.start()
        with FakeAPI(text_reply("Which index does invocation 3 own?")).patch():
            events = read_events(self.say(guided, "Hi"))
        self.assertNotIn(FAKE_KEY, str(events))
        slug = guided.session.slug
        for url in (
            self.url(guided, "session"),
            reverse("tutor:index"),
            guided.session.get_absolute_url(),
            reverse("sessions:export_json", args=[slug]),
            reverse("sessions:export_md", args=[slug]),
        ):
            with self.subTest(url):
                response = self.client.get(url)
                self.assertEqual(response.status_code, 200)
                self.assertNotIn(FAKE_KEY, response.content.decode())
