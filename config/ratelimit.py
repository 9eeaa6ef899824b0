"""Rate limits on the expensive paths (fresh replays, tutor messages) and the client's IP.

Counters live in the default cache. With the per-process local-memory cache of a
single box each process counts alone; set REDIS_URL so all web processes share them.
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The client's address, trusting only the hops our own proxies append."""
    hops = settings.TRUSTED_PROXY_HOPS
    if hops:
        forwarded = [
            part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        ]
        forwarded = [part for part in forwarded if part]
        if len(forwarded) >= hops:
            return forwarded[-hops]
    return request.META.get("REMOTE_ADDR", "")


def client_key(request: HttpRequest) -> str:
    if request.user.is_authenticated:
        return f"user:{request.user.pk}"
    return "ip:" + hashlib.sha256(client_ip(request).encode()).hexdigest()[:24]


def hit(scope: str, key: str, limit: int, period: int) -> int:
    """Count one use. Returns 0 if allowed, else the seconds until the window resets."""
    window = int(time.time() // period)
    counter = f"rate:{scope}:{key}:{window}"
    cache.add(counter, 0, timeout=period + 1)
    try:
        used = cache.incr(counter)
    except ValueError:  # expired between add and incr
        cache.set(counter, 1, timeout=period + 1)
        used = 1
    if used > limit:
        return max(1, int((window + 1) * period - time.time()))
    return 0
