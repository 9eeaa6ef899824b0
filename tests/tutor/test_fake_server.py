"""End to end through real HTTP: a tiny Messages-API server on 127.0.0.1, and the app's
own client factory pointed at it by TUTOR_BASE_URL or ANTHROPIC_BASE_URL."""

from __future__ import annotations

import os
from unittest import mock

from django.test import override_settings

from tests.tutor.helpers import (
    FAKE_KEY,
    USAGE,
    TutorTestCase,
    messages_api,
    names,
    read_events,
    streamed_text,
)
from tutor import llm

REPLY = "What does global_invocation_id.x hold for the invocation that writes out[70]?"


class FakeServerTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.base_url, self.received = self.enterContext(messages_api(REPLY))

    def converse(self) -> list:
        guided = self.start()
        events = read_events(self.say(guided, "How do I pick my element?"))
        self.assertEqual(names(events)[0], "turn")
        self.assertEqual(names(events)[-2:], ["turn", "done"])
        self.assertEqual(streamed_text(events), REPLY)
        reply = guided.session.turns.order_by("number").last()
        self.assertEqual(reply.content, REPLY)
        self.assertEqual(reply.meta["usage"]["input_tokens"], USAGE["input_tokens"])
        self.assertEqual(reply.meta["request_id"], "req_fake_server")
        self.assertEqual(len(self.received), 1)
        request = self.received[0]
        self.assertEqual(request["path"], "/v1/messages")
        self.assertEqual(request["headers"]["Authorization"], f"Bearer {FAKE_KEY}")
        self.assertTrue(request["body"]["stream"])
        self.assertEqual(request["body"]["system"][0]["cache_control"], {"type": "ephemeral"})
        self.assertNotIn(FAKE_KEY, str(events))
        return events

    def test_it_talks_to_the_endpoint_in_tutor_base_url(self) -> None:
        with override_settings(ANTHROPIC_API_KEY=FAKE_KEY, TUTOR_BASE_URL=self.base_url):
            self.converse()

    def test_it_talks_to_the_endpoint_in_anthropic_base_url(self) -> None:
        with (
            override_settings(
                ANTHROPIC_API_KEY=FAKE_KEY, TUTOR_BASE_URL="", TUTOR_STALL_TIMEOUT=30.5
            ),
            mock.patch.dict(os.environ, {"ANTHROPIC_BASE_URL": self.base_url}),
        ):
            llm._clients.clear()  # built for another base URL by an earlier test
            self.converse()
