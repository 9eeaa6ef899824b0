from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed: `make test` installs Debian's chromium package.")
    # Playwright's sync API keeps an event loop running in this thread; the tests' own
    # database calls are still plain synchronous ones. Only for these tests: the flag
    # must not leak into others (it fails Django's deployment check).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                ],
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(autouse=True)
def replies_finished(transactional_db) -> Iterator[None]:
    """Waits, after each test, for the tutor's replies still being written to end.

    A test may end before the stream it started does (the browser has what it looked
    for); the live server's thread then goes on adding turns while the database is
    emptied for the next test, which on PostgreSQL can deadlock the flush.
    """
    yield
    from tutor.models import GuidedSession

    deadline = time.monotonic() + 90
    while GuidedSession.objects.filter(replying_since__isnull=False).exists():
        if time.monotonic() > deadline:
            pytest.fail("a tutor reply was still being written 90 s after the test")
        time.sleep(0.1)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's output is the browser's, not the server's log


@pytest.fixture
def third_party_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Another origin (its own port) serving whatever HTML a test writes into its folder."""
    handler = partial(QuietHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", tmp_path
    server.shutdown()
    server.server_close()
