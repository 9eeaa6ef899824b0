"""Shared scaffolding for the tutor's tests: the real anthropic SDK against a scripted
Messages API on an httpx2.MockTransport, SSE builders and parsers, and base classes.

FakeAPI records every request the app sends (body and headers) so tests can assert on
the system prompt, tools, cache markers and the learner's state in the last message.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import anthropic
import httpx2
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client, TestCase, TransactionTestCase, override_settings
from django.urls import reverse

from tutor import llm
from tutor.lessons import get_lesson
from tutor.models import GuidedSession

LESSONS_DIR = Path(__file__).resolve().parent / "lessons"
# Recognisable, so a test can prove it never reaches a page or a log line.
FAKE_KEY = "sk-ant-api03-FAKE-KEY-kernelbin-tests-0123456789abcdef"
MODEL = "claude-sonnet-5-5"

TUTOR_SETTINGS = {
    "TUTOR_LESSONS_DIR": LESSONS_DIR,
    "TUTOR_MODEL": MODEL,
    "ANTHROPIC_API_KEY": "",
    "TUTOR_BASE_URL": "",
    "TUTOR_MESSAGES_PER_MINUTE": 100,
    "TUTOR_SUBMISSIONS_PER_MINUTE": 100,
}

VECTOR_HEAD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
"""


def vector_kernel(size: int = 64, body: str = "out[id.x] = a[id.x] + b[id.x];") -> str:
    return (
        f"{VECTOR_HEAD}\n@compute @workgroup_size({size})\n"
        "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
        f"    {body}\n}}\n"
    )


# -- the Messages API, scripted ------------------------------------------------------------


def _sse(events: list[dict]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


USAGE = {
    "input_tokens": 120,
    "output_tokens": 1,
    "cache_read_input_tokens": 2000,
    "cache_creation_input_tokens": 300,
}


def _start(message_id: str = "msg_test") -> dict:
    return {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": USAGE,
        },
    }


def _text_block(index: int, text: str, chunk: int) -> list[dict]:
    events = [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }
    ]
    for i in range(0, len(text), chunk):
        events.append(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": text[i : i + chunk]},
            }
        )
    events.append({"type": "content_block_stop", "index": index})
    return events


def _end(stop_reason: str, output_tokens: int = 42) -> list[dict]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


class MessagesAPI(BaseHTTPRequestHandler):
    """Speaks just enough of POST /v1/messages with stream=true, over real HTTP: every
    request gets `reply`, streamed a few characters at a time with `pause` between."""

    reply = ""
    pause = 0.0
    received: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("request-id", "req_fake_server")
        self.end_headers()
        events = [_start("msg_fake"), *_text_block(0, self.reply, 6), *_end("end_turn")]
        for event in events:
            self.wfile.write(_sse([event]))
            self.wfile.flush()
            time.sleep(self.pause)  # arrive in pieces, as a real stream does
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def messages_api(reply: str, pause: float = 0.01) -> Iterator[tuple[str, list[dict]]]:
    """A Messages API on 127.0.0.1: yields its base URL and the requests it receives."""
    received: list[dict] = []
    handler = type(
        "Handler", (MessagesAPI,), {"reply": reply, "pause": pause, "received": received}
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()


def stream_response(events: list[dict]) -> httpx2.Response:
    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream", "request-id": "req_test_stream"},
        content=_sse(events),
    )


def text_reply(text: str, chunk: int = 7) -> httpx2.Response:
    return stream_response([_start(), *_text_block(0, text, chunk), *_end("end_turn")])


def tool_reply(
    tool_id: str = "toolu_01", arguments: dict | None = None, text: str = ""
) -> httpx2.Response:
    events = [_start()]
    index = 0
    if text:
        events += _text_block(0, text, 9)
        index = 1
    payload = json.dumps(arguments or {})
    events.append(
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "tool_use", "id": tool_id, "name": "run_kernel", "input": {}},
        }
    )
    for i in range(0, len(payload), 5):
        events.append(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": payload[i : i + 5]},
            }
        )
    events.append({"type": "content_block_stop", "index": index})
    events += _end("tool_use")
    return stream_response(events)


def broken_stream(text: str, error_type: str = "overloaded_error") -> httpx2.Response:
    """Some text, then an `event: error` in the middle of the stream."""
    events = [_start(), *_text_block(0, text, 5)[:-1]]
    events.append({"type": "error", "error": {"type": error_type, "message": "Overloaded"}})
    return stream_response(events)


def trickle(events: list[dict], then: dict, every: float, count: int) -> httpx2.Response:
    """A stream that sends events, then the event `then` every `every` seconds, count
    times: an upstream that only pings, or one that writes for ever."""

    def body() -> Iterator[bytes]:
        yield _sse(events)
        for _ in range(count):
            time.sleep(every)
            yield _sse([then])

    return httpx2.Response(
        200,
        headers={"content-type": "text/event-stream", "request-id": "req_trickle"},
        content=body(),
    )


def pinging(text: str, every: float = 0.05, count: int = 200) -> httpx2.Response:
    """Some text, then nothing but pings."""
    return trickle([_start(), *_text_block(0, text, 5)[:-1]], {"type": "ping"}, every, count)


def endless(text: str, every: float = 0.05, count: int = 200) -> httpx2.Response:
    """Text that keeps coming, a few characters at a time, far past any deadline."""
    more = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": " and"},
    }
    return trickle([_start(), *_text_block(0, text, 5)[:-1]], more, every, count)


def cut_stream(text: str) -> httpx2.Response:
    """Some text, then the stream simply ends: no content_block_stop, message_delta or
    message_stop."""
    return stream_response([_start(), *_text_block(0, text, 5)[:-1]])


def message_json(text: str) -> httpx2.Response:
    """A non-streaming Messages API answer."""
    return httpx2.Response(
        200,
        headers={"request-id": "req_test_json"},
        json={
            "id": "msg_json",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {**USAGE, "output_tokens": 55},
        },
    )


def status_error(status: int, error_type: str, headers: dict | None = None) -> httpx2.Response:
    return httpx2.Response(
        status,
        headers={"retry-after-ms": "1", **(headers or {})},
        json={"type": "error", "error": {"type": error_type, "message": f"{error_type} (test)"}},
    )


def raises(error: type[httpx2.RequestError]) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        raise error("simulated failure", request=request)

    return handler


class FakeAPI:
    """A scripted Messages API: each request takes the next reply from the script."""

    def __init__(self, *replies) -> None:
        self.script = list(replies)
        self.requests: list[dict] = []

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(
            {
                "path": request.url.path,
                "headers": dict(request.headers),
                "body": json.loads(request.content),
            }
        )
        if not self.script:
            raise AssertionError("The app made more API calls than the test scripted")
        reply = self.script.pop(0)
        return reply(request) if callable(reply) else reply

    def client(self, key: str = FAKE_KEY, max_retries: int = 0) -> anthropic.Anthropic:
        """The app's client (its deadlines included) on this script."""
        return llm.build_client(
            key, "http://mock.invalid", httpx2.MockTransport(self.handler), max_retries
        )

    def patch(self):
        """Make the app use this fake: the factory every API call goes through."""
        return mock.patch("tutor.llm.get_client", return_value=self.client())

    @property
    def last(self) -> dict:
        return self.requests[-1]["body"]

    def last_user_text(self, index: int = -1) -> str:
        message = self.requests[index]["body"]["messages"][-1]
        assert message["role"] == "user"
        return "\n".join(b.get("text", "") for b in message["content"] if b["type"] == "text")


# -- reading what the browser receives -------------------------------------------------------


def read_events(response) -> list[tuple[str, dict]]:
    body = b"".join(response.streaming_content).decode()
    events = []
    for block in body.split("\n\n"):
        name, data = "message", []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        if data:
            events.append((name, json.loads("\n".join(data))))
    return events


def names(events: list[tuple[str, dict]]) -> list[str]:
    return [name for name, _ in events]


def streamed_text(events: list[tuple[str, dict]]) -> str:
    return "".join(data["text"] for name, data in events if name == "delta")


# -- base classes ------------------------------------------------------------------------------


class TutorMixin:
    client: Client  # the test case's
    stream_headers: dict[str, Any] = {"HTTP_ACCEPT": "text/event-stream"}

    def make_users(self) -> None:
        cache.clear()  # rate-limit counters live in the cache
        self.csrf_client = Client(enforce_csrf_checks=True)
        # Alice is the learner in these tests.
        self.alice = User.objects.create_user("alice", "alice@example.org", "password")
        # Bob is another learner: he must not see or post to Alice's sessions.
        self.bob = User.objects.create_user("bob", "bob@example.org", "password")
        # Charlie is staff: he may read every session, and post to none of Alice's.
        self.charlie = User.objects.create_user(
            "charlie", "charlie@example.org", "password", is_staff=True
        )

    def start(self, lesson: str = "vector-add", user: User | None = None) -> GuidedSession:
        self.client.force_login(user or self.alice)
        response = self.client.post(reverse("tutor:start"), {"lesson": lesson})
        assert response.status_code == 302, response
        guided = GuidedSession.objects.order_by("-pk").first()
        assert guided is not None
        return guided

    def url(self, guided: GuidedSession, name: str) -> str:
        return reverse(f"tutor:{name}", args=[guided.session.slug])

    def say(self, guided: GuidedSession, text: str, **extra):
        return self.client.post(
            self.url(guided, "say"), {"text": text}, **self.stream_headers, **extra
        )

    def submit(self, guided: GuidedSession, source: str, note: str = ""):
        return self.client.post(
            self.url(guided, "submit"), {"source": source, "note": note}, **self.stream_headers
        )

    def retry(self, guided: GuidedSession):
        return self.client.post(self.url(guided, "retry"), **self.stream_headers)

    @staticmethod
    def lesson(slug: str = "vector-add"):
        return get_lesson(slug)


@override_settings(**TUTOR_SETTINGS)
class TutorTestCase(TutorMixin, TestCase):
    """For everything that runs no kernel."""

    def setUp(self) -> None:
        super().setUp()
        self.make_users()


@override_settings(**TUTOR_SETTINGS)
class TutorRunTestCase(TutorMixin, TransactionTestCase):
    """For tests that run kernels: the replay pool stores results from its own thread and
    connection, which must see what the test committed. Every run is waited for inside the
    test (kernels.replay.run_now waits), so nothing lands after it."""

    def setUp(self) -> None:
        super().setUp()
        self.make_users()
