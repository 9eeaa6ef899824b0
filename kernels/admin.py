from __future__ import annotations

import mimetypes

from django import forms
from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest

from kernels.engine.harness import HarnessError, parse_harness
from kernels.models import (
    Fork,
    Kernel,
    KernelVersion,
    ProgramState,
    Run,
    SessionFile,
    StateFile,
    check_file_name,
)


def _clean_harness(value: dict | None) -> dict | None:
    if value:
        try:
            parse_harness(value)
        except HarnessError as error:
            raise forms.ValidationError(str(error)) from None
    return value


def code_editor(language: str) -> forms.Textarea:
    """A textarea the code editor takes over (static/src/editor.js; the change form loads
    it: templates/admin/kernels/kernel/change_form.html)."""
    return forms.Textarea(attrs={"data-editor": language, "rows": 16, "spellcheck": "false"})


class KernelForm(forms.ModelForm):
    class Meta:
        model = Kernel
        fields = ["session", "name", "title", "harness"]
        widgets = {"harness": code_editor("json")}

    def clean_harness(self) -> dict:
        return _clean_harness(self.cleaned_data["harness"]) or {}


class KernelVersionForm(forms.ModelForm):
    class Meta:
        model = KernelVersion
        fields = [
            "number",
            "note",
            "expected_status",
            "turn",
            "source",
            "host_program",
            "harness_override",
        ]
        widgets = {
            "source": code_editor("wgsl"),
            "host_program": code_editor("javascript"),
            "harness_override": code_editor("json"),
        }

    def clean_harness_override(self) -> dict | None:
        return _clean_harness(self.cleaned_data["harness_override"])


class KernelVersionInline(admin.StackedInline):
    model = KernelVersion
    form = KernelVersionForm  # its Meta.fields are the inline's fields too
    extra = 0
    raw_id_fields = ("turn",)


@admin.register(Kernel)
class KernelAdmin(admin.ModelAdmin):
    form = KernelForm
    list_display = ("name", "session", "title")
    search_fields = ("name", "session__slug", "title")
    raw_id_fields = ("session",)
    inlines = (KernelVersionInline,)


class SessionFileForm(forms.ModelForm):
    upload = forms.FileField(help_text="Weights, test data: what the session's programs fetch().")

    class Meta:
        model = SessionFile
        fields = ["session", "name", "content_type"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["name"].required = False
        self.fields["name"].help_text = "The name a program fetch()es it by (default: the file's)."
        limit = settings.SESSION_FILE_MAX_BYTES
        self.fields["upload"].help_text += f" At most {limit:,} bytes."

    def clean(self) -> dict:
        cleaned = super().clean()
        upload = cleaned.get("upload")
        if upload is None:
            return cleaned
        limit = settings.SESSION_FILE_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"The file is {upload.size:,} bytes, over the limit of {limit:,} bytes."
            )
        name = cleaned.get("name") or upload.name
        try:
            cleaned["name"] = self.instance.name = check_file_name(name)
        except ValueError as error:
            self.add_error("name", str(error))
            return cleaned
        session = cleaned.get("session")
        if session is not None and session.files.filter(name=name).exists():
            self.add_error("name", f"This session already has a file named {name!r}.")
        guessed = upload.content_type or mimetypes.guess_type(name)[0] or ""
        cleaned["content_type"] = cleaned.get("content_type") or guessed
        self.instance.data = upload.read()
        return cleaned


@admin.register(SessionFile)
class SessionFileAdmin(admin.ModelAdmin):
    """Uploaded once, then read-only: stored runs are keyed by the file's sha256."""

    form = SessionFileForm
    list_display = ("name", "session", "size", "content_type", "created")
    search_fields = ("name", "session__slug")
    raw_id_fields = ("session",)
    readonly_fields = ("session", "name", "content_type", "size", "sha256", "created")

    def get_fields(self, request: HttpRequest, obj: SessionFile | None = None):
        if obj is None:
            return ("session", "upload", "name", "content_type")
        return self.readonly_fields

    def get_form(self, request: HttpRequest, obj: SessionFile | None = None, **kwargs):
        # Only a new file is uploaded; a stored one is shown, never edited.
        if obj is not None:
            kwargs["form"] = forms.ModelForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: SessionFile | None = None):
        return self.readonly_fields if obj is not None else ()

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).defer("data").select_related("session")


@admin.register(Fork)
class ForkAdmin(admin.ModelAdmin):
    """Readers' forks are public text written by anyone: curators read and delete them."""

    list_display = ("id", "version", "created")
    search_fields = ("id", "version__kernel__session__slug")
    readonly_fields = ("id", "version", "source", "host_program", "created")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("pk", "state", "status", "adapter", "created", "finished")
    list_filter = ("state", "status", "adapter")
    search_fields = ("source_sha256", "harness_digest")
    readonly_fields = [field.name for field in Run._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False


class StateFileInline(admin.TabularInline):
    model = StateFile
    fields = ("path", "blob")
    readonly_fields = ("path", "blob")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: ProgramState | None = None) -> bool:
        return False


@admin.register(ProgramState)
class ProgramStateAdmin(admin.ModelAdmin):
    """The learner's project after each turn that changed it, as the importer rebuilt it:
    read-only here (a re-import rebuilds it; a turn's link to it is set on the turn)."""

    list_display = ("session", "number", "entry", "kind")
    list_filter = ("kind",)
    search_fields = ("session__slug", "entry")
    fields = ("session", "number", "kind", "entry", "digest", "modules")
    readonly_fields = fields
    inlines = (StateFileInline,)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ProgramState | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ProgramState | None = None) -> bool:
        return False
