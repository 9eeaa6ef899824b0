"""Every page type, in Chromium at a phone's and a desktop's width, light and dark: no page
scrolls sideways, the console stays clean (no Content-Security-Policy report, no error, no uncaught
exception, no failed request: favicon included), and axe-core (from the npm registry,
package-lock.json) finds no serious or critical accessibility issue."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.management import call_command

from kernels import forks
from sessions.programs import KernelVersion
from tests.browser.editor import replace_code

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SLUG = "gpu-inference-from-scratch"
S = f"/s/{SLUG}"
AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
PAGES = {
    "index": "/",
    "search": "/?q=uniform+alignment",
    "session": f"{S}/",
    "turn": f"{S}/?turn=57",
    "session search": f"{S}/search/?q=softmax+overflow",
    "replay": f"{S}/turns/57/replay/",
    "replay with a roofline": f"{S}/turns/44/replay/",
    "timeline": f"{S}/kernels/softmax/",
    "session embed": f"{S}/embed/?from=57&to=62",
    "replay embed": f"{S}/turns/57/replay/embed/?theme=dark",
    "digits": "/demo/digits/",
    "tutor": "/tutor/",
    "sign in": "/accounts/login/",
}


@pytest.fixture
def site(fresh_replay_backend) -> dict[str, str]:
    call_command("load_showcase", verbosity=0)
    # A Triton version as recorded on an H100: its speed table, launches and output.
    call_command("load_gpu_showcase", stdout=io.StringIO())
    triton = KernelVersion.objects.get(kernel__name="add_relu-add_relu_kernel", number=3)
    version = KernelVersion.objects.get(kernel__session__slug=SLUG, turn__number=57)
    edit = version.source.replace("exp(", "exp( ")
    fork = forks.start_fork(version, edit, "", AnonymousUser())
    return {
        **PAGES,
        "triton replay": f"/s/{triton.kernel.session.slug}/turns/{triton.turn.number}/replay/",
        "fork": fork.get_absolute_url(),
        "fork embed": f"{fork.get_absolute_url()}embed/?theme=auto",
    }


def watch(page) -> list[str]:
    """What the console and the network say went wrong on this page."""
    problems: list[str] = []
    page.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type in ("error", "warning")
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    page.on(
        "response",
        lambda response: (
            problems.append(f"{response.status} {response.url}") if response.status >= 400 else None
        ),
    )
    return problems


def serious(page) -> list[str]:
    """axe-core's serious and critical findings on the page as it stands."""
    page.evaluate(AXE.read_text() + "\n;0")
    found = page.evaluate(
        "axe.run({resultTypes: ['violations']}).then(r => ({passes: r.passes.length,"
        " violations: r.violations.filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => ({id: v.id, help: v.help, nodes: v.nodes.slice(0, 3).map(n => n.target)}))}))"
    )
    assert found["passes"] > 0  # axe ran
    return [json.dumps(v) for v in found["violations"]]


def wait_for_runs(page) -> None:
    """A replay or fork page shows its run once the run is done, in place."""
    if page.locator("article.replay").count():
        page.wait_for_selector("article.replay[data-state=done]", timeout=60_000)


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_has_a_clean_console_and_no_serious_accessibility_issue(
    live_server, browser, site, width, scheme
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    failures = {}
    for name, path in site.items():
        page = context.new_page()
        problems = watch(page)
        page.goto(live_server.url + path)
        wait_for_runs(page)
        if name in ("replay", "fork"):
            # Typing over the whole kernel (the editor once set a blocked style attribute).
            page.click(".try-fork > summary") if page.locator(
                ".try-fork > summary"
            ).count() else None
            replace_code(page, "form", "fn main() {}\n")
        page.wait_for_timeout(200)
        problems += serious(page)
        # Wide tables and code scroll in their own boxes; the page never scrolls sideways.
        sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if sideways > 0:
            problems.append(f"the page is {sideways} px wider than the window")
        if problems:
            failures[name] = problems
        page.close()
    context.close()
    assert not failures, json.dumps(failures, indent=1)


def test_a_guided_sessions_page_too(live_server, browser) -> None:
    page = browser.new_page()
    problems = watch(page)
    page.goto(f"{live_server.url}/accounts/signup/")
    page.fill("#id_username", "ada")
    page.fill("#id_password1", "a long passphrase for tests")
    page.fill("#id_password2", "a long passphrase for tests")
    page.click("button.primary")
    page.wait_for_url(f"{live_server.url}/tutor/")
    page.locator(".lesson-card").first.locator("button").click()
    page.wait_for_selector("#editor-form .cm-content")
    replace_code(page, "#editor-form", "fn main() {}\n")
    page.wait_for_timeout(200)
    problems += serious(page)
    assert not problems, problems
