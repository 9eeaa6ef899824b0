"""A plain iframe fits without a script: oEmbed's iframe for a range is as tall as the
range's content at the width it names (pages/embed_heights.py lays the page out),
checked against Chromium's layout; and every embed takes a theme."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request

import pytest
from django.core.management import call_command

from kernels import replay
from sessions.programs import KernelVersion

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOWCASE = "gpu-inference-from-scratch"
HEIGHT = r'height="(\d+)"'


@pytest.fixture
def showcase(fresh_replay_backend):
    call_command("load_showcase", verbosity=0)
    # The turns' kernels have stored runs, so the embed shows their pictures.
    for version in KernelVersion.objects.filter(
        kernel__session__slug=SHOWCASE, turn__number__range=(50, 62)
    ):
        assert replay.run_now(version).outcome is not None


def oembed(base: str, url: str, **params) -> dict:
    query = urllib.parse.urlencode({"url": url, "format": "json", **params})
    with urllib.request.urlopen(f"{base}/oembed/?{query}") as answer:  # noqa: S310 (http)
        return json.load(answer)


def rendered_height(browser, src: str, width: int) -> int:
    page = browser.new_page(viewport={"width": width, "height": 700})
    page.goto(src)
    height = page.evaluate("Math.ceil(document.documentElement.getBoundingClientRect().height)")
    page.close()
    return height


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("path", ["/?from=57&to=62", "/turns/57/replay/"])
def test_oembeds_plain_iframe_is_as_tall_as_its_content(
    live_server, browser, showcase, width, path
):
    link = f"{live_server.url}/s/{SHOWCASE}{path}"
    answer = oembed(live_server.url, link, maxwidth=width)
    iframe = answer["html"].split("</iframe>")[0]
    assert f'width="{width}"' in iframe
    height = int(re.search(HEIGHT, iframe)[1])
    assert answer["height"] == height
    src = re.search(r'src="([^"]+)"', iframe)[1].replace("&amp;", "&")
    content = rendered_height(browser, src, width)
    assert abs(height - content) / content < 0.15, (height, content)


def test_the_session_pages_panel_builds_the_iframe_for_the_columns_width(
    live_server, browser, showcase
):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/s/{SHOWCASE}/?turn=57")
    page.click("#embed-panel > summary")
    page.fill(".embed-form input[name=from]", "57")
    page.fill(".embed-form input[name=to]", "62")
    page.fill(".embed-form input[name=width]", "390")
    # The panel asks the server for the range's height at that width (no eval: CSP).
    for _ in range(100):
        if 'width="390"' in page.input_value("#embed-iframe"):
            break
        page.wait_for_timeout(100)
    code = page.input_value("#embed-iframe")
    height = int(re.search(HEIGHT, code)[1])
    src = re.search(r'src="([^"]+)"', code)[1].replace("&amp;", "&")
    content = rendered_height(browser, src, 390)
    assert abs(height - content) / content < 0.15, (height, content)
    page.close()


@pytest.mark.parametrize(
    "path",
    [
        "/s/{slug}/embed/?from=57&to=58&theme={theme}",
        "/s/{slug}/turns/57/replay/embed/?theme={theme}",
    ],
)
def test_every_embed_is_light_or_dark_as_asked(live_server, browser, showcase, path):
    colours = {}
    for theme in ("light", "dark"):
        page = browser.new_page()
        page.goto(live_server.url + path.format(slug=SHOWCASE, theme=theme))
        colours[theme] = page.evaluate("getComputedStyle(document.body).backgroundColor")
        page.close()
    dark = [int(c) for c in colours["dark"][4:-1].split(",")[:3]]
    light = [int(c) for c in colours["light"][4:-1].split(",")[:3]]
    assert sum(dark) < 150 < sum(light), colours


def test_a_replay_pages_embed_code_takes_the_theme_picked(live_server, browser, showcase):
    page = browser.new_page()
    page.goto(f"{live_server.url}/s/{SHOWCASE}/turns/57/replay/")
    page.click(".replay-embed > summary")
    page.select_option(".replay-embed select.embed-theme", "dark")
    code = page.input_value("#replay-embed-code")
    src = re.search(r'href="([^"]+)"', code)[1]
    assert src.endswith("/turns/57/replay/embed/?theme=dark")
    page.goto(src)
    colour = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert sum(int(c) for c in colour[4:-1].split(",")[:3]) < 150, colour
    page.close()


def test_the_panels_width_takes_any_whole_number_of_pixels(live_server, browser) -> None:
    from tests.base import make_session

    make_session("widths", turns=3)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/s/widths/")
    page.click("#embed-panel > summary")
    width = page.locator(".embed-form input[name=width]")
    width.fill("405")
    for _ in range(100):
        if 'width="405"' in page.input_value("#embed-iframe"):
            break
        page.wait_for_timeout(100)
    assert 'width="405"' in page.input_value("#embed-iframe")
    assert width.evaluate("input => input.validity.valid")
    # The arrow keys move it by one pixel, not to the next multiple of ten.
    width.press("ArrowUp")
    assert width.input_value() == "406"
    page.close()
