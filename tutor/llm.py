"""The one place the Anthropic client is built, and how API failures read to a learner.

Tests replace get_client() with a client on an httpx2.MockTransport; a local fake
server is reached by setting TUTOR_BASE_URL (or ANTHROPIC_BASE_URL, which the SDK reads).
The key comes from settings.ANTHROPIC_API_KEY (the environment) and is never put into a
message, a log line or a page: errors are described by their kind and status only.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import anthropic
import httpx2
from django.conf import settings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_clients: dict[tuple, anthropic.Anthropic] = {}


def configured() -> bool:
    """Whether a key is set: without one, the offline reviewer does the tutoring."""
    return bool(settings.ANTHROPIC_API_KEY)


def get_client() -> anthropic.Anthropic:
    """The client for the current settings, built once and reused (it pools connections)."""
    key = (
        settings.ANTHROPIC_API_KEY,
        settings.TUTOR_BASE_URL,
        settings.TUTOR_TIMEOUT,
        settings.TUTOR_MAX_RETRIES,
    )
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = anthropic.Anthropic(
                api_key=settings.ANTHROPIC_API_KEY,
                # None: the SDK falls back to ANTHROPIC_BASE_URL, then the public API.
                base_url=settings.TUTOR_BASE_URL or None,
                timeout=httpx2.Timeout(settings.TUTOR_TIMEOUT, connect=5.0),
                max_retries=settings.TUTOR_MAX_RETRIES,
            )
            _clients.clear()
            _clients[key] = client
        return client


@dataclass(frozen=True)
class Failure:
    """An API failure as the learner reads it."""

    kind: str  # rate_limit, overloaded, server, timeout, connection, auth, refused, spend
    message: str
    retry_after: int | None = None
    status: int | None = None


def _retry_after(error: anthropic.APIStatusError) -> int | None:
    headers = error.response.headers if error.response is not None else {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value:
            try:
                return max(1, round(float(value) * scale))
            except ValueError:
                return None
    return None


def describe_failure(error: Exception) -> Failure:
    """Plain words for what happened. Never includes the exception text: bodies and
    URLs are the server's, and we promise nothing from the request ends up on a page."""
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
            return Failure("overloaded", "Claude is overloaded right now (529).", status=529)
        if status == 401:
            return Failure(
                "auth",
                "The API key was rejected (401): the operator must set a valid "
                "ANTHROPIC_API_KEY and restart the server.",
                status=401,
            )
        if status >= 500:
            return Failure(
                "server", f"Claude's API had an internal error ({status}).", status=status
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
