import json
from html.parser import HTMLParser

from django.test import override_settings

from tests.base import BaseTestCase, add_kernel, make_session, store_run


class _Iframes(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.iframes: list[dict] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "iframe":
            self.iframes.append(dict(attrs))


def iframes(html: str) -> _Iframes:
    parser = _Iframes()
    parser.feed(html)
    return parser


class OEmbedTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        make_session("demo", turns=8, title="Matmul & friends", learner="Sam")

    def oembed(self, **params):
        params.setdefault("format", "json")
        return self.client.get("/oembed/", params)

    def test_session_url_gives_a_rich_document(self) -> None:
        r = self.oembed(url="http://testserver/s/demo/")
        self.assertEqual(r.status_code, 200)
        self.assertEqual(r["Content-Type"], "application/json")
        doc = r.json()
        self.assertEqual(doc["type"], "rich")
        self.assertEqual(doc["version"], "1.0")
        self.assertEqual(doc["provider_name"], "Kernelbin")
        self.assertEqual(doc["author_name"], "Sam")
        parsed = iframes(doc["html"])
        # The iframe first (WordPress keeps only it), then the script that fits it.
        self.assertEqual(parsed.tags, ["iframe", "script"])
        self.assertIn('<script async src="http://testserver/static/js/embed.js">', doc["html"])
        src = parsed.iframes[0]["src"]
        self.assertEqual(src, "http://testserver/s/demo/embed/?from=1&to=5")
        self.assertEqual(int(parsed.iframes[0]["width"]), doc["width"])
        self.assertEqual(int(parsed.iframes[0]["height"]), doc["height"])
        # The iframe it names really is an embed.
        self.assertEqual(self.client.get(src.removeprefix("http://testserver")).status_code, 200)

    def test_embed_url_keeps_its_range(self) -> None:
        r = self.oembed(url="http://testserver/s/demo/embed/?from=3&to=7")
        src = iframes(r.json()["html"]).iframes[0]["src"]
        self.assertTrue(src.endswith("/s/demo/embed/?from=3&to=7"))
        self.assertIn("turns 3–7", r.json()["title"])

    def test_turn_permalink_embeds_that_turn(self) -> None:
        r = self.oembed(url="http://testserver/s/demo/#turn-6")
        self.assertTrue(iframes(r.json()["html"]).iframes[0]["src"].endswith("from=6&to=6"))

    def test_maxwidth_and_maxheight_are_honoured(self) -> None:
        doc = self.oembed(url="http://testserver/s/demo/", maxwidth=300, maxheight=200).json()
        self.assertLessEqual(doc["width"], 300)
        self.assertLessEqual(doc["height"], 200)
        frame = iframes(doc["html"]).iframes[0]
        self.assertEqual((frame["width"], frame["height"]), (str(doc["width"]), str(doc["height"])))
        # It still shrinks to a narrower column than the width asked for.
        self.assertEqual(frame["style"], f"width:100%;max-width:{doc['width']}px")

    def test_bad_max_sizes_are_400(self) -> None:
        for value in ("wide", "-5", "0"):
            r = self.oembed(url="http://testserver/s/demo/", maxwidth=value)
            self.assertEqual(r.status_code, 400, value)

    def test_xml_is_not_implemented(self) -> None:
        self.assertEqual(
            self.oembed(url="http://testserver/s/demo/", format="xml").status_code, 501
        )

    def test_urls_that_are_not_ours_or_not_sessions_are_404(self) -> None:
        for url in (
            "http://evil.example/s/demo/",
            "javascript:alert(1)",
            "http://testserver/",
            "http://testserver/admin/",
            "http://testserver/s/nope/",
            "not a url at all",
        ):
            with self.subTest(url=url):
                self.assertEqual(self.oembed(url=url).status_code, 404)

    def test_text_that_urlsplit_rejects_is_404_not_500(self) -> None:
        for url in ("http://[::1", "http://[::1/s/demo/", "http://testserver:99999/s/demo/"):
            with self.subTest(url=url):
                r = self.oembed(url=url)
                self.assertEqual(r.status_code, 404)
                self.assertEqual(r.json(), {"error": "Not a URL."})

    def test_missing_url_is_400(self) -> None:
        self.assertEqual(self.oembed().status_code, 400)

    def test_bad_range_in_url_is_400(self) -> None:
        r = self.oembed(url="http://testserver/s/demo/embed/?from=5&to=2")
        self.assertEqual(r.status_code, 400)
        self.assertIn("after", r.json()["error"])

    def test_private_sessions_are_404_even_for_their_owner(self) -> None:
        make_session("mine", visibility="private", owner=self.alice)
        self.client.login(username="alice", password="password")
        self.assertEqual(self.oembed(url="http://testserver/s/mine/").status_code, 404)

    def test_html_is_escaped(self) -> None:
        doc = self.oembed(url="http://testserver/s/demo/").json()
        self.assertIn("Matmul &amp; friends", doc["html"])
        self.assertNotIn("Matmul & friends", doc["html"])
        json.dumps(doc)


class _Discovery(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.href: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link" and attrs.get("type") == "application/json+oembed":
            self.href = attrs["href"]


class OEmbedUrlFormsTestCase(BaseTestCase):
    """Every URL of ours a blogger might paste keeps what it names."""

    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=8, title="Matmul & friends")

    def oembed(self, url: str) -> dict:
        r = self.client.get("/oembed/", {"url": f"http://testserver{url}", "format": "json"})
        self.assertEqual(r.status_code, 200, r.content)
        return r.json()

    def src(self, url: str) -> str:
        return iframes(self.oembed(url)["html"]).iframes[0]["src"]

    def test_every_session_url_form_keeps_its_range_and_title(self) -> None:
        cases = [
            ("/s/demo/?turn=6", "/s/demo/embed/?from=6&to=6", "Matmul & friends · turn 6"),
            ("/s/demo/#turn-7", "/s/demo/embed/?from=7&to=7", "Matmul & friends · turn 7"),
            ("/s/demo/?from=2&to=4", "/s/demo/embed/?from=2&to=4", "Matmul & friends · turns 2–4"),
            ("/s/demo/?turn=6#turn-6", "/s/demo/embed/?from=6&to=6", "Matmul & friends · turn 6"),
            (
                "/s/demo/embed/?from=3&to=5&theme=dark",
                "/s/demo/embed/?from=3&to=5&theme=dark",
                None,
            ),
            ("/s/demo/", "/s/demo/embed/?from=1&to=5", "Matmul & friends · turns 1–5"),
        ]
        for url, src, title in cases:
            with self.subTest(url=url):
                doc = self.oembed(url)
                self.assertEqual(iframes(doc["html"]).iframes[0]["src"], f"http://testserver{src}")
                if title:
                    self.assertEqual(doc["title"], title)

    @override_settings(TURNS_PER_PAGE=4)
    def test_a_later_page_embeds_its_own_first_turns(self) -> None:
        self.assertTrue(self.src("/s/demo/?page=2").endswith("/s/demo/embed/?from=5&to=8"))

    def test_replay_urls_embed_the_replay(self) -> None:
        add_kernel(self.session, turn=2)
        for url in ("/s/demo/turns/2/replay/", "/s/demo/turns/2/replay/embed/"):
            with self.subTest(url=url):
                doc = self.oembed(url)
                self.assertEqual(
                    iframes(doc["html"]).iframes[0]["src"],
                    "http://testserver/s/demo/turns/2/replay/embed/",
                )
                self.assertEqual(doc["title"], "add v1 replayed · Matmul & friends")
        r = self.client.get("/oembed/", {"url": "http://testserver/s/demo/turns/3/replay/"})
        self.assertEqual(r.status_code, 404)

    def test_a_consumer_that_discovers_gets_the_range_of_the_url_it_was_given(self) -> None:
        """As WordPress and Ghost do: fetch the page, follow its discovery link, use html."""
        store_run(add_kernel(self.session, turn=2), "passed")
        cases = {
            "/s/demo/?turn=6": "/s/demo/embed/?from=6&to=6",
            "/s/demo/?from=2&to=4": "/s/demo/embed/?from=2&to=4",
            "/s/demo/embed/?from=3&to=5": "/s/demo/embed/?from=3&to=5",
            "/s/demo/turns/2/replay/embed/": "/s/demo/turns/2/replay/embed/",
        }
        for page, src in cases.items():
            with self.subTest(page=page):
                parser = _Discovery()
                parser.feed(self.client.get(page).content.decode())
                self.assertIsNotNone(parser.href, "no discovery link")
                doc = self.client.get(parser.href.removeprefix("http://testserver")).json()
                self.assertEqual(iframes(doc["html"]).iframes[0]["src"], f"http://testserver{src}")
