"""Staff uploads are imported off the request, as a server runs them: the upload answers
at once with its page, which shows how far the import got, then its report, or why it
failed; an upload whose process ended is said to be lost. Only staff see these pages."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from unittest import mock

from django.conf import settings
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, TransactionTestCase, override_settings

from config import processes
from sessions.importers import writer
from sessions.importers.batches import Batches
from sessions.models import Session, Upload
from sessions.programs import SessionFile
from tests.sessions.test_import_batches import long_transcript

REFRESH = 'http-equiv="refresh"'


def done(client: Client, url: str) -> str:
    """The upload's page once it no longer reloads itself."""
    give_up = time.monotonic() + 60
    while True:
        page = client.get(url).content.decode()
        if REFRESH not in page:
            return page
        assert time.monotonic() < give_up, "the upload never finished"
        time.sleep(0.05)


class BackgroundUploadTests(TransactionTestCase):
    def setUp(self) -> None:
        # As a server runs them (tests/conftest.py has them run in the request).
        self.enterContext(override_settings(UPLOADS_IN_BACKGROUND=True))
        self.curator = User.objects.create_user("curator", password="pw-1", is_staff=True)
        self.client.force_login(self.curator)

    def upload(self, data: bytes) -> str:
        fields = {"file": SimpleUploadedFile("long.jsonl", data), "slug": "long", "redact": "on"}
        r = self.client.post("/import/", fields)
        self.assertEqual(r.status_code, 303)
        return r["Location"]

    def test_the_upload_answers_before_the_import_and_its_page_follows_it(self) -> None:
        started, release = threading.Event(), threading.Event()
        flush = Batches.flush

        def held_after_the_first_batch(batches: Batches) -> None:
            flush(batches)
            if batches.turn_count == 50:
                started.set()
                release.wait(30)

        with (
            mock.patch.object(writer, "WRITE_BATCH", 50),
            mock.patch.object(Batches, "flush", held_after_the_first_batch),
        ):
            url = self.upload(long_transcript())
            self.assertTrue(started.wait(30))
            # The upload has answered; the import is under way in the background.
            page = self.client.get(url).content.decode()
            self.assertIn(REFRESH, page)
            self.assertIn("Working on it: 50 turns written.", page)
            release.set()
            page = done(self.client, url)

        self.assertIn("Created session &#x27;long&#x27;: 300 turns", page)
        self.assertIn('href="/s/long/"', page)
        self.assertEqual(Session.objects.get().turns.count(), 300)
        self.assertEqual(Upload.objects.get().state, Upload.State.DONE)

    def test_a_failed_import_says_why_on_its_page(self) -> None:
        page = done(self.client, self.upload(b"not json\n"))
        self.assertIn("Not a Claude Code transcript", page)
        self.assertIn("Nothing was imported.", page)
        self.assertFalse(Session.objects.exists())

    def test_files_are_added_in_the_background(self) -> None:
        done(self.client, self.upload(long_transcript()))
        r = self.client.post(
            "/s/long/files/", {"files": [SimpleUploadedFile("w.bin", b"\x00" * 64)]}
        )
        self.assertEqual(r.status_code, 303)
        page = done(self.client, r["Location"])
        self.assertIn("Attached 1 project file(s)", page)
        self.assertEqual(list(SessionFile.objects.values_list("name", "size")), [("w.bin", 64)])

    def test_an_upload_whose_process_ended_is_lost(self) -> None:
        gone = processes.this_process().rsplit(":", 2)[0] + ":0:999999999"
        self.assertTrue(processes.is_gone(gone))
        spool = Path(settings.UPLOAD_SPOOL_DIR) / "lost"
        spool.mkdir(parents=True)
        (spool / "main").write_bytes(b"half a transcript")
        upload = Upload.objects.create(
            kind=Upload.Kind.IMPORT,
            owner=self.curator,
            options={"name": "long.jsonl"},
            spool=str(spool),
            state=Upload.State.RUNNING,
            worker=gone,
        )
        page = done(self.client, upload.get_absolute_url())
        self.assertIn("This upload stopped", page)
        self.assertEqual(Upload.objects.get().state, Upload.State.FAILED)
        self.assertFalse(spool.exists())

    def test_only_staff_see_an_upload(self) -> None:
        done(self.client, self.upload(b"not json\n"))
        url = Upload.objects.get().get_absolute_url()
        self.assertEqual(Client().get(url).status_code, 302)
        reader = Client()
        reader.force_login(User.objects.create_user("bob", password="pw-2"))
        with self.assertLogs("django.request", "WARNING"):
            self.assertEqual(reader.get(url).status_code, 403)
