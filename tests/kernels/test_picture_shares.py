"""A downsampled status map tells the truth: each square stands for several values and
is filled in proportion to their states, so the picture's share of NaN is the data's.
The showcase's softmax v1 (turn 57) runs on a real device (llvmpipe here)."""

from __future__ import annotations

import re

from kernels import pictures
from kernels.engine.device import open_device
from kernels.engine.run import execute
from tests.kernels.test_showcase import FIXTURES, KERNELS, harness_of, sources_for

RECT = re.compile(
    r'<rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="([^"]+)"'
)


def areas(svg: str) -> dict[str, float]:
    """Each colour's area in the picture: a square's first rect is its background, the
    rects drawn over it (its shares) are taken off that background's colour."""
    shares: dict[str, float] = {}
    background = None
    for x, y, w, h, fill in RECT.findall(svg):
        area = float(w) * float(h)
        if float(w) == float(h) and (x, y) != (background or (None, None))[:2]:
            background = (x, y, fill)
        elif background is not None:
            shares[background[2]] = shares.get(background[2], 0.0) - area
        shares[fill] = shares.get(fill, 0.0) + area
    return shares


def test_the_softmax_maps_nan_squares_in_the_share_of_nan_values() -> None:
    device, env = open_device()
    kernel = KERNELS["softmax"]
    version = next(v for v in kernel["versions"] if v["turn"] == 57)
    outcome = execute(
        device, env, sources_for(kernel, version), harness_of(kernel, version), FIXTURES
    )
    [output] = outcome["outputs"]
    assert (output["count"], output["nonfinite"]) == (2048, 338)
    [figure] = pictures.figures(outcome)
    assert "each square stands for 4 values, filled in proportion" in figure["title"]

    drawn = areas(str(figure["svg"]))
    nan = drawn.get(pictures.NONFINITE, 0.0) / sum(drawn.values())
    assert abs(nan - 338 / 2048) < 0.02, nan
    # A square with one NaN of four says so on hover.
    assert re.search(
        r"<title>rows \d, columns \d+–\d+: 1 NaN or infinity, 3 right</title>", str(figure["svg"])
    )
