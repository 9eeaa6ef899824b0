"""A reader keeps a cut buffer whole from its replay page, in Chromium, at a phone's and a
desktop's width: the form beside the buffer's note runs the version again, and the page
comes back with the buffer drawn whole and its values to download; a clean console, no
serious accessibility issue, and no sideways scrolling."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.base import make_session
from tests.browser.test_every_page import serious, wait_for_runs, watch
from tests.kernels.test_host_pages import program_version
from tests.kernels.test_whole_buffers import FILL, FILL_WGSL

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Where screenshots of the section go, for a person to look at (KERNELBIN_SHOTS=folder).
SHOTS = os.environ.get("KERNELBIN_SHOTS", "")


@pytest.mark.parametrize("width", [390, 1280])
def test_a_reader_keeps_a_cut_buffer_whole(
    live_server, browser, fresh_replay_backend, width
) -> None:
    session = make_session(f"whole-{width}", turns=2)
    program_version(session, FILL_WGSL, FILL)
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    problems = watch(page)
    page.goto(f"{live_server.url}/s/{session.slug}/turns/2/replay/")
    wait_for_runs(page)
    page.goto(f"{live_server.url}/s/{session.slug}/turns/2/replay/?pass=1#passes")
    section = page.locator(".passes")
    assert "too large to keep whole" in section.inner_text()
    button = section.locator(".whole-buffer-form button")
    assert button.inner_text() == "Keep the whole buffer (1.0 MB)"
    problems += serious(page)
    if SHOTS:
        section.screenshot(path=str(Path(SHOTS) / f"whole-asked-{width}.png"))

    button.click()
    page.wait_for_selector(".passes .whole-buffer a[download]", timeout=60_000)

    assert page.url.endswith("?pass=1#passes")
    assert "kept whole (262,144 cells)" in section.inner_text()
    assert section.locator(".whole-buffer-form").count() == 0
    with page.expect_download() as download:
        section.locator(".whole-buffer a[download]").click()
    assert download.value.suggested_filename == f"whole-{width}-turn-2-pass-1-y.npy"
    problems += serious(page)
    sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert sideways <= 0, f"the page is {sideways} px wider than the window"
    assert not problems, problems
    if SHOTS:
        section.screenshot(path=str(Path(SHOTS) / f"whole-kept-{width}.png"))
    context.close()


def test_a_page_showing_a_buffer_being_kept_updates_itself(
    live_server, browser, fresh_replay_backend
) -> None:
    from kernels import jobs, whole_buffers
    from kernels.models import Run

    session = make_session("being-kept", turns=2)
    version = program_version(session, FILL_WGSL, FILL)
    page = browser.new_page()
    problems = watch(page)
    page.goto(f"{live_server.url}/s/{session.slug}/turns/2/replay/")
    wait_for_runs(page)
    # As a task queue's run still in flight leaves it: asked for, not done yet.
    whole = whole_buffers.whole_buffer_job(jobs.job_for(version), 1, "y")
    in_flight = Run.objects.create(
        source_sha256=whole.source_sha256,
        harness_digest=whole.harness_digest,
        environment_id="elsewhere",
        state=Run.State.QUEUED,
    )
    session.touch()
    page.goto(f"{live_server.url}/s/{session.slug}/turns/2/replay/?pass=1#passes")
    section = page.locator(".passes")
    assert "Being kept whole" in section.inner_text()
    assert section.locator(".whole-buffer-form").count() == 0

    in_flight.delete()  # it ended without keeping anything: the page offers the form again

    page.wait_for_selector(".passes .whole-buffer-form button", timeout=30_000)
    assert "Being kept whole" not in section.inner_text()
    assert page.url.endswith("?pass=1#passes")  # in place, not reloaded elsewhere
    assert not problems, problems
    page.close()
