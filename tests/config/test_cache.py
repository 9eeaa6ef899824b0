"""The Redis cache wrapper keeps Django's cache API: a timeout left out is the default."""

from __future__ import annotations

from typing import Any

from config.cache import TolerantRedisCache


class RecordingClient:
    """Stands in for the Redis client: records the timeouts it is given."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def set(self, key: str, value: Any, timeout: float | None) -> None:
        self.timeouts.append(timeout)

    def add(self, key: str, value: Any, timeout: float | None) -> bool:
        self.timeouts.append(timeout)
        return True


def test_a_value_stored_without_a_timeout_expires_after_the_default() -> None:
    cache = TolerantRedisCache("redis://127.0.0.1:1/0", {"TIMEOUT": 300})
    client = RecordingClient()
    cache.__dict__["_cache"] = client  # the cached client property, as Redis would give
    cache.set("a", 1)
    cache.add("b", 1)
    cache.set("c", 1, timeout=None)
    assert client.timeouts == [300, 300, None]
