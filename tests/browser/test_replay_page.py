"""A reader replays the showcase's matmul bug and steps to the fix, in a real browser."""

import pytest
from django.core.management import call_command

from sessions.models import Turn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SLUG = "gpu-inference-from-scratch"


@pytest.fixture
def showcase(fresh_replay_backend):
    call_command("load_showcase", verbosity=0)


def reviewed(kernel: str, version: int) -> int:
    turns = Turn.objects.filter(
        session__slug=SLUG, kernel_version__kernel__name=kernel, kernel_version__number=version
    )
    return turns.order_by("number").values_list("number", flat=True).first()


def test_the_bug_shows_then_the_next_version_fixes_it(live_server, browser, showcase) -> None:
    page = browser.new_page()
    # Each load of the page as it came from the server (it may reload before a test
    # could read the first one).
    loads = []

    def keep(route) -> None:
        response = route.fetch()
        loads.append(response.text())
        route.fulfill(response=response)

    bug = f"{live_server.url}/s/{SLUG}/turns/{reviewed('matmul', 3)}/replay/"
    page.route(bug, keep)
    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    page.goto(bug)
    page.wait_for_selector(".outcome.status-mismatch", timeout=60_000)
    # Nothing had run it: the page said it was running (or, with a queue of workers,
    # waiting for one), then, when the run was done, fetched itself again and showed the
    # outcome in place: no second navigation.
    assert 'class="running"' in loads[0]
    assert len(loads) >= 2
    assert navigations == [bug]
    assert page.locator(".running").count() == 0
    assert "cells wrong" in page.inner_text(".outcome-message")
    assert page.locator(".outcome svg").count() >= 1  # expected, got and error heatmaps
    # The lesson's story is told here, and the run bears it out.
    assert page.inner_text(".intent strong").startswith("The bug this lesson is about")
    assert page.inner_text(".intent-check") == "This run shows it."

    page.click(".version-nav a:has-text('v4')")
    page.wait_for_url(f"**/turns/{reviewed('matmul', 4)}/replay/")
    page.wait_for_selector(".outcome.status-passed", timeout=60_000)
    assert "Changes since v3" in page.inner_text("article.replay")
    assert page.locator(".highlight .gi").count() >= 1  # the fixed lines, in the diff
    page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_fixed_matmuls_roofline_fits_a_phone_in_either_theme(
    live_server, browser, showcase, scheme
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme=scheme)
    page = context.new_page()
    page.goto(f"{live_server.url}/s/{SLUG}/turns/{reviewed('matmul', 4)}/replay/")
    page.wait_for_selector("article.replay[data-state=done] svg.roofline", timeout=60_000)
    drawn = page.evaluate(
        """() => {
        const svg = document.querySelector('svg.roofline');
        const box = svg.getBoundingClientRect();
        const style = (selector) => getComputedStyle(svg.querySelector(selector));
        return {left: box.left, right: box.right, width: box.width,
                text: style('text').fill, roof: style('.roof').stroke,
                point: style('.point').fill, page: getComputedStyle(document.body).backgroundColor,
                sideways: document.documentElement.scrollWidth - window.innerWidth};
    }"""
    )
    # Shrunk to the phone's width with its page, which does not scroll sideways.
    assert drawn["sideways"] <= 0, drawn
    assert drawn["left"] >= 0 and drawn["right"] <= 390 and drawn["width"] < 420, drawn
    # The roof and the labels are the page's text colour: dark on light, light on dark.
    assert drawn["roof"] == drawn["text"], drawn
    light = brightness(drawn["text"]) > 128
    assert light == (scheme == "dark"), drawn
    assert abs(brightness(drawn["page"]) - brightness(drawn["text"])) > 100, drawn
    assert drawn["point"] not in (drawn["text"], drawn["page"]), drawn
    context.close()


def brightness(rgb: str) -> float:
    red, green, blue = (int(n) for n in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return 0.299 * red + 0.587 * green + 0.114 * blue
