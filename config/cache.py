"""A Redis cache that treats an unreachable Redis as an empty cache.

Pages, embeds and rate limits only use the cache to go faster or to count; when Redis
is down (it is also the replay broker, so this is a fault we test), readers must still
get their pages. Errors are logged once a minute, not raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


class TolerantRedisCache(RedisCache):
    _last_warning = 0.0

    def _failed(self, operation: str, error: Exception) -> None:
        now = time.monotonic()
        if now - TolerantRedisCache._last_warning > 60:
            TolerantRedisCache._last_warning = now
            log.warning("cache %s failed, carrying on without it: %s", operation, error)

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except RedisError as error:
            self._failed("get", error)
            return default

    def get_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        try:
            return super().get_many(keys, version)
        except RedisError as error:
            self._failed("get_many", error)
            return {}

    # The timeout left out is the cache's default, as in Django's API (None is for ever).
    def set(
        self,
        key: Any,
        value: Any,
        timeout: float | None = DEFAULT_TIMEOUT,
        version: int | None = None,
    ) -> None:
        try:
            super().set(key, value, timeout, version)
        except RedisError as error:
            self._failed("set", error)

    def add(
        self,
        key: Any,
        value: Any,
        timeout: float | None = DEFAULT_TIMEOUT,
        version: int | None = None,
    ) -> bool:
        try:
            return super().add(key, value, timeout, version)
        except RedisError as error:
            self._failed("add", error)
            return False

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        try:
            return super().incr(key, delta, version)
        except RedisError as error:
            self._failed("incr", error)
            # The caller's "no such key" answer: a rate limit then counts from one.
            raise ValueError("cache unavailable") from error

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except RedisError as error:
            self._failed("delete", error)
            return False
