"""What issue 15 is done by, in a real browser: a range URL pasted into an oEmbed consumer
embeds that range, a script embed on another origin grows to its content, search finds
the showcase's turn, and the 115-turn showcase has a heading per lesson."""

from __future__ import annotations

import json
import re
import urllib.request
from html.parser import HTMLParser

import pytest
from django.core.management import call_command

from sessions.models import Session, Turn
from tests.base import make_session

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOWCASE = "gpu-inference-from-scratch"


def long_session() -> Session:
    session = make_session("framed", turns=8, title="Framed session")
    for number in (3, 4, 5):
        turn = session.turns.get(number=number)
        turn.content = f"Turn {number}, long.\n\n" + "\n\n".join(
            f"Paragraph {i} of a long answer, which goes on for a while so that a narrower "
            "column wraps it onto more lines than a wide one does."
            for i in range(15)
        )
        turn.save()
    return session


class _Discovery(HTMLParser):
    href: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link" and attrs.get("type") == "application/json+oembed":
            self.href = attrs["href"]


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (our live server)
        return response.read().decode()


def oembed_html(page_url: str) -> str:
    """What WordPress and Ghost do with a URL pasted on a line of its own: fetch the page,
    follow its oEmbed discovery link, and take the document's html."""
    parser = _Discovery()
    parser.feed(fetch(page_url))
    assert parser.href, "the page has no oEmbed discovery link"
    document = json.loads(fetch(parser.href))
    assert document["type"] == "rich" and document["width"] and document["html"]
    return document["html"]


# A trimmed wp-embed: WordPress frames an unknown provider's first iframe sandboxed with a
# secret, and sizes it by the messages that carry that secret.
WORDPRESS = """<!doctype html><html><body><h1>A WordPress post</h1>
{iframe}
<script>
window.addEventListener("message", function (event) {{
  var data = event.data;
  if (!data || data.message !== "height" || !data.secret) return;
  document.querySelectorAll('iframe[data-secret="' + data.secret + '"]').forEach(function (frame) {{
    if (frame.contentWindow === event.source) frame.height = data.value;
  }});
}});
</script></body></html>"""

GHOST = """<!doctype html><html><body><h1>A Ghost post</h1>
<figure class="kg-card kg-embed-card">{html}</figure>
<p>After the embed.</p></body></html>"""


def as_wordpress(html: str) -> str:
    """wp_filter_oembed_result for a provider it does not know: the first iframe only,
    sandboxed, with a secret in its URL."""
    iframe = re.search(r"<iframe[^>]*></iframe>", html)[0]
    iframe = iframe.replace('src="', 'data-secret="s3cr3t" sandbox="allow-scripts" src="', 1)
    iframe = re.sub(r'src="([^"]*)"', r'src="\1#?secret=s3cr3t"', iframe)
    return WORDPRESS.format(iframe=iframe)


def content_height(frame) -> float:
    return frame.locator("html").evaluate("html => html.getBoundingClientRect().height")


def test_a_turn_range_url_pasted_into_an_oembed_consumer_embeds_that_range(
    live_server, third_party_site, browser
) -> None:
    long_session()
    origin, folder = third_party_site
    html = oembed_html(f"{live_server.url}/s/framed/?from=3&to=5")
    (folder / "wordpress.html").write_text(as_wordpress(html))
    (folder / "ghost.html").write_text(GHOST.format(html=html))

    page = browser.new_page()
    for post in ("wordpress", "ghost"):
        page.goto(f"{origin}/{post}.html")
        frame = page.frame_locator("iframe")
        for number in (3, 4, 5):
            frame.locator(f"#turn-{number}").wait_for()
        assert frame.locator("#turn-2, #turn-6").count() == 0, post
        # Both fit the frame to what it shows: WordPress by its secret, Ghost by our script.
        page.wait_for_function(
            "document.querySelector('iframe').getBoundingClientRect().height > 1000"
        )
        height = page.eval_on_selector("iframe", "frame => frame.getBoundingClientRect().height")
        assert abs(height - content_height(frame)) <= 2, post
    page.close()


def test_a_script_embed_on_another_origin_grows_to_its_content(
    live_server, third_party_site, browser
) -> None:
    long_session()
    origin, folder = third_party_site
    embed = f"{live_server.url}/s/framed/embed/?from=2&amp;to=5"
    loader = f"{live_server.url}/static/js/embed.js"
    (folder / "post.html").write_text(
        '<!doctype html><html><body style="margin:0"><main style="max-width:700px">'
        f'<p>Before.</p><a class="kernelbin-embed" href="{embed}">Framed session</a>'
        f'<script async src="{loader}"></script><p>After.</p></main></body></html>'
    )
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    page.goto(f"{origin}/post.html")
    page.wait_for_selector("iframe.kernelbin-embed")
    frame = page.frame_locator("iframe.kernelbin-embed")
    frame.locator("#turn-5").wait_for()
    assert page.locator("a.kernelbin-embed").count() == 0
    page.wait_for_function("document.querySelector('iframe').getBoundingClientRect().height > 1000")
    box = page.locator("iframe").bounding_box()
    assert abs(box["height"] - content_height(frame)) <= 2
    assert box["width"] == 700  # the column's width, under the 760 px cap
    # Light by default, whatever the reader's system prefers.
    assert frame.locator("html").get_attribute("data-theme") == "light"

    # Only the iframe's own window, from its own origin, may resize it.
    page.evaluate("window.postMessage({type: 'kernelbin:embed-height', height: 50}, '*')")
    page.wait_for_timeout(300)
    assert page.locator("iframe").bounding_box()["height"] == box["height"]

    # It follows its content: a turn opened inside makes it taller.
    page.set_viewport_size({"width": 420, "height": 700})
    page.wait_for_function(
        f"document.querySelector('iframe').getBoundingClientRect().height > {box['height'] + 50}"
    )
    page.close()


@pytest.fixture
def showcase(fresh_replay_backend):
    call_command("load_showcase", verbosity=0)


def test_searching_softmax_overflow_lists_the_turn_that_says_it(
    live_server, browser, showcase
) -> None:
    number = (
        Turn.objects.filter(session__slug=SHOWCASE, content__contains="overflows to infinity")
        .values_list("number", flat=True)
        .get()
    )
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(live_server.url)
    page.fill("#q", "softmax overflow")
    page.press("#q", "Enter")
    hit = page.locator(f'.search-hits a[href$="?turn={number}#turn-{number}"]')
    hit.wait_for()
    assert "overflows" in hit.locator("mark").all_inner_texts()
    hit.click()
    page.wait_for_url(f"**/?turn={number}#turn-{number}")
    # The turn lands below the sticky bar, not under it.
    turn = page.locator(f"#turn-{number}").bounding_box()
    bar = page.locator(".turn-tools").bounding_box()
    assert bar["y"] + bar["height"] <= turn["y"] < bar["y"] + bar["height"] + 40
    page.close()


def test_the_115_turn_showcase_has_one_heading_per_lesson(live_server, browser, showcase) -> None:
    notes = Turn.objects.filter(session__slug=SHOWCASE, role="system", meta__has_key="lesson")
    lessons = notes.count()
    assert lessons == 8
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    headings, pages = [], [f"{live_server.url}/s/{SHOWCASE}/"]
    page.goto(pages[0])
    if page.locator(".pager .later").count():
        pages.append(page.locator(".pager .later").first.get_attribute("href"))
    for url in pages:
        page.goto(url if url.startswith("http") else f"{live_server.url}/s/{SHOWCASE}/{url}")
        headings += page.locator("h2.turn-title").all_inner_texts()
        # Every page lists every lesson in its outline.
        assert page.locator(".session-toc li").count() == lessons
    assert len(headings) == lessons
    assert headings[0].startswith("Lesson 1") and headings[-1].startswith("Lesson 8")
    assert len(pages) == 2  # 58 + 57 turns, not 100 + 15

    # j moves to the next turn; "Next kernel" to the first turn with a kernel.
    page.goto(f"{live_server.url}/s/{SHOWCASE}/")
    page.keyboard.press("j")
    page.wait_for_url("**/?turn=1#turn-1")
    page.keyboard.press("j")
    page.wait_for_url("**/?turn=2#turn-2")
    page.keyboard.press("k")
    page.wait_for_url("**/?turn=1#turn-1")
    first_kernel = (
        Turn.objects.filter(session__slug=SHOWCASE)
        .exclude(kernel_version=None)
        .order_by("number")
        .values_list("number", flat=True)
        .first()
    )
    page.click("[data-jump=kernel]")
    page.wait_for_url(f"**/?turn={first_kernel}#turn-{first_kernel}")
    page.close()
