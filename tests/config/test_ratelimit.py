from django.test import RequestFactory, SimpleTestCase, override_settings

from config.ratelimit import client_ip, hit


class ClientIpTestCase(SimpleTestCase):
    def request(self, forwarded: str = ""):
        headers = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
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
        self.assertLessEqual(wait, 60)
        self.assertEqual(hit("test", "k2", 2, 60), 0)


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
