"""Kernels, versions, program states, their files and session files moved from the kernels
app to the archive (tutoring_sessions 0008, kernels 0014, tutor 0005): a database made
before keeps every row, every link between them, its staff's permissions and its URLs."""

from __future__ import annotations

import json

from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import TransactionTestCase

from kernels.models import Fork, Run
from sessions.models import Turn
from sessions.programs import Blob, Kernel, KernelVersion, ProgramState, SessionFile, StateFile

BEFORE = [("tutoring_sessions", "0007_upload"), ("tutor", "0004_host_starter")]
ADD = "@compute @workgroup_size(1) fn main() {}"


class ProgramsMoveTests(TransactionTestCase):
    def make_old_rows(self, apps) -> dict[str, object]:
        """A session with a turn, a kernel version, a state and its file, an uploaded file,
        a fork, a run, and a curator allowed to change kernels, made by the models as they
        were before the move."""

        def model(label: str, name: str):
            return apps.get_model(label, name).objects

        session = model("tutoring_sessions", "Session").create(
            slug="demo", title="Demo", visibility="public"
        )
        state = model("kernels", "ProgramState").create(session=session, number=1, digest="d")
        blob = model("kernels", "Blob").create(sha256="b" * 64, size=3, data=b"abc")
        model("kernels", "StateFile").create(state=state, path="add.wgsl", blob=blob)
        turn = model("tutoring_sessions", "Turn").create(
            session=session, number=1, role="learner", content="an add kernel", state=state
        )
        kernel = model("kernels", "Kernel").create(session=session, name="add")
        version = model("kernels", "KernelVersion").create(
            kernel=kernel, number=1, source=ADD, sha256="s", turn=turn, state=state
        )
        turn.kernel_version = version
        turn.save(update_fields=["kernel_version"])
        model("kernels", "SessionFile").create(
            session=session, name="weights/w.bin", size=4, sha256="w", data=b"1234"
        )
        model("kernels", "Fork").create(id="abcdefgh2345", version=version, source=ADD + "\n")
        model("kernels", "Run").create(source_sha256="s", harness_digest="h", environment_id="e")
        # Going back put the content type under its old app label, as a database made
        # before holds it.
        kernel_type = model("contenttypes", "ContentType").get(app_label="kernels", model="kernel")
        change = model("auth", "Permission").get(codename="change_kernel")
        self.assertEqual(change.content_type_id, kernel_type.pk)
        curator = model("auth", "User").create(username="curator", is_staff=True)
        curator.user_permissions.add(change)
        return {"version": version.pk, "kernel_type": kernel_type.pk}

    def test_every_row_and_link_is_kept_and_its_content_types_follow(self) -> None:
        executor = MigrationExecutor(connection)
        old = self.make_old_rows(executor.migrate(BEFORE).apps)
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
        ContentType.objects.clear_cache()

        version = KernelVersion.objects.get()
        self.assertEqual(version.pk, old["version"])
        self.assertEqual((version.kernel.name, version.turn.number), ("add", 1))
        self.assertEqual(Turn.objects.get().kernel_version, version)
        self.assertEqual(Turn.objects.get().state, version.state)
        self.assertEqual(version.state.file_data(), {"add.wgsl": b"abc"})
        self.assertEqual(Fork.objects.get().version, version)
        self.assertEqual(SessionFile.objects.get().name, "weights/w.bin")
        self.assertEqual(
            [m.objects.count() for m in (Kernel, ProgramState, StateFile, Blob, Run)],
            [1, 1, 1, 1, 1],
        )
        # The content type moved, not a new one: permissions and the admin's log follow.
        kernel_type = ContentType.objects.get_for_model(Kernel)
        self.assertEqual(
            (kernel_type.pk, kernel_type.app_label), (old["kernel_type"], Kernel._meta.app_label)
        )
        self.assertFalse(ContentType.objects.filter(app_label="kernels", model="kernel").exists())
        self.assertTrue(
            User.objects.get(username="curator").has_perm("tutoring_sessions.change_kernel")
        )

        # Its URLs answer as they did.
        self.assertContains(self.client.get("/s/demo/kernels/add/"), "v1")
        exported = json.loads(self.client.get("/s/demo/export.json").content)
        self.assertEqual([k["name"] for k in exported["kernels"]], ["add"])
        self.assertEqual(self.client.get("/f/abcdefgh2345/card.png").status_code, 200)
