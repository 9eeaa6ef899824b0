"""A reader steps through a program's passes on its replay page, in Chromium: in place with
the page's script (buttons and arrow keys), by ?pass=N links without it; at a phone's and
a desktop's width, light and dark, with a clean console and no serious accessibility
issue in the section."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.base import make_session
from tests.browser.test_every_page import serious, wait_for_runs, watch
from tests.kernels.test_capture import TWO_PASSES, TWO_PASSES_WGSL
from tests.kernels.test_host_pages import program_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Where screenshots of the section go, for a person to look at (KERNELBIN_SHOTS=folder).
SHOTS = os.environ.get("KERNELBIN_SHOTS", "")


@pytest.fixture
def replay_url(fresh_replay_backend) -> str:
    session = make_session("steps", turns=2)
    program_version(session, TWO_PASSES_WGSL, TWO_PASSES)
    return "/s/steps/turns/2/replay/"


def heading(page) -> str:
    return page.inner_text(".passes .pass-name")


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_stepper_shows_each_pass_in_place(
    live_server, browser, replay_url, width, scheme
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    problems = watch(page)
    page.goto(live_server.url + replay_url)
    wait_for_runs(page)
    page.wait_for_selector(".passes")
    assert heading(page).startswith("Pass 2: bump")
    assert "a browser would show nothing" in page.inner_text(".passes")
    if SHOTS:
        page.locator(".passes").screenshot(path=str(Path(SHOTS) / f"pass2-{width}-{scheme}.png"))

    page.evaluate("window.stillThisPage = true")
    page.click(".pass-steps a[rel=prev]")
    page.wait_for_selector(".pass-name:has-text('double')")
    assert heading(page).startswith("Pass 1: double")
    assert page.url.endswith("?pass=1#passes")
    assert page.evaluate("document.activeElement.getAttribute('rel')") is None  # no prev now
    page.focus(".pass-steps a[rel=next]")
    page.keyboard.press("ArrowRight")
    page.wait_for_selector(".pass-name:has-text('bump')")
    assert page.evaluate("document.activeElement.textContent").strip() == "2"
    # Both steps were made in place: the page was not loaded again.
    assert page.evaluate("window.stillThisPage") is True
    problems += serious(page)
    assert not problems, problems
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"page-{width}-{scheme}.png"), full_page=True)
    context.close()


def test_without_javascript_the_links_show_each_pass(live_server, browser, replay_url) -> None:
    scripted = browser.new_page()
    scripted.goto(live_server.url + replay_url)
    wait_for_runs(scripted)  # the run is done and stored
    scripted.close()
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(live_server.url + replay_url)
    assert heading(page).startswith("Pass 2: bump")
    page.click(".pass-steps a[rel=prev]")
    page.wait_for_url("**?pass=1#passes")
    assert heading(page).startswith("Pass 1: double")
    assert page.locator(".passes svg").count() == 1
    context.close()
