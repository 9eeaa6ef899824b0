"""A learner's prompt reads as they typed it (issue 13, point 6): pasted logs keep their
line breaks, `#` lines stay lines, and Markdown counts only where it is clearly meant."""

from __future__ import annotations

from sessions.markdown import render_typed
from tests.base import BaseTestCase
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text

PASTED = """My kernel fails to compile. The log:

# naga 0.20 output
error: expected ';', found '}'
    ┌─ kernels/softmax.wgsl:12:5
    │
 12 │     }
    │     ^ expected ';'

- I tried adding one
- still fails, see *below*

```wgsl
@compute @workgroup_size(64)
fn main() { x[0] = 1.0 }
```
"""


class TypedPromptTestCase(ImportingTestCase):
    def test_a_pasted_log_keeps_its_lines_and_its_hash_lines(self) -> None:
        t = Transcript("typed")
        t.user(PASTED, parent=None)
        t.assistant("msg_Y1", [text("# Why it fails\n\nThe statement needs a `;`.")])
        self.run_import(self.write("typed.jsonl", t))
        learner, tutor = self.turns()
        self.assertEqual(learner.content, PASTED.strip())
        self.assertTrue(learner.meta["typed"])
        # Typed text: no heading, no list, lines and indentation as they were.
        self.assertNotIn("<h1>", learner.html)
        self.assertNotIn("<li>", learner.html)
        self.assertIn(
            '<p class="typed">My kernel fails to compile. The log:\n\n# naga 0.20', learner.html
        )
        self.assertIn("    ┌─ kernels/softmax.wgsl:12:5\n", learner.html)
        self.assertIn("- still fails, see <em>below</em>", learner.html)
        # A fenced block is code, as meant.
        self.assertIn('<pre class="highlight lang-wgsl">', learner.html)
        # The tutor's reply is Markdown.
        self.assertIn("<h1>Why it fails</h1>", tutor.html)

    def test_a_curators_edit_keeps_it_typed(self) -> None:
        t = Transcript("typed")
        t.user("# one\n# two", parent=None)
        t.assistant("msg_Y2", [text("ok")])
        self.run_import(self.write("typed.jsonl", t))
        learner = self.turns()[0]
        learner.content = "# three\n# four"
        learner.save()
        self.assertEqual(learner.html, '<p class="typed"># three\n# four</p>\n')


class RenderTypedTestCase(BaseTestCase):
    def test_code_spans_links_and_escapes(self) -> None:
        html = render_typed("run `ls <dir>` then see https://gpuweb.github.io/gpuweb/wgsl/.")
        self.assertEqual(
            html,
            '<p class="typed">run <code>ls &lt;dir&gt;</code> then see <a '
            'href="https://gpuweb.github.io/gpuweb/wgsl/" rel="nofollow noopener noreferrer">'
            "https://gpuweb.github.io/gpuweb/wgsl/</a>.</p>\n",
        )

    def test_unclosed_marks_stay_as_typed(self) -> None:
        self.assertEqual(
            render_typed("a `b and 2*3*4 and ```c"),
            '<p class="typed">a `b and 2*3*4 and ```c</p>\n',
        )

    def test_raw_html_is_text(self) -> None:
        html = render_typed('<script>alert(1)</script><img src=x onerror="y">')
        self.assertNotIn("<script", html)
        self.assertNotIn("<img", html)
        self.assertIn("&lt;script&gt;", html)
