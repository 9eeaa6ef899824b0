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
