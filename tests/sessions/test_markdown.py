import time

from django.conf import settings
from django.test import SimpleTestCase

from sessions.markdown import render_markdown, render_source


class RenderTestCase(SimpleTestCase):
    def test_it_highlights_wgsl_python_js_and_diffs(self) -> None:
        cases = {
            "wgsl": (
                "@compute @workgroup_size(64)\nfn main() {}",
                '<span class="nd">@compute</span>',
            ),
            "python": ("def f(): pass", '<span class="k">def</span>'),
            "js": ("const x = 1;", '<span class="kd">const</span>'),
            "diff": ("-old\n+new", '<span class="gi">+new</span>'),
        }
        for lang, (code, expected) in cases.items():
            with self.subTest(lang=lang):
                html = render_markdown(f"```{lang}\n{code}\n```")
                self.assertIn(expected, html)
                self.assertIn('class="highlight lang-', html)

    def test_unknown_languages_are_escaped_code(self) -> None:
        html = render_markdown("```brainfreeze\n<b>x</b>\n```")
        self.assertIn("&lt;b&gt;x&lt;/b&gt;", html)

    def test_tables_lists_and_emphasis(self) -> None:
        html = render_markdown("| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- **two**")
        self.assertIn("<table>", html)
        self.assertIn("<td>2</td>", html)
        self.assertIn("<li><strong>two</strong></li>", html)

    def test_raw_html_is_shown_not_run(self) -> None:
        html = render_markdown("Hello <b onmouseover=alert(1)>there</b>")
        self.assertIn("&lt;b onmouseover=alert(1)&gt;", html)

    def test_links_are_nofollow_and_images_become_links(self) -> None:
        html = render_markdown("[site](https://example.org) ![chart](https://example.org/c.png)")
        self.assertIn(
            '<a href="https://example.org" rel="nofollow noopener noreferrer">site</a>', html
        )
        self.assertIn("image: chart", html)
        self.assertNotIn("<img", html)

    def test_source_view_numbers_lines_and_marks_errors(self) -> None:
        html = render_source("\nlet a = 1;\nlet b = 2\n", "wgsl", [3])
        self.assertIn('<span class="linenos">1</span>', html)
        self.assertIn('<span class="hll"><span class="linenos">3</span>', html)
        # A leading blank line still counts, as in naga's line numbers.
        self.assertEqual(html.count('class="linenos"'), 3)


class PathologicalInputTestCase(SimpleTestCase):
    """Hostile turns render fast or fall back to escaped text; they never hang."""

    @staticmethod
    def cases(size: int) -> dict[str, str]:
        """The slowest inputs we know of for the parser, cut to size characters."""
        shapes = {
            "brackets": "[",
            "empty links": "[](",
            "nested quotes": ">",
            "emphasis soup": "*a",
            "backticks": "`",
            "table rows": "|x|y|\n",
            "autolinks": "<http://a",
            "deep list": "  - a\n",
        }
        texts = {name: (unit * (size // len(unit) + 1))[:size] for name, unit in shapes.items()}
        texts["table rows"] = "|a|b|\n|-|-|\n" + texts["table rows"]
        # Pygments' own worst cases: its WGSL lexer on a run of zeros, TypeScript on dots.
        texts["zeros in wgsl"] = "```wgsl\n" + "0" * (size - 12) + "\n```"
        texts["dots in ts"] = "```ts\n" + "." * (size - 10) + "\n```"
        return texts

    def assert_fast(self, texts: dict[str, str]) -> None:
        for name, text in texts.items():
            with self.subTest(name, size=len(text)):
                started = time.perf_counter()
                html = render_markdown(text)
                elapsed = time.perf_counter() - started
                self.assertLess(elapsed, 1.0, f"{name} took {elapsed:.2f}s")
                self.assertTrue(html)

    def test_the_worst_inputs_just_under_the_cap_render_in_under_a_second(self) -> None:
        texts = self.cases(settings.MARKDOWN_MAX_CHARS - 20)
        self.assert_fast(texts)
        self.assertNotIn("Shown as plain text", render_markdown(texts["table rows"]))

    def test_a_kernel_source_of_zeros_renders_fast(self) -> None:
        started = time.perf_counter()
        html = render_source("let x = " + "0" * 50_000 + ";", "wgsl")
        self.assertLess(time.perf_counter() - started, 1.0)
        self.assertIn('class="mi"', html)

    def test_50000_brackets_deep_nesting_and_a_5_mb_turn(self) -> None:
        self.assert_fast(
            {
                "50,000 [": "[" * 50_000,
                "deep nesting": ">" * 50_000 + " x",
                "deep list": "".join("  " * i + "- a\n" for i in range(600)),
                "5 MB turn": "a [b](c) *d* " * 400_000,
            }
        )

    def test_oversize_text_falls_back_to_escaped_plain_text(self) -> None:
        html = render_markdown("<script>x</script>" * 400_000)
        self.assertTrue(html.startswith('<p class="render-note">Shown as plain text'))
        self.assertIn('<pre class="plain">&lt;script&gt;', html)
        self.assertNotIn("<script>", html)
