"""Versions with a host program: they replay as programs through the pool, their pages show
the host code, its diff and the trace, their runs are keyed by the program and the session's
files, and they travel through export and import. Real wgpu (llvmpipe here), through URLs."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import TestCase, TransactionTestCase, override_settings

from kernels import jobs
from sessions.export import export_session
from sessions.importers.kernelbin import import_session
from sessions.programs import Kernel, KernelVersion, SessionFile
from tests.base import make_session
from tests.kernels.test_host_program import ADD_WGSL, VECTOR_ADD
from tests.kernels.test_replay_views import finished

FLOOR = VECTOR_ADD.replace("Math.ceil(n / 64)", "Math.floor(n / 64)")
# The vector add with `a` loaded from a session file instead of computed.
FETCHING = VECTOR_ADD.replace(
    "const a = new Float32Array(n).map((_, i) => i);",
    'const a = new Float32Array(await (await fetch("inputs/a.bin")).arrayBuffer());',
)
HARNESS = {
    "buffers": {
        "a": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
        "b": {"usage": "read", "dtype": "f32", "shape": [1000], "zeros": True},
        "out": {"usage": "read_write", "dtype": "f32", "shape": [1000], "output": True},
    },
    "passes": [{"bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [16]}],
    "reference": {"name": "add", "args": ["a", "b"], "outputs": ["out"]},
}

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


def add_program(session, programs: list[str], harness: dict | None = None) -> list[KernelVersion]:
    """A kernel "add" whose versions are these host programs, version n reviewed at turn 2n."""
    kernel = Kernel.objects.create(session=session, name="add", harness=harness or {})
    versions = []
    for number, program in enumerate(programs, start=1):
        turn = session.turns.get(number=2 * number)
        version = KernelVersion.objects.create(
            kernel=kernel, number=number, source=ADD_WGSL, host_program=program, turn=turn
        )
        turn.kernel_version = version
        turn.save()
        versions.append(version)
    return versions


class HostVersionTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("host", turns=4)

    def test_a_host_program_replays_and_its_page_shows_the_code_its_diff_and_the_trace(
        self,
    ) -> None:
        add_program(self.session, [FLOOR, VECTOR_ADD], HARNESS)
        first = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]
        self.assertEqual(first["status"], "mismatch")
        self.assertEqual(first["outputs"][0]["unwritten"], 40)
        self.assertEqual(first["check"], {"against": "reference", "name": "add", "problem": ""})
        second = finished(self.client, "/s/host/turns/4/replay.json")["outcome"]
        self.assertEqual(second["status"], "passed")
        self.assertIn("out[999] = 2997", second["program"]["console"][0]["text"])

        page = self.client.get("/s/host/turns/4/replay/")
        self.assertContains(page, "<h2>Host program</h2>", html=True)
        self.assertContains(page, "Host changes since v1")
        self.assertContains(
            page, '<span class="nb">Math</span><span class="p">.</span><span class="nx">ceil'
        )
        self.assertContains(page, "What the host did")
        self.assertContains(page, "<code>dispatchWorkgroups(16)</code> × <code>@workgroup_size(64)")
        self.assertContains(page, "compared with numpy&#x27;s add")
        # The WGSL did not change, so there is no WGSL diff.
        self.assertNotContains(page, "<h2>Changes since v1</h2>", html=True)
        bug = self.client.get("/s/host/turns/2/replay/")
        self.assertContains(bug, "960 invocations for the 1,000 elements of out")

    def test_a_host_only_fix_shows_the_host_diff_first_and_says_the_kernel_did_not_change(
        self,
    ) -> None:
        add_program(self.session, [FLOOR, VECTOR_ADD], HARNESS)
        finished(self.client, "/s/host/turns/4/replay.json")

        page = self.client.get("/s/host/turns/4/replay/").content.decode()

        self.assertIn(
            "The kernel did not change since v1; the host program did: "
            '<a href="#host-changes">the host changes</a>.',
            page,
        )
        # Next to the WGSL, the host diff; the whole program after it, folded away.
        source, host_diff = page.index("<h2>Source"), page.index('id="host-changes"')
        whole = page.index('<details class="host-whole">')
        self.assertLess(source, host_diff)
        self.assertLess(host_diff, whole)
        self.assertIn('<span class="changed">ceil</span>', page[host_diff:whole])
        self.assertIn("<summary>The whole program of v2</summary>", page[whole:])
        # The first version has no diff: its program is shown whole, open.
        first = self.client.get("/s/host/turns/2/replay/").content.decode()
        self.assertNotIn("host-whole", first)
        self.assertNotIn("did not change", first)
        self.assertIn("<h2>Host program</h2>", first)

    def test_an_earlier_version_is_compared_with_the_final_one(self) -> None:
        add_program(self.session, [FLOOR, VECTOR_ADD])
        first = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]
        self.assertEqual(first["status"], "mismatch")
        self.assertEqual(first["check"]["against"], "program")
        self.assertContains(
            self.client.get("/s/host/turns/2/replay/"), "compared with those of v2, the final"
        )
        final = finished(self.client, "/s/host/turns/4/replay.json")["outcome"]
        self.assertEqual(final["status"], "no_reference")
        self.assertContains(
            self.client.get("/s/host/turns/4/replay/"), "this is the final version of the program"
        )

    def test_a_program_fetches_a_session_file(self) -> None:
        add_program(self.session, [FETCHING], HARNESS)
        data = struct.pack("<1000f", *[0.5 * i for i in range(1000)])
        SessionFile.objects.create(session=self.session, name="inputs/a.bin", data=data)
        outcome = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]
        self.assertEqual(outcome["status"], "passed", outcome["message"])
        self.assertEqual(outcome["program"]["console"][0]["text"], "out[999] = 2497.5")

    def test_a_missing_file_fails_the_fetch_at_its_line(self) -> None:
        add_program(self.session, [FETCHING], HARNESS)
        outcome = finished(self.client, "/s/host/turns/2/replay.json")["outcome"]
        self.assertEqual(outcome["status"], "threw")
        self.assertIn("Line 4: TypeError: Failed to fetch ", outcome["message"])
        self.assertContains(
            self.client.get("/s/host/turns/2/replay/"),
            '<span class="hll"><span class="linenos"> 4</span>',
        )

    def test_the_run_key_changes_with_the_host_program_and_the_files(self) -> None:
        (version,) = add_program(self.session, [VECTOR_ADD], HARNESS)
        keyed = jobs.job_for(version)
        self.assertEqual(keyed.payload["kind"], "program")
        version.host_program = FLOOR
        version.save()
        changed = jobs.job_for(version)
        self.assertNotEqual(changed.source_sha256, keyed.source_sha256)
        SessionFile.objects.create(session=self.session, name="w.bin", data=b"\0" * 8)
        with_file = jobs.job_for(version)
        self.assertNotEqual(with_file.source_sha256, changed.source_sha256)
        self.assertIsNone(with_file.payload["files"])  # read only when the job is sent
        sent = jobs.with_files(with_file).payload
        self.assertEqual(sent["files"], {"w.bin": "AAAAAAAAAAA="})
        # Each with its sha256: a worker decodes it once and keeps it on the device.
        self.assertEqual(sent["file_shas"], {"w.bin": hashlib.sha256(b"\0" * 8).hexdigest()})
        # For the local pool's workers, the file goes by its sha256 on this machine's disk.
        folder = Path(tempfile.mkdtemp(prefix="kernelbin-files-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        with self.settings(REPLAY_FILES_DIR=folder):
            on_disk = jobs.with_files(with_file, on_disk=True).payload
        sha = hashlib.sha256(b"\0" * 8).hexdigest()
        self.assertEqual((on_disk["files"], on_disk["file_refs"]), (None, {"w.bin": sha}))
        self.assertEqual((folder / sha).read_bytes(), b"\0" * 8)
        # Sent again, the files are those the key was made of, and are not looked up.
        SessionFile.objects.filter(name="w.bin").update(sha256="0" * 64, data=b"\1" * 8)
        with self.settings(REPLAY_FILES_DIR=folder), self.assertNumQueries(0):
            again = jobs.with_files(with_file, on_disk=True).payload
        self.assertEqual(again["file_refs"], {"w.bin": sha})
        self.assertNotIn("known_files", again)
        version.host_program = ""
        version.save()
        self.assertNotIn("kind", jobs.job_for(version).payload)

    def test_export_and_import_carry_the_host_program_and_the_files(self) -> None:
        add_program(self.session, [FLOOR, VECTOR_ADD], HARNESS)
        SessionFile.objects.create(
            session=self.session, name="inputs/a.bin", data=b"\x00\x01\xff", content_type="x/y"
        )
        exported = json.loads(json.dumps(export_session(self.session)))
        exported["session"]["slug"] = "copy"
        import_session(exported)
        copy = KernelVersion.objects.get(kernel__session__slug="copy", number=1)
        self.assertEqual(copy.host_program, FLOOR)
        (file,) = SessionFile.objects.filter(session__slug="copy")
        self.assertEqual(
            (file.name, bytes(file.data), file.content_type),
            ("inputs/a.bin", b"\x00\x01\xff", "x/y"),
        )
        again = json.loads(json.dumps(export_session(copy.kernel.session)))
        again["session"]["slug"] = "host"
        self.assertEqual(again["kernels"], exported["kernels"])
        self.assertEqual(again["files"], exported["files"])


class SessionFileAdminTests(TestCase):
    def setUp(self) -> None:
        self.session = make_session("files", turns=1)
        admin = User.objects.create_superuser("root", "root@example.org", "password")
        self.client.force_login(admin)

    def upload(self, filename: str, data: bytes, **fields):
        upload = SimpleUploadedFile(filename, data, content_type="application/octet-stream")
        form = {"session": self.session.pk, "upload": upload, "name": "", "content_type": ""}
        return self.client.post("/admin/tutoring_sessions/sessionfile/add/", {**form, **fields})

    def test_staff_upload_a_file_that_is_read_only_after(self) -> None:
        r = self.upload("w1.bin", b"\x01\x02\x03\x04", name="weights/w1.bin")
        self.assertEqual(r.status_code, 302, r.content[:2000])
        file = SessionFile.objects.get()
        self.assertEqual(
            (file.name, file.size, bytes(file.data)), ("weights/w1.bin", 4, b"\x01\x02\x03\x04")
        )
        self.assertEqual(
            file.sha256, "9f64a747e1b97f131fabb6b447296c9b6f0201e79fb3c5356e6c77e89b6a806a"
        )
        change = self.client.get(f"/admin/tutoring_sessions/sessionfile/{file.pk}/change/")
        self.assertNotContains(change, 'name="upload"')
        self.assertContains(change, "9f64a747e1b97f13")

    @override_settings(SESSION_FILE_MAX_BYTES=3)
    def test_a_file_over_the_cap_is_refused(self) -> None:
        r = self.upload("w1.bin", b"\x01\x02\x03\x04")
        self.assertContains(r, "over the limit of 3 bytes")
        self.assertFalse(SessionFile.objects.exists())

    def test_a_name_a_program_cannot_fetch_is_refused(self) -> None:
        r = self.upload("w1.bin", b"\x01", name="../w1.bin")
        self.assertContains(r, "is not a file name a program can fetch")
        self.assertFalse(SessionFile.objects.exists())
