"""Where a version's program lines are in its file (kernels/program_lines.py): a map an
uploaded export may carry malformed is not read, and the outcome's words follow it."""

from __future__ import annotations

from typing import Any

from django.test import SimpleTestCase

from kernels.program_lines import FileLines, file_lines, in_file
from sessions.programs import KernelVersion


def version(host_lines: object, pk: int | None = 1) -> KernelVersion:
    return KernelVersion(pk=pk, host_program="main();", meta={"host_lines": host_lines})


class FileLinesTestCase(SimpleTestCase):
    def test_a_map_is_read_from_a_saved_versions_meta(self) -> None:
        lines = file_lines(version({"file": "index.html", "starts": [[1, 9], [4, 20]]}))

        self.assertEqual(lines, FileLines("index.html", ((1, 9), (4, 20))))
        assert lines is not None
        self.assertEqual([lines.line(n) for n in (1, 3, 4, 6)], [9, 11, 20, 22])
        self.assertEqual(lines.where(5), "index.html:21")

    def test_a_malformed_map_or_a_fork_shows_the_programs_own_lines(self) -> None:
        malformed = [
            None,
            "index.html",
            {"file": "index.html"},
            {"file": "", "starts": [[1, 1]]},
            {"file": "x" * 201, "starts": [[1, 1]]},
            {"file": "index.html", "starts": []},
            {"file": "index.html", "starts": [[1]]},
            {"file": "index.html", "starts": [[0, 1]]},
            {"file": "index.html", "starts": [["1", 1]]},
            {"file": "index.html", "starts": [[1, 2.5]]},
        ]
        for meta in malformed:
            with self.subTest(meta=meta):
                self.assertIsNone(file_lines(version(meta)))
        # A fork is an unsaved version: the edited program is what ran.
        self.assertIsNone(file_lines(version({"file": "index.html", "starts": [[1, 9]]}, None)))

    def test_the_engines_words_name_the_files_line_and_the_programs_are_kept(self) -> None:
        lines = FileLines("index.html", ((1, 100),))
        outcome: Any = {
            "status": "threw",
            "message": "Line 3: Error: line 3 of 3 at WGSL line 3",
            "program": {
                "error": {"line": 3, "message": "The program was still running at line 3."},
                "console": [{"level": "log", "text": "hi", "line": 2}, {"text": "x", "line": 0}],
            },
        }

        shown = in_file(outcome, lines)

        assert shown is not None
        self.assertEqual(shown["message"], "index.html:102: Error: line 3 of 3 at WGSL line 3")
        self.assertEqual(
            shown["program"]["error"]["message"],
            "The program was still running at index.html:102.",
        )
        self.assertEqual(shown["program"]["error"]["line"], 3)  # the editors' line
        self.assertEqual(shown["program"]["console"][0]["where"], "index.html:101")
        self.assertNotIn("where", shown["program"]["console"][1])
        self.assertEqual(outcome["message"], "Line 3: Error: line 3 of 3 at WGSL line 3")
