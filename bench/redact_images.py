"""Redaction of a transcript line that carries a pasted screenshot, against the scan of
that image's base64 as text (what the importer did before image data was skipped).

    .venv/bin/python bench/redact_images.py [--megabytes 1 4] [--runs 3]

Each line is a prompt with a few words and one PNG of noise (noise does not compress, so
the base64 is as long as asked). For each size it prints the median seconds of
Scrubber.learn + Scrubber.value on the line (what an import does to every line), of the
same on the line without its image, and of Scrubber.text on the base64 alone, and the
ratio of the last to the first.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from common import median_seconds, setup_django


def png_of(megabytes: float) -> str:
    from PIL import Image

    side = int((megabytes * 1024 * 1024 / 3) ** 0.5)
    out = io.BytesIO()
    Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def scrub(value: dict[str, Any]) -> None:
    """What an import does to each line: learn its secrets, then clean it."""
    from sessions.importers.redact import Scrubber

    scrubber = Scrubber()
    scrubber.learn(value)
    scrubber.value(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, nargs="+", default=[1, 4])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        setup_django(Path(scratch) / "bench.sqlite3")
        from sessions.importers.redact import Scrubber

        print("image MB | line (s) | line without image (s) | image as text (s) | ratio")
        for megabytes in args.megabytes:
            data = png_of(megabytes)
            words = {"type": "text", "text": "[Image #1] why does the kernel print this?"}
            source = {"type": "base64", "media_type": "image/png", "data": data}
            image = {"type": "image", "source": source}
            line = {"type": "user", "message": {"role": "user", "content": [words, image]}}
            bare = {"type": "user", "message": {"role": "user", "content": [words]}}

            with_image = median_seconds(partial(scrub, line), args.runs)
            without = median_seconds(partial(scrub, bare), args.runs)
            as_text = median_seconds(partial(Scrubber().text, data), args.runs)
            print(
                f"{len(data) / 1024 / 1024:8.1f} | {with_image:8.4f} | {without:22.4f} | "
                f"{as_text:17.3f} | {as_text / with_image:,.0f}x"
            )


if __name__ == "__main__":
    main()
