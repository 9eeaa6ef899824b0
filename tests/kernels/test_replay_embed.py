"""The embed of a replay: frameable like the session embeds, with the outcome's pictures."""

import re

from tests.base import BaseTestCase, add_kernel, make_session, store_run

OUTPUT = {
    "name": "out",
    "dtype": "f32",
    "shape": [2, 3],
    "count": 6,
    "bad": 1,
    "unwritten": 0,
    "nonfinite": 0,
    "first_bad": [{"index": [1, 2], "expected": 1.0, "got": 5.0}],
    "grid": {"rows": 2, "cols": 3, "cells": ".....x"},
    "expected": [0.0, 1.0, 2.0, 3.0, 4.0, 1.0],
    "got": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
}


class ReplayEmbedTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=4, title="Adding arrays")
        self.version = add_kernel(self.session, turn=2)
        store_run(self.version, "mismatch", "1 of 6 cells wrong.", outputs=[OUTPUT])

    def test_it_shows_the_outcome_with_its_pictures(self) -> None:
        r = self.client.get("/s/demo/turns/2/replay/embed/")
        self.assertEqual(r.status_code, 200)
        self.assertContains(r, "1 of 6 cells wrong.")
        self.assertContains(r, "<svg")
        self.assertContains(r, 'href="http://testserver/s/demo/turns/2/replay/"')
        self.assertContains(r, 'data-theme="light"')

    def test_it_is_frameable_self_contained_and_discoverable(self) -> None:
        r = self.client.get("/s/demo/turns/2/replay/embed/", {"theme": "dark"})
        self.assertNotIn("X-Frame-Options", r)
        self.assertIn("frame-ancestors *", r["Content-Security-Policy"])
        body = r.content.decode()
        self.assertNotIn('rel="stylesheet"', body)
        self.assertNotIn("<script src", body)
        href = re.search(r'type="application/json\+oembed" href="([^"]+)"', body)[1]
        self.assertIn("replay%2Fembed%2F%3Ftheme%3Ddark", href)

    def test_turns_without_a_kernel_and_private_sessions_are_404(self) -> None:
        self.assertEqual(self.client.get("/s/demo/turns/3/replay/embed/").status_code, 404)
        mine = make_session("mine", visibility="private", owner=self.alice)
        add_kernel(mine, turn=1)
        self.client.login(username="alice", password="password")
        r = self.client.get("/s/mine/turns/1/replay/embed/")
        self.assertContains(r, "no public kernel replay", status_code=404)

    def test_a_bad_theme_is_400(self) -> None:
        r = self.client.get("/s/demo/turns/2/replay/embed/", {"theme": "neon"})
        self.assertContains(r, "theme must be one of", status_code=400)


class SessionEmbedPictureTestCase(BaseTestCase):
    def test_each_kernel_in_an_embed_shows_its_picture_once(self) -> None:
        session = make_session("demo", turns=4)
        version = add_kernel(session, turn=2)
        turn = session.turns.get(number=3)
        turn.kernel_version = version
        turn.save()
        store_run(version, "mismatch", "1 of 6 cells wrong.", outputs=[OUTPUT])
        r = self.client.get("/s/demo/embed/", {"from": 1, "to": 4})
        self.assertContains(r, '<figure class="replay-figure compact">', count=1)
        self.assertContains(r, '<span class="badge-status">wrong results</span>', count=2)
