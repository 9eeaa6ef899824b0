"""Edits read as real diffs, with the words that changed marked (issue 13, point 7)."""

from __future__ import annotations

from sessions.diffs import to_html, unified
from tests.base import BaseTestCase
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import CWD, MATMUL_ON_DISK, Transcript, text, tool_use

PATH = f"{CWD}/kernels/matmul.wgsl"
LOOP = "    for (var k = 0u; k < n; k++) {\n        sum += a[id.y * n + k] * b[k * n + id.x];\n"
STRIDED = "    for (var k = 0u; k < n; k++) {\n        sum += a[id.y * n + k] * bt[id.x * n + k];\n"


def edits() -> Transcript:
    t = Transcript("edits")
    t.user("Make b's reads contiguous, and rename sum.", parent=None)
    t.assistant(
        "msg_E1",
        [tool_use("toolu_E1", "Edit", file_path=PATH, old_string=LOOP, new_string=STRIDED)],
        "tool_use",
    )
    # No toolUseResult (older versions): the diff comes from old_string → new_string.
    t.result("toolu_E1", f"The file {PATH} has been updated.")
    t.assistant(
        "msg_E2",
        [
            tool_use(
                "toolu_E2",
                "MultiEdit",
                file_path=PATH,
                edits=[
                    {"old_string": "var sum = 0.0;", "new_string": "var acc = 0.0;"},
                    {
                        "old_string": "c[id.y * n + id.x] = sum;",
                        "new_string": "c[id.y * n + id.x] = acc;",
                    },
                ],
            )
        ],
        "tool_use",
    )
    patch = [
        {
            "oldStart": 8,
            "oldLines": 3,
            "newStart": 8,
            "newLines": 3,
            "lines": [
                " fn main(@builtin(global_invocation_id) id: vec3<u32>) {",
                "-    var sum = 0.0;",
                "+    var acc = 0.0;",
                "     for (var k = 0u; k < n; k++) {",
            ],
        }
    ]
    t.result(
        "toolu_E2",
        f"Applied 2 edits to {PATH}",
        {"filePath": PATH, "originalFile": MATMUL_ON_DISK, "structuredPatch": patch},
    )
    t.assistant("msg_E3", [text("Done.")])
    return t


class EditDiffTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.run_import(self.write("edits.jsonl", edits()))
        self.edit, self.multi = self.session().turns.filter(role="tool").order_by("number")

    def test_an_edit_without_a_patch_is_diffed_from_old_to_new(self) -> None:
        self.assertIn(
            "```diff\n@@ -1,2 +1,2 @@\n     for (var k = 0u; k < n; k++) {\n"
            "-        sum += a[id.y * n + k] * b[k * n + id.x];\n"
            "+        sum += a[id.y * n + k] * bt[id.x * n + k];\n```",
            self.edit.content,
        )
        # The unchanged first line is context, not removed and added again.
        self.assertNotIn("-    for (var k", self.edit.content)
        self.assertIn(
            '<span class="changed">b</span>[<span class="changed">k</span>', self.edit.html
        )
        self.assertIn(
            '<span class="changed">bt</span>[<span class="changed">id.x</span>', self.edit.html
        )

    def test_claude_codes_own_patch_gives_line_numbers_and_context(self) -> None:
        self.assertIn("@@ -8,3 +8,3 @@\n fn main(", self.multi.content)
        self.assertIn(
            '<span class="gd">-    var <span class="changed">sum</span> = 0.0;</span>',
            self.multi.html,
        )
        self.assertIn(
            '<span class="gi">+    var <span class="changed">acc</span> = 0.0;</span>',
            self.multi.html,
        )


class DiffsTestCase(BaseTestCase):
    def test_lines_with_nothing_in_common_are_not_marked(self) -> None:
        self.assertEqual(
            to_html("-old\n+new"),
            '<pre class="highlight lang-diff"><code><span class="gd">-old</span>\n'
            '<span class="gi">+new</span>\n</code></pre>\n',
        )

    def test_unequal_runs_are_shown_whole(self) -> None:
        html = to_html(unified("a\nb\n", "a\nb2\nb3\n"))
        self.assertNotIn("changed", html)
        self.assertIn('<span class="gi">+b3</span>', html)

    def test_text_is_escaped(self) -> None:
        html = to_html("-<x> & y\n+<x> & z")
        self.assertIn("&lt;x&gt; &amp; ", html)
        self.assertNotIn("<x>", html)
