"""Pictures that came with a session (a screenshot pasted into a prompt, an image a tool
returned), made safe to store and serve.

What a transcript holds is untrusted bytes that claim to be an image. Only PNG, JPEG,
GIF and WebP are read, within a size and a pixel cap, and each is re-encoded by Pillow
from its pixels alone: whatever else the file carried (EXIF with a location, comments,
a second payload after the image data) is not written back. Screenshots and anything
with transparency become PNG; photographs stay JPEG. What cannot be kept is reported,
never fatal.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

# Larger uploads are refused before decoding (base64 is 4/3 of the bytes).
MAX_BYTES = 8 * 1024 * 1024
# Larger pictures are refused before their pixels are decoded (a small file can claim
# a huge canvas: a decompression bomb).
MAX_PIXELS = 40_000_000
# What is kept is no wider or taller than this; larger ones are scaled down.
MAX_SIDE = 2560
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/png", "WEBP": "image/png"}
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg"}


@dataclass
class CleanImage:
    data: bytes
    content_type: str
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def ref(self) -> dict[str, object]:
        """What a turn's meta keeps of it (meta["images"]): enough to show it."""
        return {
            "name": f"{self.sha256}.{EXTENSIONS[self.content_type]}",
            "sha256": self.sha256,
            "type": self.content_type,
            "width": self.width,
            "height": self.height,
        }


class ImageRefused(ValueError):
    """An image that is not kept; the message says why, for the import's report."""


def from_base64(text: str) -> CleanImage:
    if len(text) > MAX_BYTES * 4 // 3 + 4:
        raise ImageRefused(f"larger than {MAX_BYTES // (1024 * 1024)} MB")
    try:
        data = base64.b64decode(text, validate=False)
    except (binascii.Error, ValueError):
        raise ImageRefused("not valid base64") from None
    return clean(data)


def clean(data: bytes) -> CleanImage:
    """The picture in `data`, re-encoded without anything but its pixels."""
    if len(data) > MAX_BYTES:
        raise ImageRefused(f"larger than {MAX_BYTES // (1024 * 1024)} MB")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(FORMATS)) as source:
                kind = source.format or ""
                width, height = source.size
                if width * height > MAX_PIXELS:
                    raise ImageRefused(f"{width}×{height} pixels, over the cap")
                source.seek(0)  # an animation: its first frame
                picture = source.convert("RGBA" if _has_alpha(source) else "RGB")
    except ImageRefused:
        raise
    except (UnidentifiedImageError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageRefused("not a PNG, JPEG, GIF or WebP image") from None
    except (OSError, ValueError, SyntaxError, EOFError) as error:
        raise ImageRefused(f"malformed ({type(error).__name__})") from None
    if max(picture.size) > MAX_SIDE:
        picture.thumbnail((MAX_SIDE, MAX_SIDE))
    content_type = FORMATS.get(kind, "image/png")
    if picture.mode == "RGBA":
        content_type = "image/png"
    out = io.BytesIO()
    if content_type == "image/jpeg":
        picture.save(out, "JPEG", quality=90)
    else:
        picture.save(out, "PNG", optimize=False)
    return CleanImage(out.getvalue(), content_type, *picture.size)


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
