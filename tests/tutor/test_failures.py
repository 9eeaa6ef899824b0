"""API failures lose nothing: the learner's message is saved before the call, the page
says what happened in plain words, what arrived of a reply cut off is kept marked
incomplete (never as a whole reply), and Retry writes the reply to the same turn. The API
key never shows up anywhere."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from io import StringIO
from unittest import mock

import httpx2
from django.test import override_settings
from django.utils.html import escape

from sessions.models import Turn
from tests.tutor.helpers import (
    FAKE_KEY,
    FakeAPI,
    TutorTestCase,
    broken_stream,
    names,
    raises,
    read_events,
    status_error,
    text_reply,
)
from tutor.models import ApiCall, GuidedSession

FAILURES = {
    "rate limit": (status_error(429, "rate_limit_error"), "rate_limit", "rate-limiting"),
    "overloaded": (status_error(529, "overloaded_error"), "overloaded", "overloaded"),
    "server error": (status_error(500, "api_error"), "server", "internal error (500)"),
    "timeout": (raises(httpx2.ReadTimeout), "timeout", "did not answer in time"),
    "connection": (raises(httpx2.ConnectError), "connection", "Could not reach"),
    "mid-stream error": (
        broken_stream("Good question. The first thing to look at is"),
        "overloaded",
        "overloaded",
    ),
    "mid-stream server error": (
        broken_stream("Let me think about your index", "api_error"),
        "server",
        "internal error",
    ),
    "bad key": (status_error(401, "authentication_error"), "auth", "ANTHROPIC_API_KEY"),
}


@contextmanager
def captured_logs():
    """Everything any logger writes, at every level, SDK and HTTP client included."""
    buffer = StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    previous = {name: logging.getLogger(name).level for name in ("", "anthropic", "httpx2")}
    root.addHandler(handler)
    for name in previous:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)
        for name, level in previous.items():
            logging.getLogger(name).setLevel(level)


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class FailureTestCase(TutorTestCase):
    def test_it_keeps_the_message_and_offers_a_retry(self) -> None:
        for label, (reply, kind, words) in FAILURES.items():
            with self.subTest(label):
                GuidedSession.objects.all().delete()
                guided = self.start()
                api = FakeAPI(reply, text_reply("Which builtin gives each invocation its index?"))
                with captured_logs() as logs, api.patch():
                    failed = read_events(self.say(guided, "Where do I start?"))
                    page = self.client.get(self.url(guided, "session"))
                    retried = read_events(self.retry(guided))
                    final_page = self.client.get(self.url(guided, "session"))

                # The browser is told what happened, in plain words, with a retry.
                self.assertEqual(names(failed)[0], "turn")
                self.assertEqual(names(failed)[-1], "error")
                error = failed[-1][1]
                self.assertEqual(error["kind"], kind)
                self.assertIn(words, error["message"])
                self.assertIn("Your message is saved", error["message"])
                self.assertTrue(error["retry"])
                cut = "mid-stream" in label
                self.assertEqual(error["incomplete"], cut)
                if cut:
                    self.assertIn("delta", names(failed))
                    self.assertIn("kept, marked incomplete", error["message"])

                # The message is stored; the partial reply only marked incomplete.
                turns = list(guided.session.turns.order_by("number"))
                roles = ["tutor", "learner", "tutor"] if cut else ["tutor", "learner"]
                self.assertEqual([t.role for t in turns[: len(roles)]], roles)
                self.assertEqual(turns[1].content, "Where do I start?")
                if cut:
                    self.assertTrue(turns[2].meta["incomplete"])
                self.assertContains(page, escape(error["message"].split(".")[0]))
                self.assertContains(page, ">Retry</button>")

                # Retry answers the same learner turn: no second copy of the message.
                self.assertEqual(names(retried)[-2:], ["turn", "done"])
                turns = list(guided.session.turns.order_by("number"))
                self.assertEqual([t.role for t in turns], [*roles, "tutor"])
                self.assertEqual(turns[-1].meta["reply_to"], 2)
                self.assertNotIn("incomplete", turns[-1].meta)
                # Claude is not told the cut-off text was its answer.
                self.assertNotIn("The first thing", str(api.last["messages"]))
                guided.refresh_from_db()
                self.assertEqual(guided.last_error, "")
                self.assertIsNone(guided.replying_since)
                self.assertNotContains(final_page, "Your message is saved")
                self.assertIsNone(guided.pending_turn())

                # The failed call is on record (tokens a cut-off stream read are counted).
                failed_call = ApiCall.objects.get(guided=guided, outcome=ApiCall.Outcome.ERROR)
                if "mid-stream" in label:
                    self.assertEqual(failed_call.input_tokens, 120)

                # The key went out in the header and nowhere else.
                self.assertEqual(api.requests[0]["headers"]["authorization"], f"Bearer {FAKE_KEY}")
                for response in (page, final_page):
                    self.assertNotContains(response, FAKE_KEY)
                self.assertNotIn(FAKE_KEY, str(failed + retried))
                self.assertNotIn(FAKE_KEY, logs.getvalue())
                self.assertNotIn(FAKE_KEY, str(list(Turn.objects.values_list("content", "meta"))))

    def test_it_explains_a_failure_without_javascript(self) -> None:
        guided = self.start()
        with FakeAPI(status_error(529, "overloaded_error")).patch():
            response = self.client.post(self.url(guided, "say"), {"text": "Hello"}, follow=True)
        self.assertContains(response, "Claude is overloaded right now (529).")
        self.assertContains(response, ">Retry</button>")
        self.assertEqual(guided.session.turns.filter(role=Turn.Role.LEARNER).count(), 1)

    def test_it_refuses_a_retry_with_nothing_pending(self) -> None:
        guided = self.start()
        with FakeAPI(text_reply("Fine.")).patch():
            read_events(self.say(guided, "Hi"))
        response = self.retry(guided)
        self.assertEqual(response.status_code, 409)
        self.assertIn("nothing to retry", response.json()["error"])

    def test_it_answers_one_message_at_a_time(self) -> None:
        guided = self.start()
        self.assertTrue(guided.claim_reply())
        response = self.say(guided, "Hello again")
        self.assertEqual(response.status_code, 409)
        self.assertIn("still busy", response.json()["error"])
        self.assertFalse(guided.session.turns.filter(role=Turn.Role.LEARNER).exists())

    def test_it_releases_the_lock_when_the_browser_goes_away(self) -> None:
        guided = self.start()
        with FakeAPI(text_reply("A long answer that the learner never reads in full.")).patch():
            response = self.say(guided, "Hi")
            stream = iter(response.streaming_content)
            next(stream)  # the stream opens,
            next(stream)  # the learner's turn arrives, then the tab is closed mid-reply
            # The test client's wrapper closes the response the way a server does when
            # the client disconnects (and keeps the test's database connection open).
            response._iterator.close()
        guided.refresh_from_db()
        self.assertIsNone(guided.replying_since)
        self.assertEqual(guided.session.turns.filter(role=Turn.Role.LEARNER).count(), 1)


@override_settings(ANTHROPIC_API_KEY=FAKE_KEY)
class InternalErrorTestCase(TutorTestCase):
    def test_it_reports_a_bug_plainly_and_keeps_the_message(self) -> None:
        guided = self.start()
        with (
            mock.patch("tutor.prompts.request", side_effect=RuntimeError("bug with secret detail")),
            self.assertLogs("tutor.views", "ERROR"),
        ):
            events = read_events(self.say(guided, "Hello"))
        self.assertEqual(names(events), ["turn", "error"])
        self.assertEqual(events[-1][1]["kind"], "internal")
        self.assertNotIn("secret detail", str(events))
        guided.refresh_from_db()
        self.assertIsNone(guided.replying_since)
        self.assertTrue(guided.session.turns.filter(content="Hello").exists())
        self.assertIsNotNone(guided.pending_turn())
