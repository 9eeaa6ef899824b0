"""Kernel versions rebuilt from a transcript's writes, edits, reads and pasted blocks."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.test import TransactionTestCase

from sessions.importers.claude_code.kernels import KernelHistory, Outcome
from sessions.importers.claude_code.scripts import shaders_in_script, template_strings
from sessions.programs import Kernel, KernelVersion, sha256_text
from tests.kernels.test_replay_views import finished
from tests.sessions.importing import MATMUL, SOFTMAX, ImportingTestCase, tiny
from tests.sessions.transcripts.build import (
    MATMUL_ON_DISK,
    MATMUL_PASTED,
    MATMUL_V2,
    MATMUL_V3,
    text,
    tool_use,
)

ADD = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {}\n"


class EditChainTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.out = self.run_import(MATMUL)
        self.kernel = Kernel.objects.get()
        self.versions = list(self.kernel.versions.select_related("turn").order_by("number"))
        self.turns_by_number = {t.number: t for t in self.turns()}

    def test_each_version_says_how_it_was_rebuilt(self) -> None:
        self.assertEqual(self.kernel.name, "matmul")
        self.assertEqual(self.kernel.harness, {})  # replay is a compile check
        self.assertEqual(
            [(v.number, v.meta["how"], v.turn.number) for v in self.versions],
            [
                (1, "fenced", 3),  # the learner's pasted block
                (2, "read", 6),  # the file on disk differed from the paste
                (3, "edit_original", 9),  # Edit applied to toolUseResult.originalFile
                (4, "reconstructed", 14),  # Edit without toolUseResult: on v3
                (5, "unresolved", 27),  # old_string not in what we rebuilt
            ],
        )
        sources = [v.source for v in self.versions]
        self.assertEqual(sources[0], MATMUL_PASTED)
        self.assertEqual(sources[1], MATMUL_ON_DISK)
        self.assertEqual(sources[2], MATMUL_V2)
        self.assertEqual(sources[3], MATMUL_V3)
        self.assertEqual(sources[4], MATMUL_V3)  # the best we have, and labelled so
        self.assertEqual(self.versions[3].note, "reconstructed")
        self.assertEqual(self.versions[4].note, "unresolved edit")
        self.assertEqual(self.versions[4].meta["base"], "reconstructed")
        self.assertEqual(self.versions[2].meta["tool_use_id"], "toolu_02Edit")
        self.assertEqual(
            self.versions[2].meta["file_path"], "/home/<user>/wgsl-tutor/kernels/matmul.wgsl"
        )
        for version in self.versions:
            self.assertEqual(version.sha256, sha256_text(version.source))

    def test_a_rejected_edit_is_not_a_version(self) -> None:
        rejected = self.turns_by_number[16]
        self.assertTrue(rejected.meta["rejected"])
        self.assertIsNone(rejected.kernel_version)
        self.assertFalse(any("32, 32" in v.source for v in self.versions))
        self.assertIn(
            "Failed or rejected edits, which made no version: 1 of kernel (.wgsl) files.", self.out
        )

    def test_versions_link_to_the_turn_that_made_them_and_the_review(self) -> None:
        for version in self.versions:
            self.assertEqual(version.turn.kernel_version_id, version.pk)
        # The next tutor turn after a version reviews it.
        reviews = {3: 10, 4: 15, 5: 28}
        for number, turn in reviews.items():
            self.assertEqual(self.turns_by_number[turn].kernel_version.number, number)
            self.assertEqual(self.turns_by_number[turn].role, "tutor")

    def test_the_session_page_shows_the_kernel_badges(self) -> None:
        self.client.force_login(self.charlie)
        r = self.client.get(f"/s/{self.kernel.session.slug}/")
        # How a version was rebuilt shows on the badge's tooltip.
        self.assertContains(r, 'title="Replay matmul v4: reconstructed')
        self.assertContains(r, 'title="Replay matmul v5: unresolved edit')


class TemplateStringTestCase(ImportingTestCase):
    def test_each_compute_shader_in_a_js_file_is_its_own_kernel(self) -> None:
        self.run_import(SOFTMAX)
        kernels = {k.name: k for k in Kernel.objects.all()}
        self.assertEqual(set(kernels), {"shaders-row_max", "shaders-exp_sum", "shaders-normalise"})
        self.assertEqual(kernels["shaders-exp_sum"].title, "src/shaders.js · fn exp_sum")
        counts = {name: k.versions.count() for name, k in kernels.items()}
        # Only the pass the Edit touched got a new version.
        self.assertEqual(
            counts, {"shaders-row_max": 1, "shaders-exp_sum": 2, "shaders-normalise": 2}
        )
        first = kernels["shaders-row_max"].versions.get()
        self.assertIn("@compute @workgroup_size(64)\nfn row_max(", first.source)
        self.assertTrue(first.source.startswith("\n@group(0) @binding(0) var<storage, read> x"))
        self.assertEqual(first.meta["container"], "template_string")
        self.assertEqual(first.meta["entry_point"], "row_max")
        self.assertTrue(first.meta["substituted"])  # ${WG} filled in from `const WG = 64;`
        exp2 = kernels["shaders-exp_sum"].versions.get(number=2)
        self.assertIn("exp(x[id.x] - m[id.x / 64u])", exp2.source)
        self.assertEqual(exp2.meta["how"], "edit_original")
        # The learner's pasted block continues the kernel with the same entry point.
        norm2 = kernels["shaders-normalise"].versions.get(number=2)
        self.assertEqual(norm2.meta["how"], "fenced")
        self.assertEqual(norm2.turn.role, "learner")

    def test_template_strings_are_read_like_js_does(self) -> None:
        code = (
            "const a = 'it`s';  // a ` in a comment\n"
            "/* and ` here */ const b = `one ${`nested ${x}`} \\` two`;\n"
            'const c = "`";\n'
        )
        self.assertEqual(template_strings(code), ["one ${`nested ${x}`} ` two", "nested ${x}"])
        self.assertEqual(shaders_in_script(code), [])

    def test_templates_nested_past_the_limit_are_not_read(self) -> None:
        # Two thousand levels reached Python's recursion limit: the import failed with an
        # "unexpected problem". Past the limit the rest of the file is not read.
        self.assertEqual(template_strings("`a${" * 2000 + "x" + "}`" * 2000), [])
        nested = "`a${" * 8 + "x" + "}`" * 8
        self.assertEqual(len(template_strings(nested)), 8)


class NamingTestCase(ImportingTestCase):
    def history(self) -> KernelHistory:
        return KernelHistory(cwd="/home/u/proj")

    def write_file(self, history: KernelHistory, path: str, content: str) -> list:
        return history.tool_call(
            "Write", {"file_path": path, "content": content}, Outcome(ok=True), {}
        )

    def test_file_stems_then_folders_then_numbers(self) -> None:
        history = self.history()
        names = [
            self.write_file(history, path, f"{ADD}// {k}\n")[0].kernel
            for k, path in enumerate(
                [
                    "/home/u/proj/kernels/matmul.wgsl",
                    "/home/u/proj/naive/matmul.wgsl",
                    "/home/u/proj/other/naive/matmul.wgsl",
                    "/home/u/proj/kernels/matmul.wgsl",
                    "C:\\Users\\u\\proj\\Soft Max.WGSL",
                ]
            )
        ]
        # The same content again is not a new version.
        self.assertEqual(
            self.write_file(history, "/home/u/proj/kernels/matmul.wgsl", f"{ADD}// 3\n"), []
        )
        self.assertEqual(names, ["matmul", "naive-matmul", "naive-matmul-2", "matmul", "soft-max"])

    def test_shader_names_use_the_entry_point(self) -> None:
        history = self.history()
        js = "const a = `@compute @workgroup_size(1) fn main() {}`;\nconst b = `@compute @workgroup_size(2) fn main() {}`;"
        versions = self.write_file(history, "/home/u/proj/src/app.ts", js)
        self.assertEqual([v.kernel for v in versions], ["app-main", "app-main-2"])
        self.assertEqual(versions[0].kernel_title, "src/app.ts · fn main")

    def test_learner_blocks(self) -> None:
        history = self.history()
        self.write_file(history, "/home/u/proj/kernels/add.wgsl", ADD)
        named = history.learner_text("```wgsl\n// add.wgsl\n" + ADD + "```", {})
        self.assertEqual((named[0].kernel, named[0].number), ("add", 2))
        matching = history.learner_text("```wgsl\n" + ADD.replace("64", "32") + "```", {})
        self.assertEqual((matching[0].kernel, matching[0].number), ("add", 3))
        other = (
            "@compute @workgroup_size(1) fn main() {}\n@compute @workgroup_size(1) fn other() {}"
        )
        self.assertEqual(history.learner_text(f"```wgsl\n{other}\n```", {})[0].kernel, "snippet")
        named_fn = "@compute @workgroup_size(1) fn relu() {}"
        self.assertEqual(history.learner_text(f"```wgsl\n{named_fn}\n```", {})[0].kernel, "relu")
        # No entry point: a fragment, not a kernel. Other languages are not WGSL.
        self.assertEqual(history.learner_text("```wgsl\nlet x = a[i];\n```", {}), [])
        self.assertEqual(history.learner_text(f"```js\n{named_fn}\n```", {}), [])

    def test_names_are_stable_across_imports(self) -> None:
        self.run_import(SOFTMAX)
        first = sorted(Kernel.objects.values_list("name", flat=True))
        self.run_import(SOFTMAX)
        self.assertEqual(sorted(Kernel.objects.values_list("name", flat=True)), first)


class EditRulesTestCase(ImportingTestCase):
    def test_multiedit_failed_writes_and_edits_without_a_base(self) -> None:
        path = "/home/u/proj/k.wgsl"
        t = tiny()
        t.assistant(
            "msg_K1",
            [text("Writing it."), tool_use("toolu_K1", "Write", file_path=path, content=ADD)],
            "tool_use",
        )
        t.result("toolu_K1", f"File created successfully at: {path}")
        t.assistant(
            "msg_K2",
            [
                tool_use(
                    "toolu_K2",
                    "MultiEdit",
                    file_path=path,
                    edits=[
                        {"old_string": "64", "new_string": "128"},
                        {"old_string": "{}", "new_string": "{ return; }"},
                    ],
                )
            ],
            "tool_use",
        )
        t.result("toolu_K2", "Applied 2 edits")
        t.assistant(
            "msg_K3", [tool_use("toolu_K3", "Write", file_path=path, content="broken")], "tool_use"
        )
        t.result(
            "toolu_K3",
            "<tool_use_error>File has not been read yet.</tool_use_error>",
            is_error=True,
        )
        t.assistant(
            "msg_K4",
            [
                tool_use(
                    "toolu_K4",
                    "Edit",
                    file_path="/home/u/proj/never-seen.wgsl",
                    old_string="a",
                    new_string="b",
                )
            ],
            "tool_use",
        )
        t.result("toolu_K4", "The file has been updated.")
        out = self.run_import(self.write("t.jsonl", t))
        versions = list(KernelVersion.objects.order_by("number"))
        self.assertEqual([v.meta["how"] for v in versions], ["write", "reconstructed"])
        self.assertEqual(versions[1].meta["tool"], "MultiEdit")
        self.assertIn("@workgroup_size(128)", versions[1].source)
        self.assertIn("{ return; }", versions[1].source)
        self.assertIn("No version from an edit of /home/<user>/proj/never-seen.wgsl", out)
        self.assertIn(
            "Failed or rejected edits, which made no version: 1 of kernel (.wgsl) files.", out
        )
        failed = next(t for t in self.turns() if t.meta.get("tool_use_id") == "toolu_K3")
        self.assertTrue(failed.meta["is_error"])
        self.assertIn("File has not been read yet.", failed.content)
        self.assertNotIn("tool_use_error", failed.content)


@pytest.mark.usefixtures("fresh_replay_backend")
class ImportedReplayTestCase(TransactionTestCase):
    def test_an_imported_version_replays_as_a_compile_check(self) -> None:
        call_command(
            "import_transcript", str(MATMUL), "--visibility", "public", stdout=io.StringIO()
        )
        body = finished(self.client, "/s/matmul-the-dispatch-and-bounds-bugs/turns/9/replay.json")
        self.assertEqual(body["outcome"]["status"], "no_reference")
        self.assertIn("Compiles", body["outcome"]["message"])
