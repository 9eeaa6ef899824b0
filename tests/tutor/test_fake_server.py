"""End to end through real HTTP: a tiny Messages-API server on 127.0.0.1, and the app's
own client factory pointed at it by TUTOR_BASE_URL or ANTHROPIC_BASE_URL."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

from django.test import override_settings

from tests.tutor.helpers import FAKE_KEY, MODEL, TutorTestCase, names, read_events, streamed_text
from tutor import llm

REPLY = [
    "What does ",
    "global_invocation_id.x ",
    "hold for the invocation ",
    "that writes out[70]?",
]


class MessagesAPI(BaseHTTPRequestHandler):
    """Speaks just enough of POST /v1/messages with stream=true."""

    received: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("request-id", "req_fake_server")
        self.end_headers()
        events = [
            {
                "type": "message_start",
                "message": {
                    "id": "msg_fake",
                    "type": "message",
                    "role": "assistant",
                    "model": MODEL,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 900, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            *[
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": part},
                }
                for part in REPLY
            ],
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 17},
            },
            {"type": "message_stop"},
        ]
        for event in events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.01)  # arrive in pieces, as a real stream does
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class FakeServerTestCase(TutorTestCase):
    def setUp(self) -> None:
        super().setUp()
        MessagesAPI.received = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), MessagesAPI)
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}"

    def converse(self) -> list:
        guided = self.start()
        events = read_events(self.say(guided, "How do I pick my element?"))
        self.assertEqual(names(events)[0], "turn")
        self.assertEqual(names(events)[-2:], ["turn", "done"])
        self.assertEqual(streamed_text(events), "".join(REPLY))
        reply = guided.session.turns.order_by("number").last()
        self.assertEqual(reply.content, "".join(REPLY))
        self.assertEqual(reply.meta["usage"]["input_tokens"], 900)
        self.assertEqual(reply.meta["request_id"], "req_fake_server")
        self.assertEqual(len(MessagesAPI.received), 1)
        request = MessagesAPI.received[0]
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
            override_settings(ANTHROPIC_API_KEY=FAKE_KEY, TUTOR_BASE_URL="", TUTOR_TIMEOUT=30.5),
            mock.patch.dict(os.environ, {"ANTHROPIC_BASE_URL": self.base_url}),
        ):
            llm._clients.clear()  # built for another base URL by an earlier test
            self.converse()
