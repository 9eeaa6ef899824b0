"""Replay pages of host programs: what a reader sees of a program whose WGSL does not
compile, of a teaching page's program, and of a harness's cases, uniform layout and
intermediate buffers. Real wgpu (llvmpipe here), through URLs."""

from __future__ import annotations

import pytest
from django.test import TransactionTestCase

from kernels.models import Kernel, KernelVersion
from tests.base import make_session
from tests.kernels.test_host_page import TEACHING_PAGE
from tests.kernels.test_host_program import ADD_WGSL, VECTOR_ADD, line_of
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

BROKEN_LINE = "out[id.x] = a[id.x] + b[id.x];"
BROKEN_WGSL = ADD_WGSL.replace(BROKEN_LINE, "out[id.x] = a[id.x] + ;")
BROKEN = VECTOR_ADD.replace(BROKEN_LINE, "out[id.x] = a[id.x] + ;")


def program_version(session, source: str, program: str, turn: int = 2) -> KernelVersion:
    kernel, _ = Kernel.objects.get_or_create(session=session, name="add")
    reviewed = session.turns.get(number=turn)
    version = KernelVersion.objects.create(
        kernel=kernel,
        number=kernel.versions.count() + 1,
        source=source,
        host_program=program,
        turn=reviewed,
    )
    reviewed.kernel_version = version
    reviewed.save()
    return version


def marked(line: int) -> str:
    """How a rendered source marks a line (sessions.markdown.render_source)."""
    return f'<span class="hll"><span class="linenos">{line:>2}</span>'


class CompileErrorPageTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("host", turns=2)

    def test_wgsl_that_does_not_compile_names_the_create_shader_module_line_and_the_wgsl_line(
        self,
    ) -> None:
        program_version(self.session, BROKEN_WGSL, BROKEN)
        host_line = line_of(BROKEN, "device.createShaderModule")
        wgsl_line = line_of(BROKEN_WGSL, "a[id.x] + ;")

        outcome = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "compile_error")
        self.assertEqual(
            outcome["message"],
            f"Line {host_line} (device.createShaderModule): The shader module does not compile "
            f'at WGSL line {wgsl_line}, column 27: expected expression, found ";"',
        )
        self.assertEqual(
            (outcome["compile"]["kernel"], outcome["compile"]["line"]), ("self", wgsl_line)
        )
        error = outcome["program"]["error"]
        self.assertEqual((error["line"], error["call"]), (host_line, "device.createShaderModule"))
        page = self.client.get("/s/host/turns/2/replay/")
        self.assertContains(
            page,
            f"In the WGSL of this version's kernel, which line {host_line} of the host program "
            "hands to <code>device.createShaderModule</code>:",
        )
        self.assertContains(page, "^ expected expression")
        # Both halves are marked: the WGSL line in the source, the call in the host code.
        self.assertContains(page, marked(wgsl_line), count=1)
        self.assertContains(page, marked(host_line), count=1)

    def test_a_second_module_that_does_not_compile_is_named_by_its_label(self) -> None:
        program = VECTOR_ADD.replace(
            "const module = device.createShaderModule({ code: `",
            "const scale = device.createShaderModule({ label: 'scale', code: 'fn main( {' });\n"
            "const module = device.createShaderModule({ code: `",
        )
        program_version(self.session, ADD_WGSL, program)

        outcome = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "compile_error")
        self.assertEqual(outcome["compile"]["kernel"], "scale")
        self.assertIn(
            "The shader module 'scale' does not compile at WGSL line 1", outcome["message"]
        )
        page = self.client.get("/s/host/turns/2/replay/")
        line = line_of(program, "label: 'scale'")
        self.assertContains(
            page,
            f"In the WGSL of shader module <code>scale</code>, which line {line} of the host "
            "program hands to",
        )
        self.assertContains(page, marked(line), count=1)


class TeachingPageTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("page", turns=2)

    def test_the_text_a_page_program_writes_is_shown_with_its_console(self) -> None:
        program_version(self.session, ADD_WGSL, TEACHING_PAGE)

        outcome = finished(self.client, "/s/page/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "no_reference", outcome["message"])
        page = self.client.get("/s/page/turns/2/replay/")
        self.assertContains(page, "and page text, the text the program wrote into its page")
        self.assertContains(page, '<span class="console-tag">page</span> #status: Done.')
        self.assertContains(
            page, '<span class="console-tag">page</span> (clicked #run once, as a reader would)'
        )
