from typing import Any
from unittest import mock

from django.core.cache import cache
from django.test import RequestFactory, SimpleTestCase, override_settings

from config.ratelimit import client_ip, hit


class ClientIpTestCase(SimpleTestCase):
    def request(self, forwarded: str = ""):
        headers: dict[str, Any] = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
        return RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", **headers)

    def test_without_proxies_it_is_the_peer(self) -> None:
        self.assertEqual(client_ip(self.request("6.6.6.6")), "10.0.0.1")

    @override_settings(TRUSTED_PROXY_HOPS=1)
    def test_behind_one_proxy_it_is_the_hop_that_proxy_appended(self) -> None:
        # The client can write anything before it; only the last hop is the proxy's.
        self.assertEqual(client_ip(self.request("6.6.6.6, 203.0.113.9")), "203.0.113.9")

    @override_settings(TRUSTED_PROXY_HOPS=2)
    def test_too_few_hops_fall_back_to_the_peer(self) -> None:
        self.assertEqual(client_ip(self.request("203.0.113.9")), "10.0.0.1")


class HitTestCase(SimpleTestCase):
    def test_it_counts_within_a_window(self) -> None:
        self.assertEqual(hit("test", "k1", 2, 60), 0)
        self.assertEqual(hit("test", "k1", 2, 60), 0)
        wait = hit("test", "k1", 2, 60)
        self.assertGreaterEqual(wait, 1)
        # The window slides: the earlier uses still weigh in the next fixed window.
        self.assertLessEqual(wait, 2 * 60)
        self.assertEqual(hit("test", "k2", 2, 60), 0)


class SlidingWindowTestCase(SimpleTestCase):
    """The window slides: no period lets more than the limit through."""

    def setUp(self) -> None:
        cache.clear()
        self.now = 1_000_000 * 60.0  # the start of a fixed window
        patcher = mock.patch("time.time", lambda: self.now)  # what ratelimit reads
        patcher.start()
        self.addCleanup(patcher.stop)

    def uses(self, count: int) -> int:
        return sum(hit("slide", "k", 10, 60) == 0 for _ in range(count))

    def test_a_burst_at_a_boundary_does_not_double_the_limit(self) -> None:
        self.now += 59  # the end of one fixed window
        self.assertEqual(self.uses(10), 10)
        self.now += 2  # the start of the next: a fixed window would allow 10 more
        self.assertEqual(self.uses(10), 0)

    def test_the_previous_window_weighs_less_as_time_passes(self) -> None:
        self.assertEqual(self.uses(10), 10)
        self.now += 60 + 30  # halfway through the next window: 10 × 0.5 still count
        self.assertEqual(self.uses(10), 5)

    def test_the_wait_it_names_is_when_a_use_fits_again(self) -> None:
        self.assertEqual(self.uses(10), 10)
        wait = hit("slide", "k", 10, 60)
        self.assertEqual(wait, 66)  # 60 to the next window, then a tenth of it
        self.now += wait - 1
        self.assertGreater(hit("slide", "k", 10, 60), 0)
        self.now += 1
        self.assertEqual(hit("slide", "k", 10, 60), 0)

    def test_refused_requests_are_not_counted(self) -> None:
        self.assertEqual(self.uses(10), 10)
        self.uses(100)  # all refused
        self.now += 66
        self.assertEqual(hit("slide", "k", 10, 60), 0)


@override_settings(
    CACHES={
        "default": {
            "BACKEND": "config.cache.TolerantRedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
)
class RedisDownTestCase(SimpleTestCase):
    def test_an_unreachable_cache_is_a_miss_and_limits_fail_open(self) -> None:
        from django.core.cache import cache

        from config.cache import TolerantRedisCache

        TolerantRedisCache._last_warning = 0.0  # warnings are once a minute

        with self.assertLogs("config.cache", "WARNING"):
            self.assertEqual(cache.get("anything", "default"), "default")
        cache.set("anything", 1)
        self.assertFalse(cache.add("anything", 1))
        self.assertEqual(hit("test", "down", 1, 60), 0)
