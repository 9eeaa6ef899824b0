"""Every vector, in every Markdown context, comes out with no script, no event handler,
no dangerous attribute and no link to a scheme other than http, https or mailto.

The vectors are our own, written to cover the classic filter-evasion families:
script and event-handler tags, encoded and split javascript: URLs, data: and vbscript:
URLs, SVG/MathML, frames and objects, style and meta tricks, attribute break-outs, and
Markdown's own link, image, autolink and reference syntaxes.
"""

from html.parser import HTMLParser
from urllib.parse import urlsplit

from django.test import SimpleTestCase

from sessions.markdown import ALLOWED_TAGS, render_markdown

JS = "javascript:alert(1)"
URL_VARIANTS = [
    JS,
    "JaVaScRiPt:alert(1)",
    " javascript:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "java&#x09;script:alert(1)",
    "&#106;avascript:alert(1)",
    "&#x6A;avascript:alert(1)",
    "&#0000106&#0000097&#0000118&#0000097&#0000115&#0000099&#0000114&#0000105&#0000112&#0000116&#0000058alert(1)",
    "jav&#x0A;ascript:alert(1)",
    "javascript&colon;alert(1)",
    "javascript%3Aalert(1)",
    "\x01javascript:alert(1)",
    "vbscript:msgbox(1)",
    "data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "data:text/html,<script>alert(1)</script>",
    "data:image/svg+xml,<svg onload=alert(1)>",
    "livescript:alert(1)",
    "file:///etc/passwd",
    "//evil.example/%2e%2e",
]
TAG_VECTORS = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<scr<script>ipt>alert(1)</scr</script>ipt>",
    "<script/xss src=//evil.example/x.js></script>",
    "<<script>alert(1);//<</script>",
    "<script>alert(1)//",
    "<img src=x onerror=alert(1)>",
    '<IMG SRC=# onmouseover="alert(1)">',
    "<img src=`javascript:alert(1)`>",
    '<img """><script>alert(1)</script>">',
    "<img/src=x/onerror=alert(1)>",
    "<svg onload=alert(1)>",
    "<svg><script>alert(1)</script></svg>",
    '<svg><a xlink:href="javascript:alert(1)"><text x=20 y=20>x</text></a></svg>',
    "<math><a xlink:href=javascript:alert(1)>x</a></math>",
    "<body onload=alert(1)>",
    "<BODY ONLOAD!#$%&()*~+-_.,:;?@[/|\\]^`=alert(1)>",
    "<iframe src=javascript:alert(1)></iframe>",
    '<iframe srcdoc="<script>alert(1)</script>"></iframe>',
    "<frameset><frame src=javascript:alert(1)></frameset>",
    "<object data=javascript:alert(1)></object>",
    "<embed src=data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+>",
    "<applet code=x></applet>",
    "<link rel=import href=//evil.example/x>",
    "<link rel=stylesheet href=javascript:alert(1)>",
    "<style>@import 'javascript:alert(1)';</style>",
    "<style>body{background:url(javascript:alert(1))}</style>",
    '<div style="width: expression(alert(1));">x</div>',
    "<p style=\"background-image:url('javascript:alert(1)')\">x</p>",
    '<meta http-equiv=refresh content="0;url=javascript:alert(1)">',
    '<meta http-equiv="set-cookie" content="a=b">',
    "<base href=javascript:alert(1)//>",
    "<form action=javascript:alert(1)><input type=submit></form>",
    "<button formaction=javascript:alert(1)>x</button>",
    "<input onfocus=alert(1) autofocus>",
    "<select onfocus=alert(1) autofocus>",
    "<textarea onfocus=alert(1) autofocus>",
    "<keygen onfocus=alert(1) autofocus>",
    "<video><source onerror=alert(1)></video>",
    "<audio src=x onerror=alert(1)>",
    "<details open ontoggle=alert(1)>",
    "<marquee onstart=alert(1)>x</marquee>",
    "<table background=javascript:alert(1)>",
    "<td background=javascript:alert(1)>",
    "<div id=x name=y>clobber</div>",
    "<a href=javascript:alert(1)>x</a>",
    '<a href="jav&#x09;ascript:alert(1)">x</a>',
    '<a href="  javascript:alert(1)">x</a>',
    "<a href=x onclick=alert(1)>x</a>",
    '<a href="http://ok.example" style="position:fixed;inset:0">cover</a>',
    '<a href="data:text/html,<script>alert(1)</script>">x</a>',
    "<xss onpointerover=alert(1)>x</xss>",
    "<!--<script>alert(1)</script>-->",
    "<![CDATA[<script>alert(1)</script>]]>",
    "<?xml-stylesheet href=javascript:alert(1)?>",
    '<noscript><p title="</noscript><img src=x onerror=alert(1)>">',
    "<template><script>alert(1)</script></template>",
    "<isindex type=image src=1 onerror=alert(1)>",
    '<object type="text/x-scriptlet" data="//evil.example/x.sct"></object>',
    '"><script>alert(1)</script>',
    "'><img src=x onerror=alert(1)>",
    "</textarea><script>alert(1)</script>",
    "</title><script>alert(1)</script>",
    "<img src=x:alert(1) onerror=eval(src)>",
    "<sCrIpT>alert(String.fromCharCode(88,83,83))</sCrIpT>",
    "<div onmouseover\n=alert(1)>x</div>",
    "<img\x00src=x onerror=alert(1)>",
    "<scr\x00ipt>alert(1)</scr\x00ipt>",
]
MARKDOWN_VECTORS = [
    "<javascript:alert(1)>",
    "<vbscript:msgbox(1)>",
    "[x][r]\n\n[r]: javascript:alert(1)",
    '[x][r]\n\n[r]: <javascript:alert(1)> "t"',
    '[x](http://ok.example "onmouseover=alert(1)")',
    '[x](http://ok.example "\\"><script>alert(1)</script>")',
    "[<img src=x onerror=alert(1)>](http://ok.example)",
    "[x](<javascript:alert(1)>)",
    '![x](x" onerror="alert(1))',
    '[x](http://ok.example/"onmouseover="alert(1))',
]


def payloads() -> list[str]:
    vectors = list(TAG_VECTORS) + list(MARKDOWN_VECTORS)
    for url in URL_VARIANTS:
        vectors += [f"[click]({url})", f"![pic]({url})", f'<a href="{url}">x</a>', f"<{url}>"]
    return vectors


CONTEXTS = {
    "bare": "{}",
    "paragraph": "Before the payload {} and after it.",
    "link target": "[text]({})",
    "image": "![alt]({})",
    "inline code": "`{}`",
    "fenced wgsl": "```wgsl\n{}\n```",
    "blockquote": "> {}",
    "list item": "- item\n- {}",
    "table cell": "| a | b |\n|---|---|\n| {} | x |",
    "heading": "## {}",
}

SAFE_SCHEMES = {"", "http", "https", "mailto"}
FORBIDDEN_ATTRIBUTES = {
    "style",
    "srcdoc",
    "formaction",
    "id",
    "name",
    "background",
    "action",
    "data",
}


class Audit(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag not in ALLOWED_TAGS:
            self.problems.append(f"tag <{tag}>")
        for name, value in attrs:
            if name.startswith("on") or name in FORBIDDEN_ATTRIBUTES:
                self.problems.append(f"attribute {name} on <{tag}>")
            if name in {"href", "src", "xlink:href"} and value is not None:
                cleaned = "".join(ch for ch in value if ch.isprintable() and not ch.isspace())
                scheme = urlsplit(cleaned).scheme.lower()
                if scheme not in SAFE_SCHEMES:
                    self.problems.append(f"{name} with scheme {scheme!r} on <{tag}>")

    handle_startendtag = handle_starttag

    def handle_comment(self, data: str) -> None:
        self.problems.append("comment")

    def handle_pi(self, data: str) -> None:
        self.problems.append("processing instruction")


class XssCorpusTestCase(SimpleTestCase):
    def test_the_corpus_is_large_enough(self) -> None:
        self.assertGreaterEqual(len(set(payloads())), 100)

    def test_no_vector_survives_in_any_context(self) -> None:
        failures = []
        for vector in payloads():
            for context, template in CONTEXTS.items():
                html = render_markdown(template.format(vector))
                audit = Audit()
                audit.feed(html)
                audit.close()
                if audit.problems:
                    failures.append(f"{context} / {vector!r}: {audit.problems}")
                if "<script" in html.lower():
                    failures.append(f"{context} / {vector!r}: literal <script")
        self.assertEqual(failures, [], "\n".join(failures[:20]))
