"""Scaffolding for the importer tests: run the command, write transcripts to a temp dir."""

from __future__ import annotations

import json
import shutil
import tempfile
from io import StringIO
from pathlib import Path

from django.core.management import CommandError, call_command

from sessions.models import Session, Turn
from tests.base import BaseTestCase
from tests.sessions.transcripts.build import Transcript

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
MATMUL = TRANSCRIPTS / "matmul-review.jsonl"
SOFTMAX = TRANSCRIPTS / "softmax-js.jsonl"


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
