"""The draw-a-digit page, through its URL, with the showcase's real classifier."""

from __future__ import annotations

import io

import numpy as np
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import TransactionTestCase, override_settings
from PIL import Image

URL = "/demo/digits/"


def png(pixels: np.ndarray, size: int = 280, format: str = "PNG") -> SimpleUploadedFile:
    image = Image.fromarray((pixels * 255).astype(np.uint8)).resize((size, size))
    buffer = io.BytesIO()
    image.save(buffer, format=format)
    return SimpleUploadedFile("drawing.png", buffer.getvalue(), content_type="image/png")


class DigitsPageTestCase(TransactionTestCase):
    def setUp(self) -> None:
        call_command("load_showcase", verbosity=0)
        folder = settings.FIXTURES_DIR / "mnist"
        self.images = np.load(folder / "test_images.npy")
        self.labels = np.load(folder / "test_labels.npy")

    def post(self, upload, json: bool = True):
        headers = {"Accept": "application/json"} if json else {}
        return self.client.post(URL, {"image": upload}, headers=headers)

    def test_it_offers_a_canvas_and_an_upload(self) -> None:
        r = self.client.get(URL)
        self.assertContains(r, "<canvas")
        self.assertContains(r, 'type="file" name="image"')
        self.assertContains(r, 'href="/s/gpu-inference-from-scratch/kernels/mnist/"')

    def test_it_classifies_real_digits_with_the_sessions_kernels(self) -> None:
        for index in (0, 1, 2):
            with self.subTest(index=index):
                r = self.post(png(self.images[index].reshape(28, 28)))
                self.assertEqual(r.status_code, 200, r.content)
                body = r.json()
                self.assertEqual(body["prediction"], self.labels[index])
                self.assertAlmostEqual(sum(body["probabilities"]), 1.0, places=4)
                self.assertIn("It reads <strong>", body["html"])
                self.assertIn("<svg", body["html"])
                self.assertIn("every probability matches numpy", body["html"])

    def test_dark_ink_on_white_and_jpeg_work_too(self) -> None:
        digit = self.images[3].reshape(28, 28)
        r = self.post(png(1 - digit, size=400, format="JPEG"))
        self.assertEqual(r.json()["prediction"], self.labels[3])

    def test_without_javascript_the_page_shows_the_answer(self) -> None:
        r = self.post(png(self.images[0].reshape(28, 28)), json=False)
        self.assertContains(r, "It reads <strong>")

    def test_bad_input_gets_a_clear_message(self) -> None:
        blank = np.zeros((28, 28))
        cases = [
            (png(blank), 400, "The canvas is empty"),
            (SimpleUploadedFile("x.png", b"hello, not a png"), 400, "not an image we can read"),
            (png(self.images[0].reshape(28, 28), size=20), 400, "between 28 and 1024 pixels"),
            (png(self.images[0].reshape(28, 28), size=1500), 400, "between 28 and 1024 pixels"),
            (None, 400, "No drawing was sent"),
        ]
        for upload, status, message in cases:
            with self.subTest(message=message):
                r = self.client.post(
                    URL, {"image": upload} if upload else {}, headers={"Accept": "application/json"}
                )
                self.assertEqual(r.status_code, status)
                self.assertIn(message, r.json()["error"])

    @override_settings(DIGITS_MAX_BYTES=1000)
    def test_a_huge_upload_is_refused(self) -> None:
        noise = np.random.default_rng(0).random((200, 200))
        r = self.post(png(noise, size=500))
        self.assertEqual(r.status_code, 413)
        self.assertIn("larger than 0 KB", r.json()["error"])

    def test_a_decompression_bomb_is_refused_before_decoding(self) -> None:
        # A tiny file that claims to be 20,000 x 20,000 pixels.
        buffer = io.BytesIO()
        Image.new("L", (20000, 20000)).save(buffer, format="PNG", optimize=True)
        r = self.post(SimpleUploadedFile("bomb.png", buffer.getvalue()))
        self.assertEqual(r.status_code, 400)
        self.assertIn("far too large in pixels", r.json()["error"])

    @override_settings(DIGITS_PER_MINUTE=1)
    def test_it_is_rate_limited(self) -> None:
        self.post(png(self.images[0].reshape(28, 28)))
        r = self.post(png(self.images[1].reshape(28, 28)))
        self.assertEqual(r.status_code, 429)
        self.assertIn("Too many drawings", r.json()["error"])

    def test_csrf_is_enforced(self) -> None:
        from django.test import Client

        r = Client(enforce_csrf_checks=True).post(
            URL, {"image": png(self.images[0].reshape(28, 28))}
        )
        self.assertEqual(r.status_code, 403)

    @override_settings(DIGITS_SESSION="not-loaded")
    def test_without_the_showcase_it_says_so(self) -> None:
        r = self.client.get(URL)
        self.assertContains(r, "not loaded on this site", status_code=503)
