"""Rate limits on the expensive paths (fresh replays, tutor messages, sign-in) and the client's IP.

Counters live in the default cache. With the per-process local-memory cache of a
single box each process counts alone; set REDIS_URL so all web processes share them.

Windows slide: the count is the current fixed window's count plus the previous window's,
weighted by how much of it still lies within one period of now. A fixed window lets
twice the limit through around a boundary (the end of one window, then the start of the
next); the sliding estimate never lets more than the limit through in any period.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The client's address, trusting only the hops our own proxies append."""
    hops = settings.TRUSTED_PROXY_HOPS
    if hops:
        header: str = request.META.get("HTTP_X_FORWARDED_FOR", "")
        forwarded = [part.strip() for part in header.split(",")]
        forwarded = [part for part in forwarded if part]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    address: str = request.META.get("REMOTE_ADDR", "")
    return address


def _digest(text: str) -> str:
    # Keys hold no address or user name in the clear: cache dumps end up in places.
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def address_key(request: HttpRequest) -> str:
    return "ip:" + _digest(client_ip(request))


def client_key(request: HttpRequest) -> str:
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return address_key(request)


@dataclass(frozen=True)
class _Window:
    current: str
    previous: str
    # How far into the current window we are, 0 ≤ elapsed < 1.
    elapsed: float
    period: int


def _window(scope: str, key: str, period: int, now: float) -> _Window:
    number = int(now // period)
    return _Window(
        current=f"rate:{scope}:{key}:{number}",
        previous=f"rate:{scope}:{key}:{number - 1}",
        elapsed=(now - number * period) / period,
        period=period,
    )


def _wait(window: _Window, previous: int, current: int, limit: int) -> int:
    """Seconds until one more use fits, given the two windows' counts."""
    if limit < 1:  # switched off: nothing fits, ever
        return window.period
    room = limit - 1  # what the estimate may be for one more use to fit
    if current > room:
        # Only the next window can make room: its estimate is current × (1 - elapsed').
        into_next = 1 - max(room, 0) / current
        seconds = (1 - window.elapsed + into_next) * window.period
    else:
        # The previous window's weight falls as time passes within this one.
        still_needed = 1 - window.elapsed - (room - current) / previous if previous else 0.0
        seconds = max(0.0, still_needed) * window.period
    return max(1, math.ceil(seconds))


def _counts(window: _Window) -> tuple[int, int]:
    values = cache.get_many([window.previous, window.current])
    return int(values.get(window.previous) or 0), int(values.get(window.current) or 0)


def peek(scope: str, key: str, limit: int, period: int) -> int:
    """0 if one more use is allowed now, else the seconds to wait. Counts nothing."""
    window = _window(scope, key, period, time.time())
    previous, current = _counts(window)
    # The estimate is fractional; a hair of tolerance keeps float rounding from refusing.
    if previous * (1 - window.elapsed) + current + 1 > limit + 1e-9:
        return _wait(window, previous, current, limit)
    return 0


def record(scope: str, key: str, period: int) -> None:
    """Count one use (or one failure) without asking whether it was allowed."""
    window = _window(scope, key, period, time.time())
    # Both windows must outlive the next period for the weighted estimate.
    cache.add(window.current, 0, timeout=2 * period + 1)
    try:
        cache.incr(window.current)
    except ValueError:  # expired between add and incr
        cache.set(window.current, 1, timeout=2 * period + 1)


def hit(scope: str, key: str, limit: int, period: int) -> int:
    """Use one if allowed: 0, counted; else the seconds to wait, and nothing is counted.

    A refused request costs the limited resource nothing, so it is not counted: a client
    that keeps asking while refused gets in as soon as the window allows.
    """
    wait = peek(scope, key, limit, period)
    if not wait:
        record(scope, key, period)
    return wait


def signin_keys(request: HttpRequest, username: str) -> list[tuple[str, str, int]]:
    """(scope, key, limit) of the counters that failed sign-ins for this name add to.

    Per account *and* address: guessing alice's password from one place never locks
    alice out from another. Per address: one place cannot try many accounts.
    """
    address = address_key(request)
    account = _digest(username.strip().casefold())
    return [
        ("signin-account", f"{account}:{address}", settings.SIGNIN_FAILURES_PER_ACCOUNT),
        ("signin-address", address, settings.SIGNIN_FAILURES_PER_ADDRESS),
    ]


SIGNIN_PERIOD = 3600


def signin_wait(request: HttpRequest, username: str) -> int:
    """Seconds before this client may try this account again (0: now)."""
    return max(
        peek(scope, key, limit, SIGNIN_PERIOD)
        for scope, key, limit in signin_keys(request, username)
    )


def signin_failed(request: HttpRequest, username: str) -> None:
    for scope, key, _limit in signin_keys(request, username):
        record(scope, key, SIGNIN_PERIOD)
