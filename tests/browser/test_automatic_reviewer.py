"""Without an API key, a learner signs up, reads no operator advice, and gets a review of
a kernel indexed by local_invocation_id that names the builtin; the host program editor
submits the learner's dispatch, and a Math.floor dispatch gets a review that names it."""

import pytest
from django.core.cache import cache

from tests.browser.editor import replace_code
from tests.tutor.test_host_program import add_host, add_kernel

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
OPERATOR_TEXT = (
    "ANTHROPIC_API_KEY",
    "runserver",
    "restart the server",
    "API key",
    "is offline",
)


def sign_up(page, url: str, name: str) -> None:
    page.goto(f"{url}/accounts/signup/")
    page.fill("#id_username", name)
    page.fill("#id_password1", "a long passphrase for tests")
    page.fill("#id_password2", "a long passphrase for tests")
    page.click("button.primary")
    page.wait_for_url(f"{url}/tutor/")


def last_review(page, containing: str) -> str:
    page.wait_for_function(
        "text => [...document.querySelectorAll('[data-turn] .role-tutor')].some("
        "t => t.textContent.includes(text))",
        arg=containing,
        timeout=60_000,
    )
    return page.locator("[data-turn] .role-tutor").last.inner_text()


def test_the_automatic_reviewer_names_the_builtin(live_server, browser, settings) -> None:
    cache.clear()
    settings.ANTHROPIC_API_KEY = ""
    page = browser.new_page()
    sign_up(page, live_server.url, "grace")
    for text in OPERATOR_TEXT:
        assert text not in page.content()
    assert "Guided by the automatic reviewer" in page.inner_text("main")

    page.locator(".lesson-card", has_text="first compute shader").locator("button").click()
    page.wait_for_selector("#editor-form .cm-content")
    for text in OPERATOR_TEXT:
        assert text not in page.content()

    replace_code(page, "#kernel-field", LOCAL_ID)
    replace_code(page, "#host-field", add_host("Math.ceil(n / 64)"))
    page.click("#submit-run")
    page.wait_for_selector("#run-panel .status-pill.status-mismatch", timeout=60_000)
    text = last_review(page, "never written")
    assert "local_invocation_id" in text
    assert "cells 64–999" in text
    assert "bounds check" not in text
    page.close()


def test_the_host_editor_submits_the_dispatch_and_math_floor_is_named(
    live_server, browser, settings
) -> None:
    cache.clear()
    settings.ANTHROPIC_API_KEY = ""
    page = browser.new_page()
    sign_up(page, live_server.url, "katherine")
    page.locator(".lesson-card", has_text="first compute shader").locator("button").click()
    page.wait_for_selector("#host-field .cm-content")
    assert "// TODO: dispatch the kernel." in page.input_value("#host-editor")

    replace_code(page, "#kernel-field", add_kernel())
    replace_code(page, "#host-field", add_host("Math.floor(n / 64)"))
    page.click("#submit-run")
    page.wait_for_selector("#run-panel .status-pill.status-mismatch", timeout=60_000)
    text = last_review(page, "Your host program dispatches")
    assert "15 workgroups" in text
    assert "pass.dispatchWorkgroups(Math.floor(n / 64));" in text
    assert "960 invocations" in text
    assert "Math.ceil" not in text
    # The run panel shows what the host did.
    assert "What the host did" in page.inner_text("#run-panel")

    replace_code(page, "#host-field", add_host("Math.ceil(n / 64)"))
    page.click("#submit-run")
    page.wait_for_selector("#run-panel .status-pill.status-passed", timeout=60_000)
    assert "v2" in page.inner_text("#run-panel .run-title")
    page.close()
