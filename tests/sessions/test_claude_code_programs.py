"""A session whose kernel lives in an index.html with its host code: each version of the
program imports with it and replays as a program, with no harness written by anyone."""

from __future__ import annotations

import io
import json
import tempfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import TestCase, TransactionTestCase

from kernels.program_lines import FileLines
from sessions.importers.claude_code.scripts import html_scripts, read_program
from sessions.models import Session
from sessions.programs import Kernel
from tests.kernels.test_replay_views import finished
from tests.sessions.importing import TRANSCRIPTS, ImportingTestCase
from tests.sessions.transcripts.build import (
    CEIL,
    CWD,
    FLOOR,
    INDEXED,
    MATMUL_HTML,
    MATMUL_HTML_V3,
    SWAPPED,
    Transcript,
    text,
    tool_use,
)

MATMUL_HTML_TRANSCRIPT = TRANSCRIPTS / "matmul-html.jsonl"


class ProgramImportTestCase(ImportingTestCase):
    def test_each_version_of_the_page_carries_its_host_code(self) -> None:
        self.run_import(MATMUL_HTML_TRANSCRIPT)

        kernel = Kernel.objects.get()
        self.assertEqual((kernel.name, kernel.harness), ("index-matmul", {}))
        self.assertEqual(kernel.title, "index.html · fn matmul")
        v1, v2, v3 = kernel.versions.order_by("number")
        self.assertEqual(
            [v.meta["how"] for v in (v1, v2, v3)], ["write", "edit_original", "reconstructed"]
        )
        # The shader changes, then only the host code does.
        self.assertIn(SWAPPED, v1.source)
        self.assertIn(INDEXED, v2.source)
        self.assertEqual(v3.source, v2.source)
        self.assertIn(FLOOR, v1.host_program)
        self.assertIn(FLOOR, v2.host_program)
        self.assertIn(CEIL, v3.host_program)
        # The host program is the page's script, without the markup around it.
        self.assertTrue(v1.host_program.lstrip().startswith("const M = 20, K = 16, N = 12;"))
        self.assertNotIn("<body>", v1.host_program)
        self.assertTrue(all(v.meta["program"] for v in (v1, v2, v3)))
        self.assertEqual(v1.meta["container"], "template_string")

    def test_a_page_is_read_for_its_scripts_and_wgsl_script_tags(self) -> None:
        page = (
            '<script src="lib.js"></script>\n'
            '<script type="text/wgsl" id="shader">\n'
            "@compute @workgroup_size(1) fn fill() {}\n"
            "</script>\n"
            "<SCRIPT>const WG = 4;</SCRIPT>\n"
            "<script type=module>\n"
            "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
            "const code = `@compute @workgroup_size(${WG}) fn main() {}`;\n"
            "</script>\n"
            '<script type="application/json">{"not": "code"}</script>\n'
        )

        program = read_program("site/index.html", page)

        self.assertEqual([kind for kind, _, _ in html_scripts(page)], ["wgsl", "js", "js", "other"])
        self.assertEqual([s.entry for s in program.shaders], ["fill", "main"])
        self.assertEqual(program.shaders[0].container, "script_tag")
        # The constant comes from another script of the same page.
        self.assertEqual(program.shaders[1].source, "@compute @workgroup_size(4) fn main() {}")
        self.assertTrue(program.host.startswith("const WG = 4;\n"))
        self.assertIn("requestDevice", program.host)

    def test_only_a_whole_program_that_can_run_is_a_host_program(self) -> None:
        shaders_only = "export const code = `@compute @workgroup_size(1) fn main() {}`;"
        typed = "const d: GPUDevice = await a.requestDevice();\n" + shaders_only

        self.assertEqual(read_program("src/shaders.js", shaders_only).host, "")
        self.assertEqual(read_program("src/main.ts", typed).host, "")
        self.assertEqual(read_program("src/main.js", MATMUL_HTML).host, MATMUL_HTML)


@pytest.mark.usefixtures("fresh_replay_backend")
class ProgramReplayTestCase(TransactionTestCase):
    def test_its_replays_show_a_mismatch_then_cells_never_written_then_the_outputs(self) -> None:
        call_command(
            "import_transcript",
            str(MATMUL_HTML_TRANSCRIPT),
            "--visibility",
            "public",
            stdout=io.StringIO(),
        )
        slug = Session.objects.get().slug
        versions = list(Kernel.objects.get().versions.order_by("number"))
        turns = [v.turn.number for v in versions]

        outcomes = [
            finished(self.client, f"/s/{slug}/turns/{n}/replay.json")["outcome"] for n in turns
        ]

        wrong, unwritten, final = outcomes
        # Version 1: wrong values where it wrote, compared with the final version's.
        self.assertEqual(wrong["status"], "mismatch")
        self.assertEqual(wrong["check"]["against"], "program")
        (out,) = wrong["outputs"]
        self.assertGreater(out["bad"], out["unwritten"])
        # Version 2: right where it wrote; Math.floor(12 / 8) x Math.floor(20 / 8) = 1 x 2
        # workgroups of 8 x 8 leave 240 - 128 cells never written.
        self.assertEqual(unwritten["status"], "mismatch")
        (out,) = unwritten["outputs"]
        self.assertEqual(out["bad"], out["unwritten"])
        self.assertEqual(out["unwritten"], 20 * 12 - 8 * 16)
        self.assertIn("112 never written", unwritten["message"])
        # Version 3 is the final one: its outputs, and no verdict it cannot have.
        self.assertEqual(final["status"], "no_reference")
        self.assertEqual(final["check"]["against"], "none")
        self.assertEqual(final["outputs"][0]["count"], 240)
        self.assertIn("c[0][0] =", final["program"]["console"][0]["text"])
        dispatches = [o["program"]["trace"]["passes"][0]["dispatches"][0] for o in outcomes]
        self.assertEqual([d["workgroups"] for d in dispatches], [[1, 2, 1], [1, 2, 1], [2, 3, 1]])

        # Each page shows its dispatch, and the host diff where the host code changed.
        pages = [self.client.get(f"/s/{slug}/turns/{n}/replay/") for n in turns]
        for page, workgroups in zip(pages, ("1 × 2", "1 × 2", "2 × 3"), strict=True):
            self.assertContains(page, f"<code>dispatchWorkgroups({workgroups})</code>")
        self.assertNotContains(pages[0], "Host changes since")
        self.assertContains(pages[1], "Host changes since v1")
        page = pages[2]
        self.assertContains(page, "Host changes since v2")
        # The host diff: the dispatch line, its changed words marked.
        self.assertContains(page, '<span class="gd">-  pass.dispatchWorkgroups(Math.<span')
        self.assertContains(page, '<span class="changed">floor</span>(N / 8)')
        self.assertContains(page, '<span class="changed">ceil</span>(N / 8)')
        self.assertEqual(versions[2].host_program, _script_of(MATMUL_HTML_V3))


def _script_of(page: str) -> str:
    (script,) = [text for kind, text, _ in html_scripts(page) if kind == "js"]
    return script


# The page starts its program from the button's onclick attribute, not from its script.
ONCLICK_HTML = (
    MATMUL_HTML.replace('<script type="module">', "<script>")
    .replace("main();\n</script>", "</script>")
    .replace("<h1>C = A B</h1>", '<h1>C = A B</h1>\n<button onclick="main()">Multiply</button>')
)


def onclick_transcript(folder: Path) -> Path:
    """A transcript shaped like matmul-html.jsonl: one Write of a page whose button starts
    the program from its onclick attribute."""
    t = Transcript("onclick-html")
    path = f"{CWD}/index.html"
    t.user("Write me a page that multiplies two matrices when I press a button.", parent=None)
    t.assistant(
        "msg_41Write",
        [
            text("Here is the page: press Multiply."),
            tool_use("toolu_41Write", "Write", file_path=path, content=ONCLICK_HTML),
        ],
        stop_reason="tool_use",
    )
    t.result(
        "toolu_41Write",
        f"File created successfully at: {path}",
        {"type": "create", "filePath": path, "content": ONCLICK_HTML, "structuredPatch": []},
    )
    t.assistant("msg_42Done", [text("Open it and press the button.")])
    written = folder / "onclick-html.jsonl"
    lines = (json.dumps(line, separators=(",", ":")) for line in t.lines)
    written.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written


class AttributeHandlerTestCase(TestCase):
    def test_a_pages_attribute_handlers_follow_its_scripts_as_code_that_sets_them(self) -> None:
        page = (
            '<body onload="setup()">\n'
            '<button id="go" onclick="run(&quot;all&quot;); return false">Go</button>\n'
            "<button onclick='other()'>Other</button>\n"
            "<script>\n"
            "const note = '<button onclick=\"notMarkup()\">';\n"
            "const device = await (await navigator.gpu.requestAdapter()).requestDevice();\n"
            "</script>\n"
        )

        host = read_program("index.html", page).host

        script = _script_of(page)
        self.assertTrue(host.startswith(script))
        added = host[len(script) :]
        self.assertIn(
            "globalThis.onload = function (event) {\n  setup()\n};\n"
            'document.getElementById("go").onclick = function (event) {\n'
            '  run("all"); return false\n};\n'
            'document.querySelector("button[onclick=\\"other()\\"]").onclick = '
            "function (event) {\n  other()\n};\n",
            added,
        )
        # Text inside a script is code, not markup.
        self.assertNotIn("notMarkup", added)
        # Each line of the program is at its line of the page; a handler's at its tag's.
        lines = FileLines("index.html", read_program("index.html", page).lines)
        in_page = page.split("\n")
        for number, code in enumerate(host.split("\n"), start=1):
            shown = in_page[lines.line(number) - 1]
            if code.startswith("const"):
                self.assertEqual(shown, code)
        handler_lines = {
            lines.line(n): code for n, code in enumerate(host.split("\n"), 1) if "run(" in code
        }
        self.assertEqual(list(handler_lines), [2])
        # A page without such attributes keeps its scripts as they are.
        self.assertEqual(read_program("index.html", MATMUL_HTML).host, _script_of(MATMUL_HTML))

    def test_long_tags_and_names_are_read_without_backtracking(self) -> None:
        # An attribute name is tried only where one can start, and a tag's scan stops at
        # the next "<": a quadratic scan of these would not finish.
        page = (
            "<script>requestDevice()</script>"
            + "<b "
            + "a" * 200_000
            + ">"
            + "<i onclick" * 20_000
            + "x" * 200_000
        )

        self.assertEqual(read_program("index.html", page).host, "requestDevice()")


@pytest.mark.usefixtures("fresh_replay_backend")
class OnclickReplayTestCase(TransactionTestCase):
    def test_a_program_started_by_an_onclick_attribute_runs_as_on_a_click(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            path = onclick_transcript(Path(folder))
            call_command(
                "import_transcript", str(path), "--visibility", "public", stdout=io.StringIO()
            )
        version = Kernel.objects.get().versions.get()
        self.assertIn(
            'document.querySelector("button[onclick=\\"main()\\"]").onclick', version.host_program
        )
        slug = Session.objects.get().slug

        outcome = finished(self.client, f"/s/{slug}/turns/{version.turn.number}/replay.json")[
            "outcome"
        ]

        # It ran: one dispatch, the readback shown, the click named in the page text.
        self.assertEqual(outcome["status"], "no_reference")
        self.assertEqual(outcome["outputs"][0]["count"], 240)
        console = [line["text"] for line in outcome["program"]["console"]]
        self.assertIn('(clicked button[onclick="main()"] once, as a reader would)', console)
        self.assertTrue(any(text.startswith("c[0][0] =") for text in console))
