"""Scaffolding for the importer tests: run the command, write transcripts to a temp dir."""

from __future__ import annotations

import io
import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from unittest import mock

from django.core.management import CommandError, call_command

from sessions.models import Session, Turn
from tests.base import BaseTestCase
from tests.sessions.transcripts.build import Transcript

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
MATMUL = TRANSCRIPTS / "matmul-review.jsonl"
SOFTMAX = TRANSCRIPTS / "softmax-js.jsonl"


class _Counted(io.FileIO):
    """A file that adds every byte read from it to a shared count."""

    def __init__(self, path: Path, total: list[int]) -> None:
        super().__init__(path, "r")
        self.total = total

    def readinto(self, buffer) -> int | None:
        n = super().readinto(buffer)
        self.total[0] += n or 0
        return n

    def readall(self) -> bytes:
        data = super().readall()
        self.total[0] += len(data)
        return data


@contextmanager
def bytes_read() -> Iterator[list[int]]:
    """Counts the bytes read from files opened for binary reading through pathlib: how
    much of a file the importer looked at before it refused or skipped it."""
    total = [0]
    real_open = Path.open

    def counted_open(path: Path, mode: str = "r", *args, **kwargs):
        if mode != "rb":
            return real_open(path, mode, *args, **kwargs)
        return io.BufferedReader(_Counted(path, total))

    with mock.patch.object(Path, "open", counted_open):
        yield total


class ImportingTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.tmp = Path(tempfile.mkdtemp(prefix="kernelbin-import-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def run_import(self, path: Path, *args: str) -> str:
        out = StringIO()
        call_command("import_transcript", str(path), *args, stdout=out)
        return out.getvalue()

    def import_fails(self, path: Path, *args: str) -> str:
        with self.assertRaises(CommandError) as caught:
            self.run_import(path, *args)
        message = str(caught.exception)
        self.assertIn("Nothing was imported.", message)
        return message

    def write(self, name: str, data: bytes | str | Transcript | list) -> Path:
        """A file in the temp dir from bytes, text, a Transcript, or a list of JSON lines."""
        path = self.tmp / name
        if isinstance(data, Transcript):
            data = data.lines
        if isinstance(data, list):
            data = "".join(json.dumps(line) + "\n" for line in data)
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        return path

    def session(self) -> Session:
        return Session.objects.get()

    def turns(self, session: Session | None = None) -> list[Turn]:
        session = session or self.session()
        return list(session.turns.select_related("kernel_version__kernel").order_by("number"))


def tiny(name: str = "tiny") -> Transcript:
    """A short, well-formed session: a prompt, a streamed answer with a tool call, a reply."""
    t = Transcript(name)
    t.user("How do I declare a storage buffer in WGSL?", parent=None)
    t.assistant(
        "msg_T1",
        [
            {"type": "text", "text": "Like this; let me check your file first."},
            {
                "type": "tool_use",
                "id": "toolu_T1",
                "name": "Bash",
                "input": {"command": "ls kernels"},
            },
        ],
        stop_reason="tool_use",
    )
    t.result("toolu_T1", "add.wgsl", {"stdout": "add.wgsl", "stderr": "", "interrupted": False})
    t.assistant("msg_T2", [{"type": "text", "text": "Use `var<storage, read> a: array<f32>;`."}])
    return t
