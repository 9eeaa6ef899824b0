"""A session's code is a program: one index.html over nine states, its weights passed
with --files, imported with no admin step. Each turn that wrote the page links to the
state it made and replays that state's own program; a kernel's timeline holds one
shader; a fork made before a re-import answers at the same URL after it."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import TransactionTestCase

from kernels.models import Fork
from kernels.program_lines import FileLines
from sessions.importers.claude_code.likeness import likeness
from sessions.models import Session, Turn
from sessions.programs import Blob, Kernel, ProgramState, SessionFile
from tests.kernels.test_replay_views import finished
from tests.sessions.importing import ImportingTestCase
from tests.sessions.test_claude_code_layout import session_with_agent
from tests.sessions.transcripts.build import CWD, Transcript, text, tool_use
from tests.sessions.transcripts.mnist_page import (
    ADD,
    MATMUL,
    MATMUL_BIAS,
    RELU,
    SOFTMAX,
    STATES,
    expected_probabilities,
    mnist_page,
    weights_folder,
)

WEIGHTS = [
    "weights/b1.bin",
    "weights/b2.bin",
    "weights/digit.bin",
    "weights/w1.bin",
    "weights/w2.bin",
]


class ProgramStateImportTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.transcript = self.write("mnist-page.jsonl", mnist_page())
        self.project = weights_folder(self.tmp / "project")

    def test_each_turn_that_wrote_the_page_links_the_state_it_made(self) -> None:
        report = self.run_import(self.transcript, "--files", str(self.project))

        session = self.session()
        states = list(session.states.order_by("number"))
        self.assertEqual([s.number for s in states], list(range(1, 10)))
        self.assertEqual({s.entry for s in states}, {"index.html"})
        # Every state holds the page as it stood then, byte for byte.
        for state, page in zip(states, STATES, strict=True):
            self.assertEqual(state.file_data(), {"index.html": page.encode()})
        writers = [t for t in self.turns(session) if t.meta.get("tool") in ("Write", "Edit")]
        self.assertEqual([t.state.number for t in writers], list(range(1, 10)))
        # The tutor's reply after each reviews the same state.
        for turn in writers:
            reply = session.turns.get(number=turn.number + 1)
            self.assertEqual((reply.role, reply.state_id), (Turn.Role.TUTOR, turn.state_id))
        # The weights folder joined the session's files under their project paths.
        self.assertEqual(sorted(session.files.values_list("name", flat=True)), WEIGHTS)
        self.assertIn("Rebuilt 9 program state(s)", report)
        self.assertIn("The programs fetch 5 file(s): weights/w1.bin", report)
        self.assertIn("Every file they fetch is there.", report)

    def test_no_kernel_timeline_mixes_two_shaders(self) -> None:
        self.run_import(self.transcript, "--files", str(self.project))

        timelines = {
            kernel.name: [v.source for v in kernel.versions.order_by("number")]
            for kernel in Kernel.objects.all()
        }
        by_shader = {
            name: {
                {ADD: "add", MATMUL: "matmul", MATMUL_BIAS: "matmul", RELU: "relu", "": ""}.get(
                    source, "softmax" if source == SOFTMAX else "?"
                )
                for source in sources
            }
            for name, sources in timelines.items()
        }
        # Four `fn main` shaders, four kernels, each with one shader's versions (matmul
        # grows a bias: the same shader's next version, a real diff); and the first page's
        # program, before it held a shader, under the page's own name, with no WGSL.
        self.assertEqual(
            by_shader,
            {
                "index": {""},
                "index-main": {"add"},
                "index-main-2": {"matmul"},
                "index-main-3": {"relu"},
                "index-main-4": {"softmax"},
            },
        )
        self.assertEqual(timelines["index-main-2"][:2], [MATMUL, MATMUL_BIAS])
        # Each state lists the shader modules its page holds then.
        modules = {
            state.number: [(m["kernel"], m["version"]) for m in state.modules]
            for state in ProgramState.objects.all()
        }
        self.assertEqual(modules[1], [])
        self.assertEqual(modules[2], [("index-main", 1)])
        self.assertEqual(
            modules[6], [("index-main-2", 2), ("index-main-3", 1), ("index-main-4", 1)]
        )
        self.assertLess(likeness(ADD, MATMUL), 0.5)
        self.assertLess(likeness(RELU, SOFTMAX), 0.5)
        self.assertGreater(likeness(MATMUL, MATMUL_BIAS), 0.5)

    def test_each_turn_opens_a_version_that_carries_its_own_program(self) -> None:
        self.run_import(self.transcript, "--files", str(self.project))

        writers = [t for t in self.turns() if t.meta.get("tool") in ("Write", "Edit")]
        # The first page holds no shader yet: its program is a version of the page's own
        # kernel, with no WGSL, so its turn replays it too.
        first = writers[0].kernel_version
        self.assertEqual((first.kernel.name, first.number, first.source), ("index", 1, ""))
        self.assertEqual(first.kernel.versions.count(), 1)
        for turn in writers:
            version = turn.kernel_version
            self.assertEqual(version.state_id, turn.state_id)
            self.assertIn("main();", version.host_program)
            page = STATES[turn.state.number - 1]
            self.assertIn(version.host_program.strip().splitlines()[-2].strip(), page)

    def test_unchanged_pages_are_stored_once(self) -> None:
        self.run_import(self.transcript, "--files", str(self.project))
        blobs = Blob.objects.count()
        self.assertEqual(blobs, len(set(STATES)))

        again = self.run_import(self.transcript, "--files", str(self.project))

        self.assertIn(
            "Changed since the last import: 0 new turn(s); 0 new kernel version(s); no "
            "version's code changed.",
            again,
        )
        self.assertEqual(Blob.objects.count(), blobs)
        self.assertEqual(ProgramState.objects.count(), 9)

    def test_the_report_names_the_files_the_programs_fetch_that_are_missing(self) -> None:
        report = self.run_import(self.transcript)

        for name in ("w1", "b1", "w2", "b2", "digit"):
            self.assertIn(
                f"Missing: weights/{name}.bin (fetched in program state(s) 7, 8, 9)", report
            )
        self.assertFalse(SessionFile.objects.exists())

        # Added later in one step: the same folder as an archive.
        archive = shutil.make_archive(str(self.tmp / "project"), "zip", self.project)
        again = self.run_import(self.transcript, "--files", archive)
        self.assertIn("Every file they fetch is there.", again)
        self.assertEqual(sorted(SessionFile.objects.values_list("name", flat=True)), WEIGHTS)


@pytest.mark.usefixtures("fresh_replay_backend")
class ProgramStateReplayTestCase(TransactionTestCase):
    def setUp(self) -> None:
        cache.clear()  # rate limit counters
        self.tmp = Path(tempfile.mkdtemp(prefix="kernelbin-states-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.transcript = self.tmp / "mnist-page.jsonl"
        self.transcript.write_text(
            "".join(json.dumps(line) + "\n" for line in mnist_page().lines), encoding="utf-8"
        )
        self.project = weights_folder(self.tmp / "project")
        self.outcomes: dict[int, dict] = {}

    def import_it(self) -> str:
        out = io.StringIO()
        call_command(
            "import_transcript",
            str(self.transcript),
            "--files",
            str(self.project),
            "--visibility",
            "public",
            stdout=out,
        )
        return out.getvalue()

    def printed(self, slug: str, number: int) -> list[str]:
        outcome = finished(self.client, f"/s/{slug}/turns/{number}/replay.json")["outcome"]
        self.outcomes[number] = outcome
        return [line["text"] for line in outcome["program"]["console"]]

    def test_each_turn_replays_its_own_program(self) -> None:
        self.import_it()
        session = Session.objects.get()
        writers = [
            t
            for t in session.turns.order_by("number")
            if t.meta.get("tool") in ("Write", "Edit") and t.kernel_version_id
        ]
        printed = {t.state.number: self.printed(session.slug, t.number) for t in writers}

        self.assertEqual(printed[1][0], "[1,2,3,4]")
        first = next(t for t in writers if t.state.number == 1)
        page = self.client.get(f"/s/{session.slug}/turns/{first.number}/replay/")
        self.assertContains(page, "The program holds no shader module yet")
        self.assertEqual(printed[2][0], "[7]")
        self.assertEqual(printed[3][0], "[58,64,139,154]")
        self.assertEqual(printed[4][0], "[0,2,0,4,0,0]")
        np.testing.assert_allclose(json.loads(printed[5][0]), [0.659, 0.242, 0.099], atol=1e-3)
        toy = json.loads(printed[6][0])
        self.assertEqual(len(toy), 2)
        self.assertAlmostEqual(sum(toy), 1.0, places=5)
        for state in (7, 8):
            probabilities = json.loads(printed[state][0])
            np.testing.assert_allclose(probabilities, expected_probabilities(), atol=1e-5)
            self.assertAlmostEqual(probabilities[7], 0.9995, places=3)
        self.assertEqual(printed[8][1], "digit 7")
        # The drawing page asks for a canvas the server does not have: it prints nothing,
        # and the rejection nobody awaited names getContext and its line.
        self.assertEqual(printed[9], [])
        drawing = next(t for t in writers if t.state.number == 9)
        self.assertRegex(
            json.dumps(self.outcomes[drawing.number]),
            r"index\.html:\d+: Uncaught \(in promise\).*getContext",
        )
        # Its replay page names the line as a browser's console does: the line of
        # index.html where the call sits, not of the page's scripts joined.
        html = drawing.state.file_data()["index.html"].decode()
        (line,) = [n for n, text in enumerate(html.split("\n"), 1) if ".getContext(" in text]
        replay_page = self.client.get(f"/s/{session.slug}/turns/{drawing.number}/replay/")
        self.assertContains(replay_page, f"index.html:{line}: Uncaught (in promise)")
        joined = self.outcomes[drawing.number]["program"]["error"]["line"]
        self.assertNotEqual(joined, line)
        self.assertNotContains(replay_page, f"Line {joined}:")
        # A turn's replay page shows the program's shader modules, this one marked.
        toy = next(t for t in writers if t.state.number == 6)
        page = self.client.get(f"/s/{session.slug}/turns/{toy.number}/replay/")
        self.assertContains(page, "as the project stood after this turn (state 6: index.html)")
        self.assertContains(
            page,
            f'<a href="/s/{session.slug}/kernels/index-main-2/" aria-current="true">'
            "<code>index-main-2</code> v2</a>",
            html=True,
        )
        self.assertContains(page, "<code>index-main-4</code> v1", html=True)

    def test_a_fork_made_before_a_re_import_answers_at_the_same_url_after_it(self) -> None:
        self.import_it()
        session = Session.objects.get()
        turns = session.turns.filter(kernel_version__isnull=False).order_by("number")
        turn = next(t for t in turns if "sum += a[" in t.kernel_version.source)  # matmul
        version = turn.kernel_version
        edited = version.source.replace("sum += a[", "sum -= a[")
        r = self.client.post(
            f"/s/{session.slug}/turns/{turn.number}/fork/",
            {"source": edited, "host": version.host_program},
        )
        self.assertEqual(r.status_code, 303, r.content[:300])
        fork_url = r["Location"]
        finished(self.client, fork_url + "replay.json")

        # A curator hides a turn and links another to a different version.
        Turn.objects.filter(pk=session.turns.get(number=1).pk).update(
            hidden=True, meta={**session.turns.get(number=1).meta, "hidden_by_curator": True}
        )
        report = self.import_it()

        self.assertEqual(self.client.get(fork_url).status_code, 200)
        self.assertEqual(Fork.objects.get().version_id, version.pk)
        self.assertIn("forks keep their ids and URLs", report)
        session = Session.objects.get()
        self.assertTrue(session.turns.get(number=1).hidden)
        # The same edit again is the same fork.
        again = self.client.post(
            f"/s/{session.slug}/turns/{turn.number}/fork/",
            {"source": edited, "host": version.host_program},
        )
        self.assertEqual(again["Location"], fork_url)


class ProjectFilesUploadTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.staff = User.objects.create_user("cara", password="pw", is_staff=True)
        self.transcript = self.write("mnist-page.jsonl", mnist_page()).read_bytes()
        self.project = weights_folder(self.tmp / "project")

    def test_staff_upload_a_transcript_with_an_archive_of_its_project(self) -> None:
        self.client.force_login(self.staff)
        archive = Path(shutil.make_archive(str(self.tmp / "project"), "gztar", self.project))

        r = self.client.post(
            "/import/",
            {
                "file": SimpleUploadedFile("mnist-page.jsonl", self.transcript),
                "redact": "on",
                "files": [SimpleUploadedFile("project.tar.gz", archive.read_bytes())],
            },
            follow=True,
        )

        self.assertEqual(r.status_code, 200, r.content[:500])
        self.assertContains(r, "Every file they fetch is there.")
        self.assertEqual(sorted(SessionFile.objects.values_list("name", flat=True)), WEIGHTS)

    def test_staff_add_files_to_a_session_later_in_one_step(self) -> None:
        self.client.force_login(self.staff)
        self.client.post(
            "/import/", {"file": SimpleUploadedFile("mnist-page.jsonl", self.transcript)}
        )
        session = Session.objects.get()
        url = f"/s/{session.slug}/files/"
        self.assertContains(self.client.get(url), "No files yet.")

        weights = sorted((self.project / "weights").iterdir())
        r = self.client.post(
            url,
            {
                "folder": "weights",
                "files": [SimpleUploadedFile(p.name, p.read_bytes()) for p in weights[:-1]],
            },
            follow=True,
        )

        self.assertContains(r, "Attached 4 project file(s)")
        self.assertContains(r, "Missing: weights/w2.bin (fetched in program state(s) 7, 8, 9)")
        r = self.client.post(
            url,
            {
                "folder": "weights",
                "files": [SimpleUploadedFile("w2.bin", weights[-1].read_bytes())],
            },
            follow=True,
        )
        self.assertContains(r, "Every file they fetch is there.")
        self.assertEqual(sorted(session.files.values_list("name", flat=True)), WEIGHTS)

    def test_only_staff_add_files_and_a_bad_archive_adds_nothing(self) -> None:
        self.run_import(self.write("t.jsonl", self.transcript.decode()))
        url = f"/s/{Session.objects.get().slug}/files/"
        self.assertEqual(self.client.get(url).status_code, 302)
        self.client.force_login(User.objects.create_user("dan", password="pw"))
        self.assertEqual(self.client.get(url).status_code, 403)
        self.client.force_login(self.staff)

        bad = [SimpleUploadedFile("w.zip", b"PK\x03\x04 not a zip")]
        r = self.client.post(url, {"files": bad}, follow=True)

        self.assertContains(r, "is not a zip or tar archive that can be read")
        self.assertContains(r, "Nothing was added.")
        self.assertFalse(SessionFile.objects.exists())


class PublishedReimportTestCase(ImportingTestCase):
    def test_a_published_session_re_imports_with_its_sub_agent_without_renumbering(
        self,
    ) -> None:
        main, agent = session_with_agent()
        path = self.write("with-agent.jsonl", main)
        self.run_import(path, "--visibility", "public")
        before = {t.meta["source_id"]: t.number for t in self.turns()}
        main_line = [(t.number, t.content) for t in self.turns()]

        (self.tmp / "with-agent" / "subagents").mkdir(parents=True)
        self.write("with-agent/subagents/agent-a1b2c3d.jsonl", agent)
        report = self.run_import(path)

        turns = self.turns()
        after = {t.meta["source_id"]: t.number for t in turns}
        # Every turn keeps its number; the sub-agent's turns come after the last.
        self.assertEqual({k: after[k] for k in before}, before)
        new = sorted(n for k, n in after.items() if k not in before)
        self.assertTrue(new)
        self.assertEqual(new, list(range(max(before.values()) + 1, len(turns) + 1)))
        for number, content in main_line:
            self.assertTrue(self.session().turns.get(number=number).content.startswith(content))
        self.assertTrue(all(t.meta.get("agent") for t in turns if t.number in new))
        # The call names its sub-agent's turns by the numbers they were given.
        call = next(t for t in self.turns() if t.meta.get("subagent"))
        self.assertIn(f"turns {new[0]}–{new[-1]}, below", call.content)
        self.assertIn("Updated session", report)
        self.assertIn(f"Changed since the last import: {len(new)} new turn(s);", report)


class ProgramStateExportTestCase(ImportingTestCase):
    def test_the_json_export_carries_the_states_and_re_imports_losslessly(self) -> None:
        transcript = self.write("mnist-page.jsonl", mnist_page())
        self.run_import(
            transcript, "--files", str(weights_folder(self.tmp / "p")), "--visibility", "public"
        )
        slug = self.session().slug
        before = self.client.get(f"/s/{slug}/export.json").json()
        self.assertEqual(len(before["states"]), 9)
        # Each page's content once, as text (an import from outside redacts it).
        self.assertEqual(len(before["contents"]), len(set(STATES)))
        self.assertTrue(all("text" in content for content in before["contents"]))

        Session.objects.all().delete()
        out = self.run_import(self.write("export.json", json.dumps(before)))

        self.assertIn("Rebuilt 9 program state(s)", out)
        self.assertIn("Every file they fetch is there.", out)
        self.assertEqual(self.client.get(f"/s/{slug}/export.json").json(), before)
        writers = [t for t in self.turns() if t.meta.get("tool") in ("Write", "Edit")]
        self.assertEqual([t.state.number for t in writers], list(range(1, 10)))

    def test_a_state_whose_content_is_missing_is_refused(self) -> None:
        transcript = self.write("mnist-page.jsonl", mnist_page())
        self.run_import(transcript, "--visibility", "public")
        data = self.client.get(f"/s/{self.session().slug}/export.json").json()
        data["contents"] = data["contents"][1:]
        Session.objects.all().delete()

        message = self.import_fails(self.write("export.json", json.dumps(data)))

        self.assertIn("states[", message)
        self.assertIn("its content is not in the file", message)
        self.assertFalse(Session.objects.exists())

    def test_files_given_with_an_export_join_its_own(self) -> None:
        self.run_import(self.write("mnist-page.jsonl", mnist_page()), "--visibility", "public")
        data = self.client.get(f"/s/{self.session().slug}/export.json").json()
        self.assertEqual(data["files"], [])

        out = self.run_import(
            self.write("export.json", json.dumps(data)),
            "--files",
            str(weights_folder(self.tmp / "p")),
        )

        self.assertIn("Attached 5 project file(s)", out)
        self.assertIn("Every file they fetch is there.", out)


class CuratorRelinkTestCase(ImportingTestCase):
    def test_a_curators_relink_in_the_admin_survives_a_re_import(self) -> None:
        transcript = self.write("mnist-page.jsonl", mnist_page())
        self.run_import(transcript, "--visibility", "public")
        session = self.session()
        # The tutor's reply after the matmul page: the curator links it to the add kernel.
        reply = session.turns.get(state__number=3, role=Turn.Role.TUTOR)
        add = Kernel.objects.get(name="index-main").versions.get(number=1)
        self.assertNotEqual(reply.kernel_version_id, add.pk)
        self.client.force_login(User.objects.create_superuser("cur", password="pw"))
        r = self.client.post(
            f"/admin/tutoring_sessions/turn/{reply.pk}/change/",
            {
                "role": reply.role,
                "content": reply.content,
                "kernel_version": add.pk,
                "state": reply.state_id,
                "timestamp_0": "",
                "timestamp_1": "",
                "meta": json.dumps(reply.meta),
            },
        )
        self.assertEqual(r.status_code, 302, r.content[:2000])

        report = self.run_import(transcript, "--files", str(weights_folder(self.tmp / "p")))

        session = self.session()
        relinked = session.turns.get(number=reply.number)
        self.assertEqual(relinked.kernel_version_id, add.pk)
        self.assertEqual(
            relinked.meta["relinked_by_curator"], {"kernel": "index-main", "version": 1}
        )
        self.assertIn("Kept the curator's links of 1 turn(s) to versions.", report)


class ReimportChangesTestCase(ImportingTestCase):
    def test_the_report_lists_the_versions_whose_code_a_re_import_changed(self) -> None:
        self.run_import(self.write("mnist-page.jsonl", mnist_page()))
        add = Kernel.objects.get(name="index-main").versions.get(number=1)
        edited = json.dumps(mnist_page().lines).replace("a[i] + b[i];", "b[i] + a[i];")

        report = self.run_import(self.write("edited.jsonl", json.loads(edited)))

        self.assertIn("1 version(s) with other code (index-main v1).", report)
        add.refresh_from_db()  # the same row, so its forks stay
        self.assertIn("b[i] + a[i]", add.source)


class ProgramStateAdminTestCase(ImportingTestCase):
    def test_staff_see_a_state_and_its_files_in_the_admin(self) -> None:
        self.run_import(self.write("mnist-page.jsonl", mnist_page()))
        state = ProgramState.objects.get(number=6)
        self.client.force_login(User.objects.create_superuser("ann", password="pw"))

        page = self.client.get(f"/admin/tutoring_sessions/programstate/{state.pk}/change/")

        self.assertContains(page, "index.html")
        self.assertContains(page, f"{state.files.get().blob_id[:12]} (")
        self.assertNotContains(page, "deletelink")
        self.assertEqual(
            self.client.get("/admin/tutoring_sessions/programstate/add/").status_code, 403
        )


TRIPLE = """@group(0) @binding(0) var<storage, read_write> data: array<f32>;

@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
  data[id.x] = data[id.x] * 3.0;
}
"""
DOUBLE = TRIPLE.replace("* 3.0", "* 2.0")
MAIN_JS = """async function main() {
  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  const code = await (await fetch("shaders/double.wgsl")).text();
  const module = device.createShaderModule({ code });
  const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
  const data = new Float32Array([1, 2, 3]);
  const work = device.createBuffer({ size: 12, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(work, 0, data);
  const read = device.createBuffer({ size: 12, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const bindGroup = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [{ binding: 0, resource: { buffer: work } }] });
  const encoder = device.createCommandEncoder();
  const pass = encoder.beginComputePass();
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, bindGroup);
  pass.dispatchWorkgroups(3);
  pass.end();
  encoder.copyBufferToBuffer(work, 0, read, 0, 12);
  device.queue.submit([encoder.finish()]);
  await read.mapAsync(GPUMapMode.READ);
  console.log(JSON.stringify(Array.from(new Float32Array(read.getMappedRange()))));
}
main();
"""


def fetched_shader() -> Transcript:
    """A script that fetch()es its shader from a .wgsl file of the project."""
    t = Transcript("fetched-shader")
    wgsl, script = f"{CWD}/shaders/double.wgsl", f"{CWD}/main.js"
    t.user("Double three numbers; keep the shader in its own file.", parent=None)
    for n, (path, content) in enumerate(((wgsl, TRIPLE), (script, MAIN_JS)), start=1):
        t.assistant(
            f"msg_S{n}",
            [tool_use(f"toolu_S{n}", "Write", file_path=path, content=content)],
            "tool_use",
        )
        t.result(f"toolu_S{n}", "ok", {"type": "create", "filePath": path, "content": content})
    t.assistant("msg_S3", [text("Run main.js.")])
    t.user("It triples them.")
    t.assistant(
        "msg_S4",
        [tool_use("toolu_S4", "Edit", file_path=wgsl, old_string="* 3.0", new_string="* 2.0")],
        "tool_use",
    )
    t.result(
        "toolu_S4",
        "ok",
        {"filePath": wgsl, "oldString": "* 3.0", "newString": "* 2.0", "originalFile": TRIPLE},
    )
    t.assistant("msg_S5", [text("Fixed.")])
    return t


@pytest.mark.usefixtures("fresh_replay_backend")
class FetchedShaderTestCase(TransactionTestCase):
    def test_a_shader_the_program_fetches_replays_in_it_and_a_fork_of_it_runs_the_edit(
        self,
    ) -> None:
        cache.clear()
        tmp = Path(tempfile.mkdtemp(prefix="kernelbin-fetched-"))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = tmp / "fetched.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in fetched_shader().lines))
        report = io.StringIO()
        call_command("import_transcript", str(path), "--visibility", "public", stdout=report)
        self.assertIn("The programs fetch 1 file(s): shaders/double.wgsl.", report.getvalue())
        self.assertIn("Every file they fetch is there.", report.getvalue())
        session = Session.objects.get()
        kernel = Kernel.objects.get()
        # The shader alone, then the script that fetches it, then the fix.
        versions = list(kernel.versions.order_by("number"))
        self.assertEqual(
            [v.meta["how"] for v in versions], ["write", "host_changed", "edit_original"]
        )
        self.assertEqual(versions[0].host_program, "")
        self.assertEqual([v.state.number for v in versions], [1, 2, 3])

        def printed(url: str) -> list[str]:
            outcome = finished(self.client, url)["outcome"]
            return [line["text"] for line in outcome["program"]["console"]]

        turns = {v.number: v.turns.order_by("number").first().number for v in versions[1:]}
        self.assertEqual(printed(f"/s/{session.slug}/turns/{turns[2]}/replay.json"), ["[3,6,9]"])
        self.assertEqual(printed(f"/s/{session.slug}/turns/{turns[3]}/replay.json"), ["[2,4,6]"])

        r = self.client.post(
            f"/s/{session.slug}/turns/{turns[3]}/fork/",
            {"source": DOUBLE.replace("* 2.0", "* 5.0"), "host": MAIN_JS},
        )
        self.assertEqual(r.status_code, 303, r.content[:300])
        self.assertEqual(printed(r["Location"] + "replay.json"), ["[5,10,15]"])


TWO_SCRIPTS = """<!doctype html>
<html>
<body>
<h1>Two scripts</h1>
<script>
const shader = `@compute @workgroup_size(1)
fn main() {}
`;
function helper() {
  return 2;
}
</script>
<p>Between them, markup the joined program does not hold.</p>

<script type="module">
async function main() {
  const device = await (await navigator.gpu.requestAdapter()).requestDevice();
  console.log("helper says", helper());
  throw new Error("broken on purpose");
}
main();
</script>
</body>
</html>
"""


def two_scripts() -> Transcript:
    t = Transcript("two-scripts")
    path = f"{CWD}/index.html"
    t.user("A page with two scripts.", parent=None)
    t.assistant(
        "msg_T1", [tool_use("toolu_T1", "Write", file_path=path, content=TWO_SCRIPTS)], "tool_use"
    )
    t.result("toolu_T1", "ok", {"type": "create", "filePath": path, "content": TWO_SCRIPTS})
    t.assistant("msg_T2", [text("Open index.html.")])
    return t


@pytest.mark.usefixtures("fresh_replay_backend")
class PageLinesTestCase(TransactionTestCase):
    def test_an_error_in_a_pages_second_script_names_its_line_in_the_page(self) -> None:
        cache.clear()
        tmp = Path(tempfile.mkdtemp(prefix="kernelbin-lines-"))
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = tmp / "two-scripts.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in two_scripts().lines))
        call_command("import_transcript", str(path), "--visibility", "public", stdout=io.StringIO())
        session = Session.objects.get()
        turn = session.turns.exclude(kernel_version=None).order_by("number").first()
        assert turn is not None
        url = f"/s/{session.slug}/turns/{turn.number}/replay/"
        program = finished(self.client, url.replace("/replay/", "/replay.json"))["outcome"]
        program = program["program"]

        def page_line(needle: str) -> int:
            (found,) = [n for n, s in enumerate(TWO_SCRIPTS.split("\n"), 1) if needle in s]
            return found

        thrown, logged = page_line("throw new Error"), page_line('console.log("helper')
        joined = program["error"]["line"]
        self.assertNotEqual(joined, thrown)  # the engine's line is of the scripts joined
        # replay.json names the page's line as the page does, and maps any other.
        answer = finished(self.client, url.replace("/replay/", "/replay.json"))
        self.assertEqual(answer["outcome"]["program"]["error"]["where"], f"index.html:{thrown}")
        self.assertIn(f"index.html:{thrown}: Uncaught", answer["outcome"]["message"])
        self.assertEqual(answer["lines"]["file"], "index.html")
        logged_at = next(c["line"] for c in program["console"] if "helper" in c["text"])
        lines = FileLines("index.html", tuple(map(tuple, answer["lines"]["starts"])))
        self.assertEqual(lines.line(logged_at), logged)
        page = self.client.get(url)
        self.assertContains(
            page, f"index.html:{thrown}: Uncaught (in promise) Error: broken on purpose"
        )
        self.assertContains(page, f'<span class="muted">index.html:{logged}: </span>')
        self.assertNotContains(page, f"Line {joined}:")
        # The host code's margin numbers the page's lines; its marked line is the error's.
        self.assertContains(page, f'<span class="hll"><span class="linenos">{thrown}</span>')

        # A fork runs the edited program: its lines are its own.
        host = turn.kernel_version.host_program
        r = self.client.post(
            f"/s/{session.slug}/turns/{turn.number}/fork/",
            {"source": turn.kernel_version.source, "host": host},
        )
        self.assertEqual(r.status_code, 303, r.content[:300])
        finished(self.client, r["Location"] + "replay.json")
        fork_page = self.client.get(r["Location"])
        self.assertContains(fork_page, f"Line {joined}: Uncaught (in promise) Error")
        self.assertNotContains(fork_page, "index.html:")
