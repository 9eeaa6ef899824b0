"""What a shared link shows: every session, turn, replay and fork page names a PNG card
(og:image, Twitter's large card) drawn on the server from the stored outcome, and its
own URL (og:url: a turn's link is the turn's, not its page's)."""

from __future__ import annotations

import io
import re

from PIL import Image

from kernels import pictures
from kernels.models import Fork
from pages import cards
from tests.base import BaseTestCase, add_kernel, make_session, store_run


def meta(html: str, name: str) -> str:
    [value] = re.findall(rf'<meta (?:property|name)="{re.escape(name)}" content="([^"]*)"', html)
    return value


class ShareCardTests(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=30)
        self.version = add_kernel(self.session, turn=24)

    def card(self, url: str) -> Image.Image:
        r = self.client.get(url.removeprefix("http://testserver"))
        self.assertEqual((r.status_code, r["Content-Type"]), (200, "image/png"))
        image = Image.open(io.BytesIO(r.content))
        self.assertEqual(image.size, (1200, 630))
        return image.convert("RGB")

    def test_a_session_page_and_a_turns_link_name_their_own_url_and_card(self) -> None:
        page = self.client.get("/s/demo/").content.decode()
        self.assertEqual(meta(page, "og:url"), "http://testserver/s/demo/")
        self.assertEqual(meta(page, "og:image"), "http://testserver/s/demo/card.png")
        self.assertEqual(meta(page, "twitter:card"), "summary_large_image")
        self.card(meta(page, "og:image"))

        # A link to turn 24 is its own, and shows its kernel.
        page = self.client.get("/s/demo/", {"turn": 24}).content.decode()
        self.assertEqual(meta(page, "og:url"), "http://testserver/s/demo/?turn=24")
        self.assertEqual(meta(page, "og:image"), "http://testserver/s/demo/turns/24/card.png")
        self.card(meta(page, "og:image"))
        # A turn without a kernel shows its session's card.
        page = self.client.get("/s/demo/", {"turn": 3}).content.decode()
        self.card(meta(page, "og:image"))

    def test_a_replay_page_names_its_card_which_shows_the_stored_run(self) -> None:
        store_run(self.version, "mismatch", "3 of 4 cells wrong")
        page = self.client.get("/s/demo/turns/24/replay/").content.decode()
        self.assertEqual(meta(page, "og:url"), "http://testserver/s/demo/turns/24/replay/")
        self.assertEqual(meta(page, "twitter:image"), meta(page, "og:image"))
        image = self.card(meta(page, "og:image"))
        # The status pill is drawn in the failing colours.
        self.assertEqual(image.getpixel((cards.MARGIN + 4, 185)), (0xFD, 0xEA, 0xEA))

    def test_a_cards_status_map_fills_blocks_in_proportion(self) -> None:
        # 8 x 4 blocks of 4 values: one NaN in every block, a quarter of the values.
        grid = {"rows": 8, "cols": 4, "block": [1, 4], "cells": "n" * 32, "counts": {"n": [1] * 32}}
        output = {"name": "y", "shape": [8, 16], "count": 128, "bad": 32, "grid": grid}
        store_run(self.version, "nonfinite", outputs=[output])
        image = self.card("/s/demo/turns/24/card.png")
        left, top, right, bottom = cards.BOX
        colours = [image.getpixel((x, y)) for x in range(left, right) for y in range(top, bottom)]
        purple = colours.count(Image.new("RGB", (1, 1), pictures.NONFINITE).getpixel((0, 0)))
        green = colours.count(Image.new("RGB", (1, 1), pictures.STATUS["."][0]).getpixel((0, 0)))
        self.assertAlmostEqual(purple / (purple + green), 0.25, delta=0.03)

    def test_a_wide_map_is_folded_to_fill_the_picture_area(self) -> None:
        # The softmax's 8 x 256 output as 8 x 64 squares of 4 values, one NaN in each:
        # in one band its squares would be 7.9 px, a strip along the top of the area.
        grid = {"rows": 8, "cols": 64, "block": [1, 4], "cells": "n" * 512}
        grid["counts"] = {"n": [1] * 512}
        output = {"name": "y", "shape": [8, 256], "count": 2048, "bad": 512, "grid": grid}
        store_run(self.version, "nonfinite", outputs=[output])
        image = self.card("/s/demo/turns/24/card.png")
        left, top, right, bottom = cards.BOX
        white = (255, 255, 255)
        drawn = [y for y in range(top, bottom) if image.getpixel(((left + right) // 2, y)) != white]
        self.assertGreater(drawn[-1] - drawn[0], 0.6 * (bottom - top))
        across = [x for x in range(left, right) if image.getpixel((x, drawn[0] + 2)) != white]
        self.assertGreater(across[-1] - across[0], 0.95 * (right - left))
        # Folded, each square is still filled in proportion.
        colours = [image.getpixel((x, y)) for x in range(left, right) for y in range(top, bottom)]
        purple = colours.count(Image.new("RGB", (1, 1), pictures.NONFINITE).getpixel((0, 0)))
        green = colours.count(Image.new("RGB", (1, 1), pictures.STATUS["."][0]).getpixel((0, 0)))
        self.assertAlmostEqual(purple / (purple + green), 0.25, delta=0.03)

    def test_a_fork_has_a_card_and_a_private_session_none_for_others(self) -> None:
        fork = Fork.objects.create(id="abcdefghijkl", version=self.version, source="// edit")
        self.card(f"/f/{fork.id}/card.png")
        private = make_session("secret", turns=2, visibility="private", owner=self.alice)
        add_kernel(private, turn=2)
        for url in ("/s/secret/card.png", "/s/secret/turns/2/card.png"):
            self.assertEqual(self.client.get(url).status_code, 404)
        self.client.force_login(self.alice)
        self.card("/s/secret/turns/2/card.png")

    def test_every_page_has_a_favicon(self) -> None:
        self.assertIn('rel="icon"', self.client.get("/").content.decode())
        r = self.client.get("/favicon.ico", follow=True)
        self.assertEqual(r.status_code, 200)
