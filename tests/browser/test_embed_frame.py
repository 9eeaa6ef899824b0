"""A blog on another origin frames an embed: it renders and fits; the full page refuses."""

import pytest

from tests.base import make_session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BLOG = """<!doctype html>
<html><body>
<h1>My blog post</h1>
<iframe id="embed" src="{embed}" width="600" height="150" sandbox="allow-scripts"></iframe>
<iframe id="page" src="{page}" width="600" height="300"></iframe>
<script>
  window.heights = [];
  window.addEventListener("message", function (event) {{
    if (event.data && event.data.type === "kernelbin:embed-height") {{
      window.heights.push(event.data.height);
      document.getElementById("embed").height = event.data.height;
    }}
  }});
</script>
</body></html>
"""


def test_an_embed_renders_and_resizes_while_the_session_page_refuses_framing(
    live_server, third_party_site, browser
) -> None:
    session = make_session("framed", turns=6, title="Framed session")
    turn = session.turns.get(number=3)
    turn.content = "Long turn.\n\n" + "\n\n".join(
        f"Paragraph {i} of a long answer." for i in range(30)
    )
    turn.save()
    origin, folder = third_party_site
    (folder / "post.html").write_text(
        BLOG.format(
            embed=f"{live_server.url}/s/framed/embed/?from=2&to=4",
            page=f"{live_server.url}/s/framed/",
        )
    )

    page = browser.new_page()
    refused = []
    page.on(
        "console", lambda message: refused.append(message.text) if "frame" in message.text else None
    )
    page.goto(f"{origin}/post.html")

    embed = page.frame_locator("#embed")
    for number in (2, 3, 4):
        embed.locator(f"#turn-{number}").wait_for()
    assert embed.locator("#turn-5").count() == 0
    assert "Paragraph 29" in embed.locator("#turn-3").inner_text()

    # The embed told the page its height and the page fitted the iframe to it.
    page.wait_for_function(
        "window.heights.length > 0 && document.getElementById('embed').height > 600"
    )
    height = int(page.eval_on_selector("#embed", "frame => frame.height"))
    content_height = embed.locator("html").evaluate("html => html.getBoundingClientRect().height")
    assert abs(height - content_height) <= 2

    # The full session page is never shown inside another site.
    page.wait_for_timeout(500)
    framed_page = page.frame_locator("#page")
    assert framed_page.locator(".session").count() == 0
    assert any("X-Frame-Options" in text or "frame-ancestors" in text for text in refused), refused
    page.close()
