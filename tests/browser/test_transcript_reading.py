"""Issue 26 in a real browser: a sub-agent's turns are folded under their call, open with
a click with or without scripts, and a link to one of them opens its fold; a pasted
screenshot loads inline under the page's CSP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command

from sessions.models import Session
from tests.sessions.test_claude_code_images import pasted
from tests.sessions.test_claude_code_subagents import busy_session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def write(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def import_busy(tmp_path: Path) -> Session:
    main, agents = busy_session()
    write(tmp_path / "busy.jsonl", main.lines)
    for agent in agents:
        write(tmp_path / "busy" / "subagents" / f"agent-{agent.agent_id}.jsonl", agent.lines)
    call_command("import_transcript", str(tmp_path / "busy"), "--visibility", "public")
    return Session.objects.get()


@pytest.mark.parametrize("scripts", [True, False])
def test_a_sub_agent_opens_with_a_click_under_its_call(live_server, browser, tmp_path, scripts):
    session = import_busy(tmp_path)
    nested = session.turns.filter(meta__has_key="depth", hidden=False).first()
    context = browser.new_context(
        viewport={"width": 390, "height": 800}, java_script_enabled=scripts
    )
    page = context.new_page()
    page.goto(f"{live_server.url}{session.get_absolute_url()}")
    assert not page.is_visible(f"#turn-{nested.number}")
    call = page.locator(f"#turn-{nested.number - 1}")
    call.locator("details.subagent > summary").click()
    assert page.is_visible(f"#turn-{nested.number}")
    context.close()


def test_a_link_to_a_sub_agents_turn_opens_its_fold(live_server, browser, tmp_path):
    session = import_busy(tmp_path)
    last = session.turns.filter(meta__has_key="depth", hidden=False).last()
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{live_server.url}{session.get_absolute_url()}?turn={last.number}")
    page.wait_for_function(f"document.getElementById('turn-{last.number}').offsetParent !== null")
    assert page.is_visible(f"#turn-{last.number}")
    page.close()


def test_a_pasted_screenshot_loads_inline(live_server, browser, tmp_path):
    path = write(tmp_path / "pasted.jsonl", pasted().lines)
    call_command("import_transcript", str(path), "--visibility", "public")
    session = Session.objects.get()
    page = browser.new_page(viewport={"width": 390, "height": 800})
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.goto(f"{live_server.url}{session.get_absolute_url()}", wait_until="networkidle")
    image = page.locator("#turn-1 .turn-images img")
    assert image.evaluate("img => img.complete && img.naturalWidth") == 64
    assert errors == []
    page.close()
