"""A Redis cache that treats an unreachable Redis as an empty cache.

Pages, embeds and rate limits only use the cache to go faster or to count; when Redis
is down (it is also the replay broker, so this is a fault we test), readers must still
get their pages. Errors are logged once a minute, not raised.
"""

from __future__ import annotations

import logging
import time

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

    def get(self, key, default=None, version=None):
        try:
            return super().get(key, default, version)
        except RedisError as error:
            self._failed("get", error)
            return default

    def get_many(self, keys, version=None):
        try:
            return super().get_many(keys, version)
        except RedisError as error:
            self._failed("get_many", error)
            return {}

    def set(self, key, value, timeout=None, version=None):
        try:
            super().set(key, value, timeout, version)
        except RedisError as error:
            self._failed("set", error)

    def add(self, key, value, timeout=None, version=None):
        try:
            return super().add(key, value, timeout, version)
        except RedisError as error:
            self._failed("add", error)
            return False

    def incr(self, key, delta=1, version=None):
        try:
            return super().incr(key, delta, version)
        except RedisError as error:
            self._failed("incr", error)
            # The caller's "no such key" answer: a rate limit then counts from one.
            raise ValueError("cache unavailable") from error

    def delete(self, key, version=None):
        try:
            return super().delete(key, version)
        except RedisError as error:
            self._failed("delete", error)
            return False
