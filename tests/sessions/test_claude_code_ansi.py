"""Terminal colours read as colours, and hook and command output keeps its lines (issue
13, point 5)."""

from __future__ import annotations

from sessions.ansi import strip, to_html
from tests.base import BaseTestCase
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text, tool_use

TEST_RUN = (
    "\x1b[1mtests\x1b[22m\n\x1b[31mFAIL\x1b[0m reduce_test\n\x1b[1;32mPASS\x1b[0m matmul_test"
)


def coloured() -> Transcript:
    t = Transcript("coloured", version="1.0.64")
    t.user("Run the kernel tests.", parent=None)
    t.assistant("msg_C1", [tool_use("toolu_C1", "Bash", command="npm test")], "tool_use")
    t.result("toolu_C1", TEST_RUN, {"stdout": TEST_RUN, "stderr": "", "interrupted": False})
    # Claude Code 1.0 wrote hook results as system lines with the terminal's bold.
    t.system(
        None,
        content="\x1b[1mStop\x1b[22m [~/.claude/hooks/notify.sh] completed successfully\nsecond line",
        level="info",
    )
    t.lines[-1].pop("subtype")
    t.user(
        "<local-command-stdout>\x1b[2mcontext: 12k tokens\x1b[22m\nmodel: opus</local-command-stdout>"
    )
    t.assistant("msg_C2", [text("One test fails: `reduce_test`.")])
    return t


class AnsiImportTestCase(ImportingTestCase):
    def test_colours_become_spans_and_lines_stay(self) -> None:
        self.run_import(self.write("coloured.jsonl", coloured()))
        bash = self.session().turns.get(meta__tool="Bash")
        self.assertIn('<pre class="ansi">', bash.html)
        self.assertIn('<span class="ansi-fg-1">FAIL</span> reduce_test\n', bash.html)
        self.assertIn('<span class="ansi-bold ansi-fg-2">PASS</span>', bash.html)
        hook = self.session().turns.get(meta__kind="system")
        self.assertIn('<span class="ansi-bold">Stop</span> [~/.claude/hooks/notify.sh]', hook.html)
        self.assertIn("completed successfully\nsecond line", hook.html)
        output = self.session().turns.get(meta__kind="command_output")
        self.assertIn('<span class="ansi-dim">context: 12k tokens</span>\nmodel: opus', output.html)
        for turn in self.turns():
            self.assertNotIn("\x1b", turn.html)
            self.assertNotIn("\x1b", turn.meta.get("summary", ""))


class AnsiTestCase(BaseTestCase):
    def test_other_sequences_are_dropped(self) -> None:
        self.assertEqual(
            to_html("\x1b]0;title\x07a\x1b[2Kb\x1b[38;5;196mc\x1b[38;2;1;2;3md\x1b[0m"),
            '<pre class="ansi"><code>abcd</code></pre>\n',
        )
        self.assertEqual(strip("\x1b[1mbold\x1b[0m <x>"), "bold <x>")

    def test_text_is_escaped_and_spans_close(self) -> None:
        self.assertEqual(
            to_html("\x1b[94m<b>&"),
            '<pre class="ansi"><code><span class="ansi-fg-12">&lt;b&gt;&amp;</span></code></pre>\n',
        )
