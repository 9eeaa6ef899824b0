"""pages/embed_heights.py's outline layout, on pages of our own (tests/browser/
test_embed_heights.py checks it against Chromium on the showcase)."""

from django.test import SimpleTestCase

from pages.embed_heights import estimate

TURN = '<article class="turn"><header class="turn-head">#1 Tutor</header><div class="turn-body">{}</div></article>'


def page(*turns: str) -> str:
    return (
        "<html><body class='embed'><main class='turns'>"
        + "".join(TURN.format(t) for t in turns)
        + "</main></body></html>"
    )


class EmbedHeightTests(SimpleTestCase):
    def test_text_wraps_taller_in_a_narrower_frame(self) -> None:
        html = page("<p>" + "A paragraph of a tutor's answer. " * 40 + "</p>")
        self.assertGreater(estimate(html, 390), 2 * estimate(html, 1280))

    def test_a_code_block_is_as_tall_as_its_lines(self) -> None:
        short = estimate(page("<pre><code>a\nb</code></pre>"), 640)
        long = estimate(page("<pre><code>" + "x\n" * 42 + "</code></pre>"), 640)
        self.assertAlmostEqual(long - short, 40 * 0.9 * 15 * 1.45, delta=1)

    def test_a_closed_details_shows_only_its_summary(self) -> None:
        folded = page(
            "<details><summary>Tool output</summary><pre>" + "x\n" * 200 + "</pre></details>"
        )
        opened = folded.replace("<details>", "<details open>")
        self.assertLess(estimate(folded, 640), 250)
        self.assertGreater(estimate(opened, 640), 3000)

    def test_a_picture_is_scaled_to_fit(self) -> None:
        picture = page(
            '<figure class="replay-figure"><svg width="1200" height="600"></svg></figure>'
        )
        self.assertLess(estimate(picture, 390), estimate(picture, 1280) - 200)
