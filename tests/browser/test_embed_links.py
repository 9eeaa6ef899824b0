"""embed.js on a blog of another origin turns only links to our embed URLs into iframes,
and only our frames may resize themselves, within a bound."""

from __future__ import annotations

import pytest

from tests.base import make_session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

POST = """<!doctype html>
<html><body>
<p><a class="kernelbin-embed" id="script" href="javascript:window.ran = true">Run me</a></p>
<p><a class="kernelbin-embed" id="elsewhere" href="{blog}/s/framed/embed/?from=1&amp;to=2">Theirs</a></p>
<p><a class="kernelbin-embed" id="page" href="{ours}/s/framed/">Our page, not an embed</a></p>
<p><a class="kernelbin-embed" id="ours" href="{ours}/s/framed/embed/?from=1&amp;to=2">Ours</a></p>
<iframe class="kernelbin-embed" id="foreign" src="{blog}/tall.html" height="150"></iframe>
<script async src="{ours}/static/js/embed.js"></script>
</body></html>
"""
# Another site's frame asking to be 19,999 px tall, in our message format.
TALL = """<!doctype html><body><script>
setInterval(function () {
  parent.postMessage({ type: "kernelbin:embed-height", height: 19999 }, "*");
}, 50);
</script></body>"""


def test_only_links_to_our_embeds_become_frames_and_only_ours_resize(
    live_server, third_party_site, browser
) -> None:
    make_session("framed", turns=3, title="Framed session")
    blog, folder = third_party_site
    (folder / "post.html").write_text(POST.format(blog=blog, ours=live_server.url))
    (folder / "tall.html").write_text(TALL)

    page = browser.new_page()
    page.goto(f"{blog}/post.html")
    page.wait_for_selector("iframe#ours, iframe[src*='/s/framed/embed/']")
    ours = page.frame_locator("iframe[src^='" + live_server.url + "']")
    ours.locator("#turn-2").wait_for()
    page.wait_for_timeout(500)  # the foreign frame has asked many times by now

    # The javascript: link stays a link and never ran; so do the others not ours.
    assert page.evaluate("window.ran") is None
    for link in ("script", "elsewhere", "page"):
        assert page.locator(f"a#{link}.kernelbin-embed").count() == 1, link
    assert page.locator("iframe.kernelbin-embed").count() == 2
    # The foreign frame keeps its own height.
    assert page.eval_on_selector("#foreign", "frame => frame.style.height") == ""
    assert page.locator("#foreign").bounding_box()["height"] < 200

    # Our frame fits its content, and a height past the bound is cut to it (and scrolls).
    frame = next(f for f in page.frames if f.url.startswith(live_server.url))
    frame.evaluate("parent.postMessage({type: 'kernelbin:embed-height', height: 19999}, '*')")
    ours_frame = page.locator(f"iframe[src^='{live_server.url}']")
    page.wait_for_function(
        f"document.querySelector(\"iframe[src^='{live_server.url}']\").style.height === '8000px'"
    )
    assert ours_frame.get_attribute("scrolling") == "auto"
    page.close()
