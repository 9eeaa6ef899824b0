"""Replay pages of host programs: what a reader sees of a program whose WGSL does not
compile, of a teaching page's program, and of a harness's cases, uniform layout and
intermediate buffers. Real wgpu (llvmpipe here), through URLs."""

from __future__ import annotations

import re

import pytest
from django.test import TransactionTestCase

from sessions.programs import Kernel, KernelVersion
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
        # Its outputs had nothing to be compared with: shown as unchecked, not as right.
        self.assertContains(page, "out: 256 values, not checked (nothing to compare them with)")
        self.assertNotContains(page, "values right")
        self.assertContains(page, "<span>the program ")


SCALE_WGSL = """struct Params {
  n: u32,
  scale: f32,
  origin: vec3<f32>,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> hidden: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3u) {
  let i = id.x;
  if (i < params.n) {
    hidden[i] = x[i] * params.scale + params.origin.x;
    y[i] = hidden[i];
  }
}
"""

SCALE_HARNESS = {
    "buffers": {
        "params": {
            "usage": "uniform",
            "fields": {"n": 8, "scale": 2.0, "origin": [0.0, 0.0, 1.0]},
        },
        "x": {"usage": "read", "dtype": "f32", "shape": [8], "data": [0, 1, 2, 3, 4, 5, 6, 7]},
        "hidden": {"usage": "read_write", "dtype": "f32", "shape": [8]},
        "y": {"usage": "read_write", "dtype": "f32", "shape": [8], "output": True},
    },
    "passes": [{"bind": {"0": "params", "1": "x", "2": "hidden", "3": "y"}, "dispatch": [1]}],
    "reference": {"name": "double", "args": ["x"], "outputs": ["y"]},
    "report": {"show": ["hidden"]},
    "cases": {
        "ramp": {"description": "0 to 7", "buffers": {"x": {"data": [0, 1, 2, 3, 4, 5, 6, 7]}}},
        "negative": {
            "description": "the ramp below zero",
            "buffers": {"x": {"data": [0, -1, -2, -3, -4, -5, -6, -7]}},
        },
        "tripled": {
            "description": "scale 3: twice is what the reference wants",
            "buffers": {"params": {"fields": {"n": 8, "scale": 3.0, "origin": [0.0, 0.0, 1.0]}}},
        },
    },
}


class RefusedBindGroupPageTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("refused", turns=2)

    def test_a_bind_group_webgpu_refuses_is_drawn_and_nothing_is_said_of_readbacks(self) -> None:
        entry = "{ binding: 2, resource: { buffer: out } },"
        program = VECTOR_ADD.replace(entry, entry + " { binding: 3, resource: { buffer: out } },")
        program_version(self.session, ADD_WGSL, program)
        line = line_of(program, "device.createBindGroup")

        outcome = finished(self.client, "/s/refused/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "pipeline_error")
        self.assertTrue(outcome["message"].startswith(f"Line {line} (device.createBindGroup)"))
        page = self.client.get("/s/refused/turns/2/replay/").content.decode()
        self.assertIn("<h3>The bind group WebGPU refused</h3>", page)
        drawn = page[page.index('<li class="trace-group refused">') :]
        drawn = drawn[: drawn.index("</li>\n    \n  </ul>")]
        self.assertIn(f'<span class="muted small">line {line}</span>', drawn)
        bindings = re.findall(r"<code>@binding\((\d)\)</code> → <code>(\w+)</code>", drawn)
        self.assertEqual(bindings, [("0", "a"), ("1", "b"), ("2", "out"), ("3", "out")])
        self.assertIn(f'<p class="group-error">{outcome["message"]}</p>', drawn)
        # Nothing was read back, so nothing is said of what readbacks are compared with.
        self.assertNotIn("readbacks are compared", page)
        self.assertNotIn("Its readbacks", page)


class HarnessPageTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("harness", turns=2)

    def test_a_harness_run_shows_each_case_its_uniform_field_by_field_and_its_intermediate(
        self,
    ) -> None:
        kernel = Kernel.objects.create(session=self.session, name="scale", harness=SCALE_HARNESS)
        turn = self.session.turns.get(number=2)
        version = KernelVersion.objects.create(
            kernel=kernel, number=1, source=SCALE_WGSL, turn=turn
        )
        turn.kernel_version = version
        turn.save()

        outcome = finished(self.client, "/s/harness/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "mismatch")
        page = self.client.get("/s/harness/turns/2/replay/").content.decode()
        # Each case with its verdict; the pictures are of the worst.
        rows = re.findall(
            r'<th scope="row"><code>(\w+)</code>.*?<span class="status-pill status-\w+">'
            r"([^<]+)</span>",
            page,
        )
        self.assertEqual(
            rows, [("negative", "passed"), ("ramp", "passed"), ("tripled", "wrong results")]
        )
        self.assertIn("the pictures below are of case <strong>tripled</strong>", page)
        self.assertIn("with the inputs of case tripled", page)
        # struct Params { n: u32, scale: f32, origin: vec3<f32> }: origin is 16-byte
        # aligned, so 8 bytes of padding after scale, and the struct rounds up to 32.
        layout = page[page.index('<figure class="uniform-layout"') :]
        layout = layout[: layout.index("</figure>")]
        self.assertIn("As WGSL lays out <code>struct Params</code> (32 bytes)", layout)
        segments = re.findall(
            r'<g class="segment (\w+)">.*?class="field-name">([^<]*)<.*?class="field-type">'
            r'([^<]*)<.*?class="field-value">([^<]*)<',
            layout,
            re.S,
        )
        self.assertEqual(
            segments,
            [
                ("field", "n", "u32", "8"),
                ("field", "scale", "f32", "3.0"),
                ("padding", "padding", "8 bytes", ""),
                ("field", "origin", "vec3&lt;f32&gt;", "0.0, 0.0, 1.0"),
                ("padding", "padding", "4 bytes", ""),
            ],
        )
        ticks = re.findall(r'class="tick">(\d+)<', layout)
        self.assertEqual(ticks, ["0", "4", "8", "16", "28", "32"])
        # The intermediate buffer the report shows, and how it was read back.
        self.assertIn(
            "<figcaption>hidden: values (an intermediate buffer: shown, not checked)</figcaption>",
            page,
        )
        self.assertIn("read <code>hidden (read)</code> (from <code>hidden</code>)", page)


SHOWCASE = "/s/gpu-inference-from-scratch"


def pictures_of(page: str) -> list[str]:
    """The captions of a replay page's pictures and one-line summaries, in order."""
    outcome = page[page.index('<section class="outcome') :]
    outcome = outcome[: outcome.index("</section>")]
    return re.findall(
        r'<figcaption>([^<]+)</figcaption>|class="figure-summary[^"]*">([^<]+)<', outcome
    )


class ShowcaseProgramPageTests(TransactionTestCase):
    def setUp(self) -> None:
        from django.core.management import call_command

        call_command("load_showcase", verbosity=0)

    def test_a_checked_program_readback_is_drawn_as_the_harness_run_draws_it(self) -> None:
        # Lesson 7's first program: it fetch()es the weights and 100 test digits and
        # reads back probs, checked against the harness's mlp_forward.
        program = KernelVersion.objects.get(kernel__name="mnist", number=1)
        # The same kernel under the same harness, with no host program: the harness run.
        submitted = program.turn.number
        turn = program.kernel.session.turns.get(number=submitted + 1)
        harness_run = KernelVersion.objects.create(
            kernel=program.kernel,
            number=99,
            source=program.source,
            harness_override=program.harness_override,
            turn=turn,
        )
        turn.kernel_version = harness_run
        turn.save()

        by_program = finished(self.client, f"{SHOWCASE}/turns/{submitted}/replay.json")["outcome"]
        by_harness = finished(self.client, f"{SHOWCASE}/turns/{turn.number}/replay.json")["outcome"]

        self.assertEqual(by_program["status"], "mismatch")
        self.assertEqual(by_program["message"], by_harness["message"])
        self.assertEqual([o["shape"] for o in by_program["outputs"]], [[100, 10]])
        self.assertEqual(by_program["report"], by_harness["report"])
        program_page = self.client.get(f"{SHOWCASE}/turns/{submitted}/replay/").content.decode()
        harness_page = self.client.get(f"{SHOWCASE}/turns/{turn.number}/replay/").content.decode()
        self.assertEqual(pictures_of(program_page), pictures_of(harness_page))
        self.assertIn('aria-label="confusion matrix: rows are true digits', program_page)
        accuracy = by_harness["report"]["accuracy"]
        self.assertIn(f"Confusion matrix: {accuracy:.1%} of 100 digits right", program_page)
        self.assertIn('aria-label="digits and predictions"', program_page)
        # The first wrong cell is named by row and column, not by its flat index.
        self.assertIn(f"at [{by_harness['outputs'][0]['worst_index'][0]}, ", by_program["message"])
