"""No tutor reply holds a web thread without a bound: a stream that only pings stalls, one
that never ends meets the reply's deadline, a long retry-after is told to the learner
instead of waited out, a stream cut off is kept as an incomplete reply (never as a whole
one), and Retry answers the same message. The real anthropic SDK, over a mock transport."""

from __future__ import annotations

import time
from unittest import mock

import httpx2
from django.test import override_settings

from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorTestCase,
    cut_stream,
    endless,
    names,
    pinging,
    read_events,
    status_error,
    text_reply,
)
from tutor import llm
from tutor.models import ApiCall
from tutor.replies import INCOMPLETE_NOTE

FAST = {
    "ANTHROPIC_API_KEY": FAKE_KEY,
    "TUTOR_STALL_TIMEOUT": 0.3,
    "TUTOR_REPLY_DEADLINE": 1.0,
    "TUTOR_REQUEST_BUDGET": 10.0,
}


def rate_limited(seconds: str, status: int = 429) -> httpx2.Response:
    kind = "rate_limit_error" if status == 429 else "overloaded_error"
    return httpx2.Response(
        status,
        headers={"retry-after": seconds},
        json={"type": "error", "error": {"type": kind, "message": "slow down (test)"}},
    )


@override_settings(**FAST)
class DeadlineTestCase(TutorTestCase):
    def exchange(self, *script, message: str = "Where do I start?", **client):
        guided = self.start()
        api = FakeAPI(*script)
        with self.patched(api, **client):
            events = read_events(self.say(guided, message))
        return guided, api, events

    @staticmethod
    def patched(api: FakeAPI, **client):
        return mock.patch("tutor.llm.get_client", return_value=api.client(**client))

    def assert_incomplete(self, guided, events, kind: str, arrived: str) -> None:
        self.assertEqual(names(events)[-2:], ["turn", "error"])
        error = events[-1][1]
        self.assertEqual(error["kind"], kind)
        self.assertTrue(error["retry"])
        self.assertTrue(error["incomplete"])
        self.assertIn("Your message is saved", error["message"])
        self.assertIn("kept, marked incomplete", error["message"])
        learner, reply = guided.session.turns.order_by("number")[1:3]
        self.assertEqual(learner.content, "Where do I start?")
        # What arrived is kept, marked incomplete, and the message still waits for a reply.
        self.assertTrue(reply.meta["incomplete"])
        self.assertEqual(reply.meta["reply_to"], learner.number)
        self.assertTrue(reply.content.startswith(arrived))
        self.assertTrue(reply.content.endswith(INCOMPLETE_NOTE))
        guided.refresh_from_db()
        self.assertEqual(guided.pending_turn(), learner)
        self.assertEqual(ApiCall.objects.get(guided=guided).outcome, ApiCall.Outcome.ERROR)

    def retry_answers_it(self, guided) -> None:
        api = FakeAPI(text_reply("Which builtin gives each invocation its index?"))
        with self.patched(api):
            events = read_events(self.retry(guided))
            page = self.client.get(self.url(guided, "session"))
        self.assertEqual(names(events)[-2:], ["turn", "done"])
        guided.refresh_from_db()
        self.assertIsNone(guided.pending_turn())
        # The cut-off reply is not sent back to Claude as its answer.
        self.assertNotIn("Cut off", str(api.last["messages"]))
        self.assertContains(page, "Cut off: this reply is incomplete")
        self.assertContains(page, "Which builtin gives each invocation its index?")

    def test_an_upstream_that_only_pings_is_stalled(self) -> None:
        guided, _, events = self.exchange(pinging("Let me look at your index"))
        self.assert_incomplete(guided, events, "stalled", "Let me look at your index")
        self.assertIn("nothing arrived for 0.3 s", events[-1][1]["message"])
        self.retry_answers_it(guided)

    def test_a_stalled_answer_is_not_asked_again(self) -> None:
        # Without streaming the SDK reads the answer inside its request, and retries a
        # timeout there: the stall must not be waited out twice.
        guided = self.start()
        api = FakeAPI(pinging("Let me look"), text_reply("never asked for"))
        with self.patched(api, max_retries=1):
            self.client.post(self.url(guided, "say"), {"text": "Where do I start?"})
        self.assertEqual(len(api.requests), 1)
        guided.refresh_from_db()
        self.assertIn("nothing arrived for 0.3 s", guided.last_error)
        self.assertEqual(guided.pending_turn().content, "Where do I start?")

    def test_a_reply_that_never_ends_meets_its_deadline(self) -> None:
        # Text keeps coming (never a stall) for far longer than the deadline.
        guided, _, events = self.exchange(endless("Think about", every=0.05, count=400))
        self.assert_incomplete(guided, events, "deadline", "Think about and")
        self.assertIn("within the 1 s a reply may take", events[-1][1]["message"])
        self.retry_answers_it(guided)

    @override_settings(TUTOR_REPLY_DEADLINE=60.0, TUTOR_REQUEST_BUDGET=1.5)
    def test_the_requests_budget_caps_the_reply_deadline(self) -> None:
        guided, _, events = self.exchange(endless("Think about", every=0.05, count=400))
        self.assert_incomplete(guided, events, "deadline", "Think about and")

    def test_a_stream_cut_off_is_kept_as_incomplete_not_as_whole(self) -> None:
        arrived = "Good question. The first thing to look at is the dispatch, because"
        guided, _, events = self.exchange(cut_stream(arrived))
        self.assert_incomplete(guided, events, "cut", arrived)
        self.assertIn("broke off in the middle of the reply", events[-1][1]["message"])
        self.retry_answers_it(guided)

    def test_a_stream_with_nothing_in_it_is_no_reply(self) -> None:
        empty = httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=b"")
        guided, _, events = self.exchange(empty)
        self.assertEqual(names(events), ["turn", "start", "error"])
        self.assertEqual(events[-1][1]["kind"], "cut")
        self.assertFalse(events[-1][1]["incomplete"])
        guided.refresh_from_db()
        self.assertEqual(guided.pending_turn().content, "Where do I start?")

    def test_a_long_retry_after_is_told_not_waited_out(self) -> None:
        for status in (429, 529):
            with self.subTest(status):
                # The SDK may retry once, but not after 30 s on a web thread.
                guided, api, events = self.exchange(rate_limited("30", status), max_retries=1)
                self.assertEqual(len(api.requests), 1)
                error = events[-1][1]
                self.assertEqual(error["retry_after"], 30)
                self.assertIn("Press Retry in 30 s or later.", error["message"])
                self.assertFalse(error["incomplete"])
                guided.refresh_from_db()
                self.assertIsNotNone(guided.pending_turn())

    def test_a_short_retry_after_is_retried_by_the_sdk(self) -> None:
        _, api, events = self.exchange(
            status_error(429, "rate_limit_error"), text_reply("What does id.x hold?"), max_retries=1
        )
        self.assertEqual(len(api.requests), 2)
        self.assertEqual(names(events)[-1], "done")

    def test_a_retry_after_past_the_deadline_is_not_waited_out(self) -> None:
        _, api, events = self.exchange(rate_limited("1.5"), max_retries=1)
        self.assertEqual(len(api.requests), 1)
        self.assertEqual(events[-1][1]["retry_after"], 2)

    @override_settings(TUTOR_CONCURRENT_REPLIES=0)
    def test_replies_beyond_the_processs_slots_are_refused_at_once(self) -> None:
        guided, api, events = self.exchange()
        self.assertEqual(api.requests, [])
        self.assertEqual(names(events), ["turn", "error"])
        self.assertEqual(events[-1][1]["kind"], "busy")
        self.assertEqual(events[-1][1]["retry_after"], 5)
        guided.refresh_from_db()
        self.assertEqual(guided.pending_turn().content, "Where do I start?")


@override_settings(**FAST)
class DeadlineTransportTestCase(TutorTestCase):
    def test_a_request_past_its_deadline_is_never_sent(self) -> None:
        sent: list[httpx2.Request] = []
        transport = llm.DeadlineTransport(httpx2.MockTransport(sent.append))
        request = httpx2.Request(
            "POST", "http://mock.invalid/v1/messages", headers=llm.deadline_headers(time.time())
        )
        with self.assertRaises(llm.Stalled):
            transport.handle_request(request)
        self.assertEqual(sent, [])

    def test_the_deadline_header_never_leaves_the_process(self) -> None:
        api = FakeAPI(text_reply("Fine."))
        client = api.client()
        with client.messages.stream(
            model="m",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers=llm.deadline_headers(time.time() + 60),
        ) as stream:
            self.assertEqual(stream.get_final_text(), "Fine.")
        self.assertNotIn(llm.DEADLINE_HEADER, api.requests[0]["headers"])
