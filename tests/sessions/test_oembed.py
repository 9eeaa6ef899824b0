import json
from html.parser import HTMLParser

from tests.base import BaseTestCase, make_session


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
        self.assertEqual(parsed.tags, ["iframe"])
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
