"""The guided session page is built around submitting: "Submit & run" is in the first
screen at a laptop's and a phone's size, submits with a click and with Ctrl+Enter, the
conversation is not squeezed into a scroller of its own, and a learner sees no token
counts or message box the automatic reviewer would not read."""

import pytest
from django.core.cache import cache

from tests.browser.editor import replace_code
from tests.browser.test_automatic_reviewer import last_review, sign_up
from tests.tutor.test_host_program import add_host

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GUARDED = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&out)) { return; }
    out[id.x] = a[id.x] + b[id.x];
}
"""


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_submit_and_run_is_in_the_first_screen_and_submits(
    live_server, browser, settings, width: int, height: int
) -> None:
    cache.clear()
    settings.ANTHROPIC_API_KEY = ""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    sign_up(page, live_server.url, f"lin{width}")
    page.locator("form:has(input[value=first-compute-shader]) button").click()
    page.wait_for_selector("#editor-form .cm-content")

    button = page.get_by_role("button", name="Submit & run")
    assert button.count() == 1
    box = button.bounding_box()
    assert box is not None
    assert box["y"] >= 0 and box["y"] + box["height"] <= height, box
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, box
    # Nothing for a learner to send that nobody reads, no operator's numbers.
    assert page.locator("#composer").count() == 0
    assert "tokens" not in page.inner_text("main").lower()
    # The conversation is part of the page, not a scroller inside it.
    overflow = page.evaluate(
        "() => [...document.querySelectorAll('.tutor-chat, .turns, .tutor-side')]"
        ".filter(e => e.scrollHeight > e.clientHeight + 1"
        " && ['auto', 'scroll'].includes(getComputedStyle(e).overflowY)).length"
    )
    assert overflow == 0

    replace_code(page, "#kernel-field", GUARDED)
    replace_code(page, "#host-field", add_host("Math.ceil(n / 64)"))
    page.evaluate("window.scrollTo(0, 0)")
    button.click()
    first = last_review(page, "It passes")
    assert "Objective met: Size a dispatch" in first
    # The list is replaced by the stream's last event, which may come just after the review.
    page.wait_for_function("() => document.querySelectorAll('#objectives li.met').length >= 3")
    assert page.locator("#objectives li.met").count() == 3
    assert "last submitted: v1" in page.inner_text("#submit-bar")

    # Ctrl+Enter from outside the editors submits again: the unchanged version, v1.
    page.locator("h1").click()
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-turn] .role-learner')]"
        ".some(t => t.textContent.includes('again (unchanged)'))",
        timeout=60_000,
    )
    context.close()
