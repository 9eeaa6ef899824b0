"""Pictures in transcripts (issue 26): a screenshot pasted into a prompt or returned by a
tool is stored re-encoded, shown inline with a link to the full image, served as an image
only, carried by both exports; an oversized or malformed one is noted, not fatal."""

from __future__ import annotations

import base64
import io
import json
from unittest import mock

from django.urls import reverse
from PIL import Image, PngImagePlugin

from sessions import images
from sessions.models import Session, SessionImage
from tests.sessions.importing import ImportingTestCase
from tests.sessions.transcripts.build import Transcript, text, tool_use

SECRET_COMMENT = "taken at 52.2053N 0.1218E by alice"


def screenshot(width: int = 64, height: int = 40) -> str:
    """A PNG with a text chunk of metadata, as base64."""
    picture = Image.new("RGB", (width, height), (200, 30, 30))
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", SECRET_COMMENT)
    out = io.BytesIO()
    picture.save(out, "PNG", pnginfo=info)
    return base64.b64encode(out.getvalue()).decode()


def photo_with_exif() -> str:
    picture = Image.new("RGB", (50, 30), (10, 120, 200))
    exif = Image.Exif()
    exif[0x010E] = SECRET_COMMENT  # ImageDescription
    out = io.BytesIO()
    picture.save(out, "JPEG", exif=exif.tobytes())
    return base64.b64encode(out.getvalue()).decode()


def image_block(data: str, media: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}


SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>')


def pasted() -> Transcript:
    t = Transcript("pasted")
    t.user([text("[Image #1] this error, why?"), image_block(screenshot())], parent=None)
    t.assistant("msg_I1", [tool_use("toolu_I1", "Read", file_path="/srv/app/shot.jpg")], "tool_use")
    t.result("toolu_I1", [image_block(photo_with_exif(), "image/jpeg")])
    t.assistant("msg_I2", [text("The red box is the overflow.")])
    t.user([image_block(base64.b64encode(b"not an image at all").decode())])
    t.assistant("msg_I3", [text("That one did not come through.")])
    t.user([text("and this?"), image_block(SVG.decode(), "image/svg+xml")])
    t.assistant("msg_I4", [text("Nor that.")])
    return t


class ImagesTestCase(ImportingTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.out = self.run_import(self.write("pasted.jsonl", pasted()))
        self.imported = self.session()
        self.turns_ = self.turns()

    def page(self) -> str:
        return self.client.get(
            reverse("sessions:detail", args=[self.imported.slug])
        ).content.decode()

    def test_a_pasted_screenshot_is_stored_and_shown_inline(self) -> None:
        prompt = self.turns_[0]
        self.assertEqual(prompt.content, "[Image #1] this error, why?")
        (ref,) = prompt.meta["images"]
        self.assertEqual((ref["width"], ref["height"], ref["type"]), (64, 40, "image/png"))
        self.imported.publish()
        page = self.page()
        url = f"/s/{self.imported.slug}/images/{ref['sha256']}.png"
        turn = page.split('id="turn-1"')[1].split("</article>")[0]
        # Inline, and a click opens it at full size (no script needed).
        self.assertIn(f'<a href="http://testserver{url}"', turn)
        self.assertIn(f'<img src="http://testserver{url}" width="64" height="40"', turn)
        # An embed of the turn shows it too, from our origin.
        embed = self.client.get(
            reverse("sessions:embed", args=[self.imported.slug]), {"from": 1, "to": 1}
        )
        self.assertContains(embed, f'<img src="http://testserver{url}"')
        self.assertIn("Kept 2 image(s), re-encoded, shown in their turns.", self.out)

    def test_what_is_stored_is_re_encoded_without_metadata(self) -> None:
        stored = {image.content_type: image for image in SessionImage.objects.all()}
        self.assertEqual(set(stored), {"image/png", "image/jpeg"})
        for image in stored.values():
            data = bytes(image.data)
            self.assertNotIn(b"52.2053N", data)
            reopened = Image.open(io.BytesIO(data))
            self.assertNotIn("Comment", reopened.info)
            self.assertFalse(dict(reopened.getexif()))
        # The tool's image shows under its call.
        call = self.turns_[1]
        self.assertEqual(call.meta["images"][0]["type"], "image/jpeg")

    def test_malformed_and_unsupported_images_are_noted_not_fatal(self) -> None:
        bad, svg = self.turns_[3], self.turns_[5]
        self.assertIn("*[An image was not kept: not a PNG, JPEG, GIF or WebP image.]*", bad.content)
        self.assertIn("and this?", svg.content)
        self.assertIn("not kept", svg.content)
        self.assertNotIn("images", svg.meta)
        self.assertIn("Images not kept (a note in each turn says so): 2 not a PNG", self.out)

    def test_the_image_is_served_as_an_image_only_and_private_stays_private(self) -> None:
        name = self.turns_[0].meta["images"][0]["name"]
        url = reverse("sessions:image", args=[self.imported.slug, name])
        self.assertEqual(self.client.get(url).status_code, 404)  # private: not to strangers
        self.imported.publish()
        response = self.client.get(url)
        self.assertEqual(response.status_code, 200)
        self.assertEqual(response["Content-Type"], "image/png")
        self.assertEqual(response["X-Content-Type-Options"], "nosniff")
        self.assertIn("sandbox", response["Content-Security-Policy"])
        self.assertEqual(response["X-Frame-Options"], "DENY")
        self.assertTrue(response["Cache-Control"].startswith("private"))
        Image.open(io.BytesIO(response.content)).verify()
        for wrong in (name.replace(".png", ".jpg"), "0" * 64 + ".png", "x.png"):
            self.assertEqual(
                self.client.get(
                    reverse("sessions:image", args=[self.imported.slug, wrong])
                ).status_code,
                404,
            )

    def test_an_oversized_image_is_noted(self) -> None:
        with mock.patch.object(images, "MAX_BYTES", 100):
            out = self.run_import(self.write("big.jsonl", pasted()), "--slug", "big")
        self.assertIn("larger than", out)
        prompt = Session.objects.get(slug="big").turns.get(number=1)
        self.assertIn("An image was not kept: larger than", prompt.content)

    def test_a_huge_canvas_is_refused_before_its_pixels_are_read(self) -> None:
        out = io.BytesIO()
        Image.new("1", (10_000, 5_000)).save(out, "PNG")
        with self.assertRaisesMessage(images.ImageRefused, "over the cap"):
            images.clean(out.getvalue())

    def test_both_exports_carry_the_images_and_json_re_imports_them(self) -> None:
        self.imported.publish()
        data = self.client.get(reverse("sessions:export_json", args=[self.imported.slug])).content
        document = json.loads(data)
        self.assertEqual(len(document["images"]), 2)
        markdown = self.client.get(reverse("sessions:export_md", args=[self.imported.slug]))
        name = self.turns_[0].meta["images"][0]["name"]
        self.assertIn(
            f"[Image 1 (64×40)](/s/{self.imported.slug}/images/{name})", markdown.content.decode()
        )
        self.run_import(self.write("copy.json", data.decode()), "--slug", "copy")
        copy = Session.objects.get(slug="copy")
        self.assertEqual(copy.images.count(), 2)
        copied = copy.turns.get(number=1).meta["images"][0]
        self.assertEqual(copied, self.turns_[0].meta["images"][0])
        self.assertEqual(
            bytes(copy.images.get(sha256=copied["sha256"]).data),
            bytes(self.imported.images.get(sha256=copied["sha256"]).data),
        )
