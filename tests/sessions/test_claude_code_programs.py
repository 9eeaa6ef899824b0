"""A session whose kernel lives in an index.html with its host code: each version of the
program imports with it and replays as a program, with no harness written by anyone."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import TransactionTestCase

from kernels.models import Kernel
from sessions.importers.claude_code.scripts import html_scripts, read_program
from sessions.models import Session
from tests.kernels.test_replay_views import finished
from tests.sessions.importing import TRANSCRIPTS, ImportingTestCase
from tests.sessions.transcripts.build import (
    CEIL,
    FLOOR,
    INDEXED,
    MATMUL_HTML,
    MATMUL_HTML_V3,
    SWAPPED,
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

        self.assertEqual([kind for kind, _ in html_scripts(page)], ["wgsl", "js", "js", "other"])
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
    (script,) = [text for kind, text in html_scripts(page) if kind == "js"]
    return script
