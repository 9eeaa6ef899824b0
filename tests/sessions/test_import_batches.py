"""A staff upload of a long transcript writes a batch per transaction: another user signs
in between two batches, readers never see the session half written, and a failure on the
way leaves nothing behind."""

from __future__ import annotations

import json
import threading
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, connections
from django.test import Client, TransactionTestCase

from sessions.importers import writer
from sessions.importers.batches import Batches
from sessions.importers.specs import ImportProblem
from sessions.models import Session, Turn
from tests.sessions.transcripts.build import Transcript, text

EXCHANGES = 150  # 300 turns: six batches of 50


def long_transcript() -> bytes:
    t = Transcript("long")
    for n in range(EXCHANGES):
        t.user(f"Question {n}: why is row {n} wrong?")
        t.assistant(f"msg_{n:04d}", [text(f"Answer {n}: check the bounds.")])
    return "".join(json.dumps(line) + "\n" for line in t.lines).encode()


class ImportBatchTests(TransactionTestCase):
    def setUp(self) -> None:
        if connection.vendor != "sqlite":
            pytest.skip("SQLite's single write lock")
        curator = User.objects.create_user("curator", password="pw-kernelbin-1", is_staff=True)
        User.objects.create_user("alice", password="pw-kernelbin-2")
        self.client.force_login(curator)

    def upload(self):
        upload = SimpleUploadedFile("long.jsonl", long_transcript())
        fields = {"file": upload, "slug": "long", "visibility": "public", "redact": "on"}
        return self.client.post("/import/", fields)

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
            r = self.upload()

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
            r = self.upload()

        self.assertContains(r, "The file breaks off here. Nothing was imported.", status_code=400)
        self.assertFalse(Session.objects.exists())
        self.assertFalse(Turn.objects.exists())
