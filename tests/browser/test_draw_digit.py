"""A reader draws a digit on the canvas and the server's kernels classify it."""

import pytest
from django.core.management import call_command

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_drawn_seven_is_read_as_seven(live_server, browser) -> None:
    call_command("load_showcase", verbosity=0)
    page = browser.new_page()
    page.goto(f"{live_server.url}/demo/digits/")
    box = page.locator("canvas").bounding_box()
    page.mouse.move(box["x"] + 70, box["y"] + 60)
    page.mouse.down()
    page.mouse.move(box["x"] + 210, box["y"] + 60, steps=10)
    page.mouse.move(box["x"] + 120, box["y"] + 230, steps=15)
    page.mouse.up()
    page.click("button.primary")
    page.wait_for_selector(".digit-answer", timeout=30_000)
    assert page.inner_text(".digit-answer strong") == "7"
    assert page.locator(".digit-result svg rect").count() >= 10  # one bar per digit at least
    page.click("[data-clear]")
    page.click("button.primary")
    page.wait_for_selector(".digit-output .problem")
    assert "empty" in page.inner_text(".digit-output .problem")
    page.close()
