"""Without an API key, a learner signs up, reads no operator advice, and gets a review of
a kernel indexed by local_invocation_id that names the builtin."""

import pytest
from django.core.cache import cache

from tests.browser.editor import replace_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LOCAL_ID = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let i = lid.x;
    if (i >= arrayLength(&out)) { return; }
    out[i] = a[i] + b[i];
}
"""
OPERATOR_TEXT = ("ANTHROPIC_API_KEY", "runserver", "API key", "is offline")


def test_the_automatic_reviewer_names_the_builtin(live_server, browser, settings) -> None:
    cache.clear()
    settings.ANTHROPIC_API_KEY = ""
    page = browser.new_page()
    page.goto(f"{live_server.url}/accounts/signup/")
    page.fill("#id_username", "grace")
    page.fill("#id_password1", "a long passphrase for tests")
    page.fill("#id_password2", "a long passphrase for tests")
    page.click("button.primary")
    page.wait_for_url(f"{live_server.url}/tutor/")
    for text in OPERATOR_TEXT:
        assert text not in page.content()
    assert "Guided by the automatic reviewer" in page.inner_text("main")

    page.locator(".lesson-card", has_text="first compute shader").locator("button").click()
    page.wait_for_selector("#editor-form .cm-content")
    for text in OPERATOR_TEXT:
        assert text not in page.content()

    replace_code(page, "#editor-form", LOCAL_ID)
    page.click("#editor-form button[type=submit]")
    page.wait_for_selector("#run-panel .status-pill.status-mismatch", timeout=60_000)
    review = page.locator("[data-turn] .role-tutor").last
    review.wait_for()
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-turn] .role-tutor')].some("
        "t => t.textContent.includes('never written'))"
    )
    text = page.locator("[data-turn] .role-tutor").last.inner_text()
    assert "local_invocation_id" in text
    assert "cells 64–999" in text
    assert "bounds check" not in text
    page.close()
