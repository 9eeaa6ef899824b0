import functools
from collections.abc import Callable, Mapping

from django.conf import settings
from django.test import SimpleTestCase

from sessions.markdown import render_markdown, render_source
from tests.growth import GROWTH, growth_problem


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
    """Hostile turns render in time linear in their size or fall back to escaped text;
    they never hang."""

    SHAPES = {
        "brackets": "[",
        "empty links": "[](",
        "nested quotes": ">",
        "emphasis soup": "*a",
        "backticks": "`",
        "table rows": "|x|y|\n",
        "autolinks": "<http://a",
        "deep list": "  - a\n",
    }

    @classmethod
    def shaped(cls, name: str, size: int) -> str:
        """The slowest inputs we know of for the parser, cut to size characters."""
        if name == "zeros in wgsl":  # Pygments' own worst cases: its WGSL lexer on zeros,
            return "```wgsl\n" + "0" * (size - 12) + "\n```"
        if name == "dots in ts":  # and TypeScript on dots.
            return "```ts\n" + "." * (size - 10) + "\n```"
        unit = cls.SHAPES[name]
        text = (unit * (size // len(unit) + 1))[:size]
        return "|a|b|\n|-|-|\n" + text if name == "table rows" else text

    def assert_linear(self, cases: Mapping[str, Callable[[int], str]], work, n: int) -> None:
        for name, make in cases.items():
            with self.subTest(name):
                self.assertTrue(work(make(GROWTH * n)))
                problem = growth_problem(name, work, make, n)
                self.assertFalse(problem, problem)

    def test_the_worst_inputs_up_to_the_cap_render_in_linear_time(self) -> None:
        names = [*self.SHAPES, "zeros in wgsl", "dots in ts"]
        # The largest input stays under the cap, where the parser (not the fallback) runs.
        n = (settings.MARKDOWN_MAX_CHARS - 20) // GROWTH
        cases = {name: functools.partial(self.shaped, name) for name in names}
        self.assert_linear(cases, render_markdown, n)
        table = render_markdown(self.shaped("table rows", GROWTH * n))
        self.assertNotIn("Shown as plain text", table)

    def test_a_kernel_source_of_zeros_renders_in_linear_time(self) -> None:
        def work(text: str) -> str:
            return render_source(text, "wgsl")

        cases = {"zeros": lambda n: "let x = " + "0" * n + ";"}
        self.assert_linear(cases, work, 3_200)
        self.assertIn('class="mi"', work(cases["zeros"](50_000)))

    def test_brackets_deep_nesting_and_a_5_mb_turn(self) -> None:
        cases: dict[str, Callable[[int], str]] = {
            "[": lambda n: "[" * n,
            "deep nesting": lambda n: ">" * n + " x",
            # Sixty levels deep, repeated: the size (not the depth) grows with n.
            "deep list": lambda n: "".join("  " * (i % 60) + "- a\n" for i in range(n // 64)),
            "a long turn": lambda n: "a [b](c) *d* " * (n // 13),
        }
        self.assert_linear(cases, render_markdown, 330_000)

    def test_oversize_text_falls_back_to_escaped_plain_text(self) -> None:
        html = render_markdown("<script>x</script>" * 400_000)
        self.assertTrue(html.startswith('<p class="render-note">Shown as plain text'))
        self.assertIn('<pre class="plain">&lt;script&gt;', html)
        self.assertNotIn("<script>", html)
