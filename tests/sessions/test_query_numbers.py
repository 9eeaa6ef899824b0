"""Numbers in query strings and paths, whatever their length or script: a clear 400 or
404, or ignored, never a 500."""

from __future__ import annotations

from django.test import TestCase

from tests.base import add_kernel, make_session

HUGE = "9" * 4301  # past int()'s 4,300 digits
WIDE = "9" * 20  # past 64 bits


class QueryNumberTests(TestCase):
    def setUp(self) -> None:
        self.session = make_session("demo", turns=4)
        add_kernel(self.session, turn=2)

    def test_a_turn_that_is_no_turn_number_is_a_404_that_says_so(self) -> None:
        for raw in (HUGE, WIDE, "²", "٣", "-1", "0x2", " 2"):
            with self.subTest(raw=raw[:8]):
                r = self.client.get("/s/demo/", {"turn": raw})
                self.assertContains(r, "This session has no turn", status_code=404)
        self.assertEqual(self.client.get("/s/demo/", {"turn": "3"}).status_code, 200)

    def test_a_page_number_of_any_length_falls_back_to_a_page(self) -> None:
        for raw in (HUGE, WIDE, "1e400", "nan", "²"):
            with self.subTest(raw=raw[:8]):
                self.assertEqual(self.client.get("/s/demo/", {"page": raw}).status_code, 200)
                self.assertEqual(self.client.get("/", {"page": raw}).status_code, 200)

    def test_turn_numbers_in_paths_past_64_bits_are_not_found(self) -> None:
        for path in (f"/s/demo/turns/{WIDE}/replay/", f"/s/demo/turns/{WIDE}/replay.json"):
            with self.subTest(path=path):
                self.assertEqual(self.client.get(path).status_code, 404)

    def test_replay_json_refuses_a_wait_that_is_no_number_of_seconds(self) -> None:
        for raw in ("nan", "-nan", "inf", "abc", HUGE + ".5e99999"):
            with self.subTest(raw=raw[:8]):
                r = self.client.get("/s/demo/turns/2/replay.json", {"wait": raw, "run": HUGE})
                self.assertEqual(r.status_code, 400)
                self.assertEqual(r.json()["error"], "wait must be a number of seconds (0 to 10).")

    def test_embed_bounds_and_oembed_sizes_of_any_length_are_a_400(self) -> None:
        r = self.client.get("/s/demo/embed/", {"from": HUGE, "to": "2"})
        self.assertContains(r, "must be a whole turn number", status_code=400)
        url = "http://testserver/s/demo/"
        r = self.client.get("/oembed/", {"url": url, "maxwidth": HUGE})
        self.assertEqual(r.status_code, 400)
        self.assertIn("positive whole number", r.json()["error"])
