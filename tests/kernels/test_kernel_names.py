"""A kernel's name is part of its URLs: every way in (a kernelbin/1 import, a Claude Code
import, the admin, the model) keeps to the same rule, and the database holds to it."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from django.core.management import CommandError
from django.db import IntegrityError, transaction

from sessions.models import Session
from sessions.programs import Kernel
from tests.base import ADD_SOURCE, BaseTestCase, add_kernel, make_session
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text, tool_use

UNUSABLE = ["", "two words", "naïve", "a/b", "matmul\n", "x" * 61]


class ModelTestCase(BaseTestCase):
    def test_the_database_refuses_a_name_no_url_can_carry(self) -> None:
        session = make_session("demo", turns=1)
        for name in UNUSABLE[:-1]:  # (SQLite does not enforce a column's length)
            with self.subTest(name=name), self.assertRaises(IntegrityError), transaction.atomic():
                Kernel.objects.create(session=session, name=name)
        self.assertEqual(
            Kernel.objects.create(session=session, name="Tiled_v2-b").name, "Tiled_v2-b"
        )

    def test_the_model_says_why_a_name_is_unusable(self) -> None:
        for name in UNUSABLE:
            with self.subTest(name=name):
                self.assertTrue(Kernel.name_problem(name))
        self.assertEqual(Kernel.name_problem("matmul_tiled-2"), "")

    def test_names_written_before_the_rule_are_renamed_alike(self) -> None:
        migration = importlib.import_module("kernels.migrations.0007_kernel_name_is_a_slug")
        self.assertEqual(migration.usable_name("two words", set()), "two-words")
        self.assertEqual(migration.usable_name("", {"kernel"}), "kernel-2")
        self.assertEqual(migration.usable_name("???", set()), "kernel")
        self.assertEqual(Kernel.name_problem(migration.usable_name("ü" * 80, set())), "")


class AdminTestCase(BaseTestCase):
    def post(self, name: str):
        session = make_session("demo", turns=1)
        self.client.force_login(self.staff())
        return self.client.post(
            "/admin/tutoring_sessions/kernel/add/",
            {
                "session": session.pk,
                "name": name,
                "title": "",
                "harness": "{}",
                "versions-TOTAL_FORMS": "0",
                "versions-INITIAL_FORMS": "0",
                "versions-MIN_NUM_FORMS": "0",
                "versions-MAX_NUM_FORMS": "1000",
            },
        )

    def staff(self):
        from django.contrib.auth.models import User

        return User.objects.create_superuser("curator", "curator@example.org", "pw")

    def test_the_admin_refuses_a_name_with_spaces(self) -> None:
        response = self.post("two words")
        self.assertEqual(response.status_code, 200)
        self.assertContains(response, "Enter a valid “slug”")
        self.assertFalse(Kernel.objects.exists())

    def test_the_admin_refuses_an_empty_name(self) -> None:
        self.assertContains(self.post(""), "This field is required.")
        self.assertFalse(Kernel.objects.exists())

    def test_the_admin_takes_a_usable_name(self) -> None:
        self.assertEqual(self.post("matmul-tiled").status_code, 302)
        self.assertEqual(Kernel.objects.get().name, "matmul-tiled")


class KernelbinImportTestCase(ImportingTestCase):
    def export(self, name: str) -> Path:
        session = make_session("named", turns=2)
        add_kernel(session, turn=2)
        document = json.loads(self.client.get("/s/named/export.json").content)
        Session.objects.all().delete()
        document["kernels"][0]["name"] = name
        for turn in document["turns"]:
            if turn.get("kernel"):
                turn["kernel"]["name"] = name
        return self.write("named.json", json.dumps(document))

    def test_an_import_names_the_field_of_an_unusable_kernel_name(self) -> None:
        for name in UNUSABLE:
            with self.subTest(name=name), self.assertRaises(CommandError) as caught:
                self.run_import(self.export(name))
            message = str(caught.exception)
            self.assertIn(f"kernels[0].name: {name!r} is not a valid kernel name.", message)
            self.assertIn("Nothing was imported.", message)
            self.assertFalse(Session.objects.exists())

    def test_an_imported_kernel_with_a_usable_name_has_working_pages(self) -> None:
        self.run_import(self.export("Tiled_v2-b"), "--visibility", "public")
        self.assertEqual(self.client.get("/s/named/").status_code, 200)
        self.assertEqual(self.client.get("/s/named/kernels/Tiled_v2-b/").status_code, 200)


@pytest.mark.usefixtures("fresh_replay_backend")
class ClaudeCodeImportTestCase(ImportingTestCase):
    def test_kernels_named_after_odd_file_names_have_working_pages(self) -> None:
        t = Transcript("odd-names")
        t.user("Write me three kernels.", parent=None)
        paths = ["/w/My Kernel (v2).wgsl", "/w/ünïcödé.wgsl", "/w/--.wgsl", "/w/.wgsl"]
        for index, path in enumerate(paths):
            call = f"toolu_{index}"
            t.assistant(
                f"msg_{index}", [tool_use(call, "Write", file_path=path, content=ADD_SOURCE)]
            )
            t.result(
                call, f"File created successfully at: {path}", {"type": "create", "filePath": path}
            )
        t.assistant("msg_end", [text("Done.")])

        self.run_import(self.write("odd.jsonl", t), "--visibility", "public")

        session = self.session()
        names = sorted(session.kernels.values_list("name", flat=True))
        self.assertEqual(len(names), len(paths))
        for name in names:
            self.assertEqual(Kernel.name_problem(name), "", name)
        self.assertEqual(self.client.get(session.get_absolute_url()).status_code, 200)
        for turn in session.turns.filter(kernel_version__isnull=False):
            replay = f"/s/{session.slug}/turns/{turn.number}/replay/"
            self.assertEqual(self.client.get(replay).status_code, 200, replay)
        for name in names:
            self.assertEqual(self.client.get(f"/s/{session.slug}/kernels/{name}/").status_code, 200)
