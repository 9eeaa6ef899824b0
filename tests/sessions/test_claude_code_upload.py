"""The staff upload form: same importer, streamed upload spooled to disk, the report on
the upload's page (imported before it answers here: tests/conftest.py)."""

from __future__ import annotations

from unittest.mock import patch

from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile, TemporaryUploadedFile
from django.test import override_settings

from sessions import uploads
from sessions.importers import files
from sessions.models import Session
from tests.sessions.importing import MATMUL, ImportingTestCase
from tests.sessions.transcripts.build import ANTHROPIC_KEY


def upload(data: bytes, name: str = "session.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


class UploadTestCase(ImportingTestCase):
    url = "/import/"

    def post(self, data: bytes, client=None, **fields):
        payload = {"file": upload(data), "redact": "on", **fields}
        return (client or self.client).post(self.url, payload, follow=True)

    def test_it_is_for_staff_only(self) -> None:
        r = self.client.get(self.url)
        self.assertRedirects(r, "/accounts/login/?next=/import/", fetch_redirect_response=False)
        r = self.client.post(self.url, {"file": upload(MATMUL.read_bytes())})
        self.assertEqual(r.status_code, 302)
        self.client.force_login(self.bob)
        with self.assertLogs("django.request", "WARNING"):
            self.assertEqual(self.client.get(self.url).status_code, 403)
            self.assertEqual(self.post(MATMUL.read_bytes()).status_code, 403)
        self.assertEqual(Session.objects.count(), 0)

    def test_it_needs_csrf(self) -> None:
        self.csrf_client.force_login(self.charlie)
        with self.assertLogs("django.security.csrf", "WARNING"):
            r = self.post(MATMUL.read_bytes(), client=self.csrf_client)
        self.assertEqual(r.status_code, 403)
        self.assertEqual(Session.objects.count(), 0)
        form = self.csrf_client.get(self.url)
        self.assertContains(form, 'enctype="multipart/form-data"')
        token = form.context["csrf_token"]
        r = self.post(MATMUL.read_bytes(), client=self.csrf_client, csrfmiddlewaretoken=str(token))
        self.assertEqual(r.status_code, 200)
        self.assertEqual(Session.objects.count(), 1)

    def test_a_successful_import_shows_the_report(self) -> None:
        self.client.force_login(self.charlie)
        r = self.post(MATMUL.read_bytes(), visibility="unlisted")
        self.assertContains(
            r,
            "Created session &#x27;matmul-the-dispatch-and-bounds-bugs&#x27;: 33 turns, 1 kernel, 5 kernel versions.",
        )
        self.assertContains(r, 'href="/s/matmul-the-dispatch-and-bounds-bugs/"')
        self.assertContains(r, "Redacted: 1 anthropic-key")
        self.assertContains(r, "Read 51 lines (Claude Code JSONL).")
        session = self.session()
        self.assertEqual((session.visibility, session.owner), ("unlisted", self.charlie))
        self.assertNotIn(ANTHROPIC_KEY, session.turns.get(number=3).content)

    def test_redaction_can_be_switched_off(self) -> None:
        self.client.force_login(self.charlie)
        self.client.post(self.url, {"file": upload(MATMUL.read_bytes())})  # box unticked
        self.assertIn(ANTHROPIC_KEY, self.session().turns.get(number=3).content)

    def test_bad_files_say_why(self) -> None:
        self.client.force_login(self.charlie)
        r = self.post(b"not json\n")
        self.assertContains(r, "Not a Claude Code transcript")
        self.assertContains(r, "Nothing was imported.")
        r = self.client.post(self.url, {"slug": "x"})
        self.assertContains(r, "This field is required.", status_code=400)
        self.assertEqual(Session.objects.count(), 0)

    def test_the_upload_is_streamed_to_a_temporary_file_and_spooled(self) -> None:
        self.client.force_login(self.charlie)
        seen = []
        spooled = []
        real_import, real_spool = files.import_file, uploads._spool

        def spy(stream, **options):
            seen.append(stream.name)
            return real_import(stream, **options)

        def spool(upload, path):
            spooled.append(upload)
            return real_spool(upload, path)

        with patch.object(uploads, "import_file", spy), patch.object(uploads, "_spool", spool):
            self.post(MATMUL.read_bytes())
        self.assertIsInstance(spooled[0], TemporaryUploadedFile)
        self.assertTrue(seen[0].startswith(str(settings.UPLOAD_SPOOL_DIR)))
        self.assertEqual(Session.objects.count(), 1)
        self.assertEqual(list(settings.UPLOAD_SPOOL_DIR.iterdir()), [])  # deleted once done

    @override_settings(TRANSCRIPT_MAX_BYTES=10_000, IMPORT_MAX_BYTES=10_000)
    def test_oversize_uploads_are_refused(self) -> None:
        self.client.force_login(self.charlie)
        # Over the limit, but within what the request may carry around it: read, dropped.
        r = self.post(b"x" * 20_000)
        self.assertContains(r, "larger than the import limit of 10,000 bytes", status_code=413)
        # Far over: refused on Content-Length, before the body is read.
        r = self.post(b"x" * 200_000)
        self.assertContains(r, "larger than the import limit of 10,000 bytes", status_code=413)
        self.assertEqual(Session.objects.count(), 0)
