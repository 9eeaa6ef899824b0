"""A staff upload of a long transcript writes a batch per transaction: another user signs
in between two batches, readers never see the session half written, and a failure on the
way leaves nothing behind. A re-import too: readers keep reading the old session until
the last batch is in, and a failure keeps the old one whole, with its forks and a
curator's choices."""

from __future__ import annotations

import json
import threading
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections
from django.test import Client, TransactionTestCase

from kernels.models import Fork
from sessions.importers import writer
from sessions.importers.batches import Batches
from sessions.importers.specs import ImportProblem
from sessions.models import Session, Turn
from sessions.programs import KernelVersion
from tests.sessions.importing import MATMUL
from tests.sessions.transcripts.build import Transcript, text

EXCHANGES = 150  # 300 turns: six batches of 50


def long_transcript(advice: str = "check the bounds") -> bytes:
    t = Transcript("long")
    for n in range(EXCHANGES):
        t.user(f"Question {n}: why is row {n} wrong?")
        t.assistant(f"msg_{n:04d}", [text(f"Answer {n}: {advice}.")])
    return "".join(json.dumps(line) + "\n" for line in t.lines).encode()


def in_another_connection(work) -> None:
    """Run work in a thread of its own, with its own database connection."""

    def run() -> None:
        try:
            work()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


class ImportBatchTests(TransactionTestCase):
    def setUp(self) -> None:
        if connection.vendor != "sqlite":
            pytest.skip("SQLite's single write lock")
        curator = User.objects.create_user("curator", password="pw-kernelbin-1", is_staff=True)
        User.objects.create_user("alice", password="pw-kernelbin-2")
        self.client.force_login(curator)

    def upload(self, data: bytes | None = None, name: str = "long.jsonl", **fields):
        upload = SimpleUploadedFile(name, long_transcript() if data is None else data)
        fields = {"file": upload, "visibility": "public", "redact": "on", **fields}
        return self.client.post("/import/", fields, follow=True)

    def test_another_user_signs_in_between_two_batches(self) -> None:
        seen: list[dict] = []
        flush = Batches.flush

        def sign_in_elsewhere() -> None:
            # A connection of its own, waiting at most 0.2 s for the write lock: had the
            # import kept its transaction open, this would be a 503.
            try:
                client = Client(raise_request_exception=False)
                r = client.post(
                    "/accounts/login/", {"username": "alice", "password": "pw-kernelbin-2"}
                )
                front = client.get("/").content.decode()
                seen.append({"status": r.status_code, "listed": "/s/long/" in front})
            finally:
                connections.close_all()

        def flush_then_sign_in(batches: Batches) -> None:
            flush(batches)
            if batches.turn_count == 100:
                thread = threading.Thread(target=sign_in_elsewhere)
                thread.start()
                thread.join()
                seen[-1]["visibility"] = Session.objects.get(slug="long").visibility

        with (
            mock.patch.object(writer, "WRITE_BATCH", 50),
            mock.patch.object(Batches, "flush", flush_then_sign_in),
            mock.patch.dict(connection.settings_dict["OPTIONS"], {"timeout": 0.2}),
        ):
            r = self.upload(slug="long")

        self.assertContains(r, "Created session &#x27;long&#x27;: 300 turns")
        # Half written, the session was private and off the front page.
        self.assertEqual(seen, [{"status": 302, "listed": False, "visibility": "private"}])
        session = Session.objects.get(slug="long")
        self.assertEqual(session.visibility, "public")
        self.assertIsNotNone(session.published_at)
        self.assertEqual(session.turns.count(), 300)
        self.assertContains(Client().get("/"), 'href="/s/long/"')

    def test_a_failure_after_some_batches_leaves_nothing(self) -> None:
        flush = Batches.flush

        def fail_at_the_third(batches: Batches) -> None:
            if batches.turn_count == 100:
                raise ImportProblem("The file breaks off here.")
            flush(batches)

        with (
            mock.patch.object(writer, "WRITE_BATCH", 50),
            mock.patch.object(Batches, "flush", fail_at_the_third),
        ):
            r = self.upload(slug="long")

        self.assertContains(r, "The file breaks off here. Nothing was imported.")
        self.assertFalse(Session.objects.exists())
        self.assertFalse(Turn.objects.exists())

    def test_a_reimport_lets_others_read_and_write_between_its_batches(self) -> None:
        self.upload(slug="long")
        seen: list[dict] = []
        flush = Batches.flush

        def read_and_sign_in() -> None:
            client = Client(raise_request_exception=False)
            page = client.get("/s/long/?page=3").content.decode()
            r = client.post("/accounts/login/", {"username": "alice", "password": "pw-kernelbin-2"})
            seen.append({"sign-in": r.status_code, "old": "check the bounds" in page})

        def flush_then_others(batches: Batches) -> None:
            flush(batches)
            if batches.turn_count == 100:
                in_another_connection(read_and_sign_in)

        with (
            mock.patch.object(writer, "WRITE_BATCH", 50),
            mock.patch.object(Batches, "flush", flush_then_others),
            mock.patch.dict(connection.settings_dict["OPTIONS"], {"timeout": 0.2}),
        ):
            r = self.upload(long_transcript("check the strides"))

        self.assertContains(r, "Updated session &#x27;long&#x27;: 300 turns")
        # Two thirds written, the re-import let the sign-in through, and readers read the
        # session as it was.
        self.assertEqual(seen, [{"sign-in": 302, "old": True}])
        self.assertEqual(list(Session.objects.values_list("slug", flat=True)), ["long"])
        self.assertEqual(Turn.objects.count(), 300)
        page = Client().get("/s/long/?page=3").content.decode()
        self.assertIn("check the strides", page)
        self.assertNotIn("check the bounds", page)


class ReimportKeepsTests(TransactionTestCase):
    """A re-import in batches keeps the versions' rows (their forks' ids), a curator's
    hidden turns and links; one that fails part way, or meets an edit of the session,
    changes nothing."""

    def setUp(self) -> None:
        curator = User.objects.create_user("curator", password="pw-kernelbin-1", is_staff=True)
        self.client.force_login(curator)
        self.assertEqual(self.upload().status_code, 200)
        self.session = Session.objects.get()
        turns = self.session.turns.order_by("number")
        reviewed = turns.exclude(kernel_version=None)
        self.version = reviewed.first().kernel_version
        self.fork = Fork.objects.create(id="f" * 26, version=self.version, source="// mine")
        # A curator hides a turn, and links another to the first version.
        hidden, relinked = turns.filter(kernel_version=None)[2], reviewed.last()
        hidden.meta = {**hidden.meta, "hidden_by_curator": True}
        hidden.hidden = True
        link = {"kernel": self.version.kernel.name, "version": self.version.number}
        relinked.meta = {**relinked.meta, "relinked_by_curator": link}
        relinked.kernel_version = self.version
        Turn.objects.bulk_update([hidden, relinked], ["meta", "hidden", "kernel_version"])
        self.hidden, self.relinked = hidden.number, relinked.number
        self.before = self.snapshot()

    def upload(self):
        fields = {"file": SimpleUploadedFile("m.jsonl", MATMUL.read_bytes()), "redact": "on"}
        return self.client.post("/import/", {**fields, "visibility": "public"}, follow=True)

    def snapshot(self) -> list:
        session = Session.objects.get(source_key=self.session.source_key)
        return [
            session.slug,
            session.visibility,
            list(session.turns.values_list("number", "content", "hidden", "kernel_version")),
            list(KernelVersion.objects.values_list("pk", "kernel__name", "number", "source")),
            list(Fork.objects.values_list("id", "version")),
        ]

    def test_a_reimport_in_batches_keeps_forks_hidden_turns_and_links(self) -> None:
        with mock.patch.object(writer, "WRITE_BATCH", 2):
            r = self.upload()

        self.assertContains(r, "their forks keep their ids and URLs")
        self.assertEqual(self.snapshot(), self.before)
        session = Session.objects.get()
        self.assertNotEqual(session.pk, self.session.pk)  # a new row in the old one's place
        self.assertTrue(session.turns.get(number=self.hidden).hidden)
        relinked = session.turns.get(number=self.relinked)
        self.assertEqual(relinked.kernel_version_id, self.version.pk)
        self.assertEqual(self.version.kernel.session_id, self.session.pk)
        self.assertEqual(KernelVersion.objects.get(pk=self.version.pk).kernel.session, session)

    def test_a_reimport_that_fails_part_way_loses_nothing(self) -> None:
        flush = Batches.flush

        def fail_at_the_fourth(batches: Batches) -> None:
            if batches.turn_count == 6:
                raise ImportProblem("The file breaks off here.")
            flush(batches)

        with (
            mock.patch.object(writer, "WRITE_BATCH", 2),
            mock.patch.object(Batches, "flush", fail_at_the_fourth),
        ):
            r = self.upload()

        self.assertContains(r, "The file breaks off here. Nothing was imported.")
        self.assertEqual(self.snapshot(), self.before)
        self.assertEqual(list(Session.objects.values_list("pk", flat=True)), [self.session.pk])
        page = Client().get(f"/s/{self.session.slug}/")
        self.assertEqual(page.status_code, 200)

    def test_a_session_edited_during_its_reimport_is_left_as_edited(self) -> None:
        flush = Batches.flush

        def edit_elsewhere() -> None:
            Session.objects.get(pk=self.session.pk).unpublish()

        def flush_then_edit(batches: Batches) -> None:
            flush(batches)
            if batches.turn_count == 4:
                in_another_connection(edit_elsewhere)

        with (
            mock.patch.object(writer, "WRITE_BATCH", 2),
            mock.patch.object(Batches, "flush", flush_then_edit),
        ):
            r = self.upload()

        self.assertContains(r, "changed while this import was written")
        after = self.snapshot()
        self.assertEqual(after[1], "private")
        self.assertEqual(after[:1] + after[2:], self.before[:1] + self.before[2:])
        self.assertEqual(Session.objects.count(), 1)
