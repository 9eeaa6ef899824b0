"""A learner signs up, starts a lesson, talks to the tutor and submits kernels, in a real
browser: the reply streams into the page, each submission runs on the server."""

import pytest
from django.core.cache import cache

from tests.browser.editor import replace_code
from tests.tutor.helpers import FAKE_KEY, messages_api, vector_kernel
from tests.tutor.test_host_program import add_host
from tutor import llm
from tutor.models import GuidedSession

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = (
    "Good start. Before you add anything: the host dispatches 1,024 invocations for "
    "1,000 elements. What happens in the last 24?"
)
# A learner's slip: b counted twice. The bounds check keeps it from being refused: 1,024
# invocations for 1,000 cells with nothing stopping the last 24 is not run on llvmpipe.
WRONG_SUM = vector_kernel(
    body="if (id.x >= arrayLength(&out)) { return; }\n    out[id.x] = a[id.x] + b[id.x] * 2.0;"
)


@pytest.fixture
def tutor_api(settings):
    cache.clear()  # rate-limit counters live in the cache
    llm._clients.clear()  # clients are kept per base URL
    with messages_api(REPLY, pause=0.1) as (base_url, received):
        settings.ANTHROPIC_API_KEY = FAKE_KEY
        settings.TUTOR_BASE_URL = base_url
        yield received
    llm._clients.clear()


def test_a_learner_is_taught_and_every_submission_runs(live_server, browser, tutor_api) -> None:
    page = browser.new_page()
    page.goto(f"{live_server.url}/accounts/signup/")
    page.fill("#id_username", "ada")
    page.fill("#id_password1", "a long passphrase for tests")
    page.fill("#id_password2", "a long passphrase for tests")
    page.click("button.primary")
    page.wait_for_url(f"{live_server.url}/tutor/")

    page.locator(".lesson-card", has_text="first compute shader").locator("button").click()
    # The kernel editor is the code editor, over the form's textarea.
    page.wait_for_selector("#editor-form .cm-content")
    slug = GuidedSession.objects.get().session.slug
    assert page.url == f"{live_server.url}/tutor/{slug}/"

    # The reply arrives in pieces: part of it shows before the finished turn replaces it.
    page.fill("#message", "Where do I start?")
    page.click("#composer button[type=submit]")
    page.wait_for_function(
        "() => { const t = document.querySelector('#live .live-text').textContent;"
        " return !document.getElementById('live').hidden && t.length > 0"
        f" && t.length < {len(REPLY)}; }}"
    )
    page.wait_for_selector(f"[data-turn] .role-tutor:has-text('{REPLY[-30:]}')")
    assert page.locator("#live").is_hidden()
    assert page.input_value("#message") == ""
    learner = page.locator("[data-turn] .role-learner").last
    assert "Where do I start?" in learner.inner_text()

    # A kernel that computes the wrong thing: it runs, the outcome shows, the tutor reviews.
    replace_code(page, "#kernel-field", WRONG_SUM)
    # The lesson's host program, its dispatch written: the submission runs as a program.
    replace_code(page, "#host-field", add_host("Math.ceil(n / 64)"))
    page.click("#submit-run")
    page.wait_for_selector("#run-panel .status-pill.status-mismatch", timeout=60_000)
    assert "v1" in page.inner_text("#run-panel .run-title")
    # The submission's badge in the conversation follows the run without a reload.
    badge = page.locator("[data-turn] .kernel-badge").last
    assert badge.inner_text().endswith("wrong results"), badge.inner_text()
    assert "status-mismatch" in (badge.get_attribute("class") or "")
    # The welcome, the reply to the message, and now the review of the submission.
    page.wait_for_function(
        "n => document.querySelectorAll('[data-turn] .role-tutor').length >= n", arg=3
    )
    assert len(tutor_api) == 2
    # The tutor saw the kernel and its outcome in the request the app sent.
    sent = str(tutor_api[-1]["body"]["messages"])
    assert "b[id.x] * 2.0" in sent
    assert "dispatchWorkgroups(16, 1, 1)" in sent  # the host program's trace
    assert "mismatch" in sent or "wrong" in sent

    # Reloading shows the same conversation from the database; the key is nowhere.
    page.reload()
    assert page.locator("[data-turn]").count() >= 4
    assert FAKE_KEY not in page.content()
    page.close()
