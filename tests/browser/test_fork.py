"""A reader fixes the showcase's matmul bug in the code editor, runs it, shares the fork and
embeds it elsewhere; another finds a compile error marked at its line. Real Chromium, real
wgpu on the server, the site's own Content-Security-Policy."""

import pytest
from django.core.management import call_command

from kernels.models import Fork, Run
from tests.browser.editor import code
from tests.browser.test_replay_page import SLUG, reviewed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BLOG = """<!doctype html>
<html><body>
<h1>Look what I fixed</h1>
<iframe id="fork" src="{embed}" width="640" height="460"></iframe>
</body></html>
"""


@pytest.fixture
def showcase(fresh_replay_backend):
    call_command("load_showcase", verbosity=0)


def refusals(page) -> list[str]:
    """What the page's Content-Security-Policy refused, as the console reports it."""
    refused: list[str] = []
    page.on(
        "console",
        lambda message: (
            refused.append(message.text) if "Content Security Policy" in message.text else None
        ),
    )
    return refused


def fix_line(page, wrong: str, right: str) -> None:
    """Click at the end of the editor line that reads wrong and retype it as right."""
    line = page.locator(".try-fork .cm-line").filter(has_text=wrong.strip())
    line.click()
    page.keyboard.press("End")
    for _ in wrong.strip():
        page.keyboard.press("Backspace")
    page.keyboard.type(right.strip())


def test_a_reader_fixes_the_indices_runs_it_and_shares_the_fork(
    live_server, browser, showcase, third_party_site
) -> None:
    page = browser.new_page()
    refused = refusals(page)
    page.goto(f"{live_server.url}/s/{SLUG}/turns/{reviewed('matmul', 3)}/replay/")
    page.wait_for_selector(".outcome.status-mismatch", timeout=60_000)

    page.click(".try-fork summary")
    page.wait_for_selector(".try-fork .cm-content")
    # The editor has replaced the form's textarea, with WGSL highlighted and numbered lines.
    assert page.locator("#fork-source").is_hidden()
    assert page.locator(".try-fork .tok-keyword").count() > 5
    assert page.locator(".try-fork .cm-lineNumbers .cm-gutterElement").count() > 20
    fix_line(page, "    let row = id.x;", "    let row = id.y;")
    fix_line(page, "    let col = id.y;", "    let col = id.x;")
    page.click(".try-fork button:has-text('Run my version')")

    page.wait_for_url(f"{live_server.url}/f/*/")
    page.wait_for_selector(".outcome.status-passed", timeout=60_000)
    assert page.locator(".outcome svg").count() >= 1  # the status of every cell of C
    assert "Changes from v3" in page.inner_text("article.fork")
    fork_url = page.url
    fork = Fork.objects.get()
    assert fork_url == f"{live_server.url}/f/{fork.id}/"
    assert "let row = id.y;" in fork.source and "let col = id.x;" in fork.source

    # The link is permanent: a reload shows the same outcome, and the editor holds the fork.
    page.reload()
    page.wait_for_selector(".outcome.status-passed")
    assert page.url == fork_url
    assert page.locator(".outcome svg").count() >= 1
    page.wait_for_selector(".fork-form .cm-content")
    assert "let row = id.y;" in code(page, ".fork-form")
    assert refused == []

    # A blog on another origin embeds it.
    origin, folder = third_party_site
    (folder / "post.html").write_text(BLOG.format(embed=f"{fork_url}embed/"))
    page.goto(f"{origin}/post.html")
    framed = page.frame_locator("#fork")
    framed.locator(".outcome.status-passed").wait_for()
    assert framed.locator(".outcome svg").count() >= 1
    assert "forked" in framed.locator(".embed-title").inner_text()
    page.close()


def test_a_compile_error_is_marked_at_its_line_in_the_editor(
    live_server, browser, showcase
) -> None:
    page = browser.new_page()
    refused = refusals(page)
    page.goto(f"{live_server.url}/s/{SLUG}/turns/{reviewed('matmul', 1)}/replay/")
    page.wait_for_selector(".outcome.status-compile_error", timeout=60_000)
    error = Run.objects.get(status="compile_error").outcome["compile"]

    page.click(".try-fork summary")
    page.wait_for_selector(".try-fork .cm-error-message")
    marked_line = page.evaluate(
        """() => [...document.querySelectorAll('.try-fork .cm-line')]
              .findIndex(line => line.querySelector('.cm-lintRange-error')) + 1"""
    )
    assert marked_line == error["line"]
    message = page.inner_text(".try-fork .cm-error-message")
    assert message.startswith(f"Line {error['line']}, column {error['column']}:")
    assert error["message"] in message
    assert page.locator(".try-fork .cm-lint-marker-error").count() == 1

    # Tab indents inside the editor; Escape then Tab leaves it.
    page.click(".try-fork .cm-content")
    page.keyboard.press("Tab")
    assert page.evaluate("() => !!document.activeElement.closest('.cm-editor')")
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    assert page.evaluate("() => !document.activeElement.closest('.cm-editor')")
    assert refused == []
    page.close()


def test_a_signed_in_reader_edits_a_triton_file_as_python_and_a_cu_file_as_cpp(
    live_server, browser, fresh_replay_backend
) -> None:
    import io

    from django.contrib.auth.models import User

    from sessions.programs import KernelVersion

    call_command("load_gpu_showcase", stdout=io.StringIO())
    User.objects.create_user("ada", password="a long passphrase for tests")
    page = browser.new_page()
    refused = refusals(page)
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "a long passphrase for tests")
    page.click("button.primary")
    page.wait_for_load_state()

    for kernel, number, words in (
        ("add_relu-add_relu_kernel", 1, ("def", "import")),
        ("scale-scale", 1, ("void", "int")),
    ):
        version = KernelVersion.objects.get(kernel__name=kernel, number=number)
        page.goto(
            f"{live_server.url}/s/{version.kernel.session.slug}/turns/{version.turn.number}/replay/"
        )
        page.click(".try-fork summary")
        page.wait_for_selector(".try-fork .cm-content")
        # The editor replaced the textarea, and the file's language is highlighted.
        assert page.locator("#fork-source").is_hidden()
        keywords = page.locator(".try-fork .tok-keyword").all_inner_texts()
        keywords += page.locator(".try-fork .tok-typeName").all_inner_texts()
        assert set(words) <= set(keywords), keywords
    assert not refused
