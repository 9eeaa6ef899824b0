from __future__ import annotations

from typing import Any

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import SkipFile, TemporaryFileUploadHandler
from django.http import HttpRequest

from sessions.models import Session


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class ProjectFilesField(forms.FileField):
    """Any number of files (or one zip or tar archive): a project's files."""

    widget = MultipleFileInput

    def clean(self, data: Any, initial: Any = None) -> list[UploadedFile]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)] if data else []


class ProjectFilesForm(forms.Form):
    # Django's form metaclass takes declared fields off the class, so form.files stays
    # the request's files: the name clashes only for the type checker.
    files = ProjectFilesField(  # type: ignore[assignment]
        required=False,
        help_text="The project's other files its programs fetch (weights, data): one zip "
        "or tar archive of the project's folder, or the files themselves.",
    )
    folder = forms.CharField(
        max_length=100,
        required=False,
        help_text="The folder in the project the files sit in (weights puts w1.bin at "
        "weights/w1.bin); leave empty for an archive or for files at the root.",
    )


class ImportForm(ProjectFilesForm):
    file = forms.FileField(
        help_text="A Claude Code transcript (.jsonl, from ~/.claude/projects/…) or a "
        "kernelbin/1 export (.json)."
    )
    title = forms.CharField(
        max_length=200, required=False, help_text="Leave empty to use the transcript's title."
    )
    slug = forms.SlugField(
        max_length=80,
        required=False,
        help_text="Leave empty to derive one (a re-import keeps the slug it has).",
    )
    visibility = forms.ChoiceField(
        choices=[("", "Keep (new sessions are private)"), *Session.Visibility.choices],
        required=False,
    )
    redact = forms.BooleanField(
        required=False,
        initial=True,
        label="Redact secrets, e-mail addresses and home-directory names",
        help_text="API keys and tokens, passwords in URLs, private keys, e-mail addresses, "
        "/home/<user>/ paths.",
    )

    field_order = ["file", "title", "slug", "visibility", "redact", "files", "folder"]


class CappedUploadHandler(TemporaryFileUploadHandler):
    """Streams an upload to a temporary file on disk, never into memory, and gives up
    on a file once it passes the limit (the rest of the request is read and dropped)."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0
        self.too_big = False

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self.received += len(raw_data)
        if self.received > self.limit:
            self.too_big = True
            self.file.close()
            raise SkipFile()
        return super().receive_data_chunk(raw_data, start)
