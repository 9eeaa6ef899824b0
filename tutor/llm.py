"""The one place the Anthropic client is built, its deadlines, and how API failures read
to a learner.

Tests build their client with build_client() on an httpx2.MockTransport; a local fake
server is reached by setting TUTOR_BASE_URL (or ANTHROPIC_BASE_URL, which the SDK reads).
The key comes from settings.ANTHROPIC_API_KEY (the environment) and is never put into a
message, a log line or a page: errors are described by their kind and status only.

Deadlines. A reply holds a web thread while it streams, so nothing here may wait without
a bound: the HTTP read timeout is the stall deadline (TUTOR_STALL_TIMEOUT: an upstream
that sends nothing at all), and DeadlineTransport checks, as each piece of the stream
arrives, the reply's total deadline (sent with each request in DEADLINE_HEADER, which the
transport takes off) and the time since the last event that was not a `ping` (an
upstream that only pings is stalled too). The SDK retries only what it can retry at
once: a 429 or 529 whose retry-after is longer than TUTOR_RETRY_WAIT, or would pass the
deadline, is answered at once, and the learner is told when to press Retry.
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx2
from django.conf import settings

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

_lock = threading.Lock()
# Keyed by the settings a client is built from: key, base URL, stall timeout, retries.
_clients: dict[tuple[str, str, float, int], anthropic.Anthropic] = {}

# The reply's deadline, in seconds since the epoch, on each request the SDK sends.
DEADLINE_HEADER = "x-kernelbin-reply-deadline"
RETRIED_STATUSES = frozenset((408, 409, 429))


def configured() -> bool:
    """Whether a key is set: without one, the offline reviewer does the tutoring."""
    return bool(settings.ANTHROPIC_API_KEY)


class Stalled(httpx2.ReadTimeout):
    """The stream went past a deadline: kind is "deadline" (the whole reply) or "stall"
    (nothing but pings for too long)."""

    def __init__(self, kind: str, request: httpx2.Request) -> None:
        super().__init__(f"the reply's {kind} deadline passed", request=request)
        self.kind = kind


class _DeadlineStream(httpx2.SyncByteStream):
    def __init__(
        self,
        stream: httpx2.SyncByteStream,
        request: httpx2.Request,
        deadline: float,
        stalled: Callable[[float], None],
    ) -> None:
        self.stream = stream
        self.request = request
        self.deadline = deadline
        self.stalled = stalled

    def __iter__(self) -> Iterator[bytes]:
        last_event = time.monotonic()
        line_start = b""  # the start of a line still arriving (enough to know its name)
        for chunk in self.stream:
            lines = chunk.split(b"\n")
            for k, line in enumerate(lines):
                head = (line_start + line[:16]) if k == 0 else line[:16]
                if k < len(lines) - 1:
                    line_start = b""
                    if head.startswith(b"event:") and head[6:].strip() != b"ping":
                        last_event = time.monotonic()
                else:
                    line_start = head[:16]
            now = time.monotonic()
            if time.time() > self.deadline:
                raise Stalled("deadline", self.request)
            if now - last_event > settings.TUTOR_STALL_TIMEOUT:
                self.stalled(self.deadline)
                raise Stalled("stall", self.request)
            yield chunk

    def close(self) -> None:
        self.stream.close()


def _retry_after_seconds(headers: httpx2.Headers) -> float | None:
    """The wait an answer asks for (retry-after-ms, retry-after in seconds or a date)."""
    if value := headers.get("retry-after-ms"):
        try:
            return float(value) / 1000
        except ValueError:
            return None
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return when.timestamp() - time.time()


class DeadlineTransport(httpx2.BaseTransport):
    """Holds every request to the reply's deadlines (see the module's docstring)."""

    # Replies that stalled, by deadline: the SDK's retry of one (it retries timeouts, and
    # a non-streaming answer is read whole inside its request) is refused at once.
    REMEMBERED = 1024

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self.inner = inner
        self.stalls: dict[float, None] = {}
        self.lock = threading.Lock()

    def _stalled(self, deadline: float) -> None:
        with self.lock:
            self.stalls[deadline] = None
            while len(self.stalls) > self.REMEMBERED:
                del self.stalls[next(iter(self.stalls))]

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = float(request.headers.pop(DEADLINE_HEADER, "inf"))
        left = deadline - time.time()
        if left <= 0:
            raise Stalled("deadline", request)
        if deadline in self.stalls:
            raise Stalled("stall", request)
        # No single read may wait past the deadline either (a hung upstream).
        timeouts = dict(request.extensions.get("timeout") or {})
        timeouts["read"] = min(timeouts.get("read") or left, left)
        request.extensions["timeout"] = timeouts
        response = self.inner.handle_request(request)
        status = response.status_code
        if status in RETRIED_STATUSES or status >= 500:
            wait = _retry_after_seconds(response.headers)
            if wait is not None and (
                wait > settings.TUTOR_RETRY_WAIT or time.time() + wait > deadline
            ):
                # Not waited out on a web thread: the learner is told when to retry.
                response.headers["x-should-retry"] = "false"
        if isinstance(response.stream, httpx2.SyncByteStream) and deadline != float("inf"):
            response.stream = _DeadlineStream(response.stream, request, deadline, self._stalled)
        return response

    def close(self) -> None:
        self.inner.close()


def build_client(
    api_key: str,
    base_url: str | None = None,
    transport: httpx2.BaseTransport | None = None,
    max_retries: int | None = None,
) -> anthropic.Anthropic:
    """A client whose every request keeps the reply's deadlines."""
    # Imported here, once a reply needs it: the SDK's import (1.7 s on a quiet machine) kept
    # every web process's first page waiting when the URLconf pulled it in.
    import anthropic

    timeout = httpx2.Timeout(settings.TUTOR_STALL_TIMEOUT, connect=5.0)
    return anthropic.Anthropic(
        api_key=api_key,
        # None: the SDK falls back to ANTHROPIC_BASE_URL, then the public API.
        base_url=base_url,
        timeout=timeout,
        max_retries=settings.TUTOR_MAX_RETRIES if max_retries is None else max_retries,
        http_client=httpx2.Client(
            transport=DeadlineTransport(transport or httpx2.HTTPTransport()), timeout=timeout
        ),
    )


def get_client() -> anthropic.Anthropic:
    """The client for the current settings, built once and reused (it pools connections)."""
    key = (
        settings.ANTHROPIC_API_KEY,
        settings.TUTOR_BASE_URL,
        settings.TUTOR_STALL_TIMEOUT,
        settings.TUTOR_MAX_RETRIES,
    )
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = build_client(settings.ANTHROPIC_API_KEY, settings.TUTOR_BASE_URL or None)
            _clients.clear()
            _clients[key] = client
        return client


def deadline_headers(deadline: float) -> dict[str, str]:
    """The extra headers that give a request its reply's deadline (time.time() based)."""
    return {DEADLINE_HEADER: repr(deadline)}


@dataclass(frozen=True)
class Failure:
    """An API failure as the learner reads it."""

    # rate_limit, overloaded, server, timeout, connection, auth, refused, spend; and for a
    # reply cut off: deadline, stalled, cut
    kind: str
    message: str
    retry_after: int | None = None
    status: int | None = None


def _retry_after(error: anthropic.APIStatusError) -> int | None:
    if error.response is None:
        return None
    wait = _retry_after_seconds(error.response.headers)
    return None if wait is None else max(1, round(wait))


def describe_failure(error: Exception) -> Failure:
    """Plain words for what happened. Never includes the exception text: bodies and
    URLs are the server's, and we promise nothing from the request ends up on a page."""
    import anthropic  # loaded by then: build_client() imported it

    # A timeout before the answer began comes wrapped by the SDK.
    if isinstance(error.__cause__, Stalled):
        error = error.__cause__
    if isinstance(error, Stalled) and error.kind == "deadline":
        return Failure(
            "deadline",
            f"Claude did not finish within the {settings.TUTOR_REPLY_DEADLINE:g} s a reply "
            "may take.",
        )
    if isinstance(error, httpx2.TimeoutException):
        return Failure(
            "stalled",
            f"Claude's reply stalled (nothing arrived for {settings.TUTOR_STALL_TIMEOUT:g} s).",
        )
    if isinstance(error, httpx2.TransportError):
        return Failure("cut", "The connection to Claude broke off in the middle of the reply.")
    if isinstance(error, anthropic.APITimeoutError):
        return Failure("timeout", "Claude did not answer in time (the request timed out).")
    if isinstance(error, anthropic.APIConnectionError):
        return Failure("connection", "Could not reach Claude's API (a connection error).")
    if isinstance(error, anthropic.APIStatusError):
        status = error.status_code
        kind = getattr(error, "type", None) or ""
        # Errors that arrive inside a 200 stream carry their type, not a status.
        if status == 200:
            status = {"overloaded_error": 529, "rate_limit_error": 429}.get(kind, 500)
        if isinstance(
            error,
            anthropic.EnforcedSpendLimitReachedError | anthropic.ContractSpendLimitReachedError,
        ):
            return Failure(
                "spend",
                "The API account behind this tutor has reached its spend limit.",
                status=status,
            )
        if status == 429:
            return Failure(
                "rate_limit",
                "Claude's API is rate-limiting this server right now (429).",
                retry_after=_retry_after(error),
                status=429,
            )
        if status == 529:
            return Failure(
                "overloaded",
                "Claude is overloaded right now (529).",
                retry_after=_retry_after(error),
                status=529,
            )
        if status == 401:
            return Failure(
                "auth",
                "The API key was rejected (401): the operator must set a valid "
                "ANTHROPIC_API_KEY and restart the server.",
                status=401,
            )
        if status >= 500:
            return Failure(
                "server",
                f"Claude's API had an internal error ({status}).",
                retry_after=_retry_after(error),
                status=status,
            )
        return Failure("refused", f"Claude's API refused the request ({status}).", status=status)
    return Failure("server", "Something went wrong while talking to Claude.")


def log_failure(error: Exception, session_slug: str) -> None:
    # Class, status and request id only: enough to find it in the API console.
    log.warning(
        "Tutor API call failed for session %s: %s status=%s type=%s request_id=%s",
        session_slug,
        type(error).__name__,
        getattr(error, "status_code", None),
        getattr(error, "type", None),
        getattr(error, "request_id", None),
    )


def tutor_health() -> dict[str, object]:
    """For /healthz's details: which tutor learners get, and how to turn Claude on (an
    operator's matter, never shown on a learner's page)."""
    if configured():
        return {"tutor": "claude", "model": settings.TUTOR_MODEL}
    return {
        "tutor": "automatic reviewer",
        "claude": "off: set ANTHROPIC_API_KEY in the server's environment and restart it",
    }
