from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from kernels.engine.harness import HarnessError, parse_harness
from sessions.importers.batches import CURATED, RELINKED
from sessions.models import Session, SessionQuerySet, Tag, Turn
from sessions.programs import (
    Kernel,
    KernelVersion,
    ProgramState,
    SessionFile,
    StateFile,
    check_file_name,
)


class TurnInline(admin.StackedInline[Turn, Session]):
    model = Turn
    extra = 0
    fields = (
        "number",
        "role",
        "hidden",
        "content",
        "kernel_version",
        "state",
        "timestamp",
        "meta",
    )
    raw_id_fields = ("kernel_version", "state")
    show_change_link = True

    def get_readonly_fields(  # type: ignore[override]  # an inline is given its parent
        self, request: HttpRequest, obj: Session | None = None
    ) -> tuple[str, ...]:
        # Embeds and permalinks point at published turn numbers.
        return ("number",) if obj and obj.is_published else ()

    def has_delete_permission(  # type: ignore[override]  # an inline is given its parent
        self, request: HttpRequest, obj: Session | None = None
    ) -> bool:
        return not (obj and obj.is_published) and super().has_delete_permission(request, obj)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin[Session]):
    list_display = (
        "title",
        "slug",
        "visibility",
        "source",
        "turn_count",
        "created",
        "published_at",
        "featured",
    )
    list_filter = ("visibility", "source", "featured", "tags")
    search_fields = ("title", "slug", "summary", "source_key")
    prepopulated_fields = {"slug": ("title",)}
    filter_horizontal = ("tags",)
    readonly_fields = ("published_at", "updated")
    raw_id_fields = ("owner",)
    actions = ("publish_public", "publish_unlisted", "unpublish")
    inlines = (TurnInline,)

    def get_queryset(self, request: HttpRequest) -> SessionQuerySet:
        # Session.objects' queryset, which django-stubs types as a plain QuerySet.
        return cast(SessionQuerySet, super().get_queryset(request)).with_turn_count()

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        for turn_form in formset.forms:
            if "hidden" in turn_form.changed_data:
                _record_curated(turn_form.instance)
            if "kernel_version" in turn_form.changed_data:
                _record_relink(turn_form.instance)
        super().save_formset(request, form, formset, change)

    @admin.display(ordering="turn_count", description="turns")
    def turn_count(self, session: Session) -> int:
        # Annotated by get_queryset (SessionQuerySet.with_turn_count).
        return int(session.turn_count)  # type: ignore[attr-defined]

    def get_readonly_fields(
        self, request: HttpRequest, obj: Session | None = None
    ) -> list[str] | tuple[str, ...]:
        fields = super().get_readonly_fields(request, obj)
        return (*fields, "slug") if obj and obj.is_published else fields

    def get_prepopulated_fields(
        self, request: HttpRequest, obj: Session | None = None
    ) -> dict[str, Sequence[str]]:
        # A published slug is read-only: embeds in the wild use it.
        return {} if obj and obj.is_published else self.prepopulated_fields

    @admin.action(description="Publish as public")
    def publish_public(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        for session in queryset:
            session.publish(Session.Visibility.PUBLIC)
        self.message_user(request, f"Published {queryset.count()} session(s).", messages.SUCCESS)

    @admin.action(description="Publish as unlisted (link only)")
    def publish_unlisted(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        for session in queryset:
            session.publish(Session.Visibility.UNLISTED)
        self.message_user(request, f"Published {queryset.count()} session(s) as unlisted.")

    @admin.action(description="Unpublish (make private)")
    def unpublish(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        for session in queryset:
            session.unpublish()
        self.message_user(request, f"{queryset.count()} session(s) are private now.")


def _record_curated(turn: Turn) -> None:
    """A curator hid or showed this turn: a re-import of the session keeps the choice."""
    turn.meta = {**turn.meta, CURATED: turn.hidden}


def _record_relink(turn: Turn) -> None:
    """A curator linked this turn to another version (or none): a re-import of the
    session keeps the link, by the version's kernel name and number."""
    version = turn.kernel_version
    link = None if version is None else {"kernel": version.kernel.name, "version": version.number}
    turn.meta = {**turn.meta, RELINKED: link}


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin[Turn]):
    list_display = ("session", "number", "role", "hidden", "kernel_version")
    list_filter = ("role", "hidden")
    search_fields = ("session__slug", "content")
    raw_id_fields = ("session", "kernel_version", "state")
    actions = ("hide", "show")

    def get_readonly_fields(
        self, request: HttpRequest, obj: Turn | None = None
    ) -> list[str] | tuple[str, ...]:
        return ("number", "session") if obj and obj.session.is_published else ()

    def save_model(self, request: HttpRequest, obj: Turn, form: Any, change: bool) -> None:
        if "hidden" in form.changed_data:
            _record_curated(obj)
        if "kernel_version" in form.changed_data:
            _record_relink(obj)
        super().save_model(request, obj, form, change)

    @admin.action(description="Hide (keeps the numbers: links and embeds stay valid)")
    def hide(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._set_hidden(request, queryset, True)

    @admin.action(description="Show")
    def show(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._set_hidden(request, queryset, False)

    def _set_hidden(self, request: HttpRequest, queryset: QuerySet[Turn], hidden: bool) -> None:
        turns = list(queryset.select_related("session"))
        for turn in turns:
            turn.hidden = hidden
            _record_curated(turn)
        # One UPDATE for all, and each session's cached pages dropped once.
        Turn.objects.bulk_update(turns, ["hidden", "meta"])
        for session in {turn.session_id: turn.session for turn in turns}.values():
            session.touch()
        verb = "Hid" if hidden else "Showed"
        self.message_user(request, f"{verb} {len(turns)} turn(s).", messages.SUCCESS)


@admin.register(Tag)
class TagAdmin(admin.ModelAdmin[Tag]):
    list_display = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}


def _clean_harness(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value:
        try:
            parse_harness(value)
        except HarnessError as error:
            raise forms.ValidationError(str(error)) from None
    return value


def code_editor(language: str) -> forms.Textarea:
    """A textarea the code editor takes over (static/src/editor.js; the change form loads
    it: templates/admin/tutoring_sessions/kernel/change_form.html)."""
    return forms.Textarea(attrs={"data-editor": language, "rows": 16, "spellcheck": "false"})


class KernelForm(forms.ModelForm[Kernel]):
    class Meta:
        model = Kernel
        fields = ["session", "name", "title", "harness"]
        widgets = {"harness": code_editor("json")}

    def clean_harness(self) -> dict[str, Any]:
        return _clean_harness(self.cleaned_data["harness"]) or {}


class KernelVersionForm(forms.ModelForm[KernelVersion]):
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

    def clean_harness_override(self) -> dict[str, Any] | None:
        return _clean_harness(self.cleaned_data["harness_override"])


class KernelVersionInline(admin.StackedInline[KernelVersion, Kernel]):
    model = KernelVersion
    form = KernelVersionForm  # its Meta.fields are the inline's fields too
    extra = 0
    raw_id_fields = ("turn",)


@admin.register(Kernel)
class KernelAdmin(admin.ModelAdmin[Kernel]):
    form = KernelForm
    list_display = ("name", "session", "title")
    search_fields = ("name", "session__slug", "title")
    raw_id_fields = ("session",)
    inlines = (KernelVersionInline,)


class SessionFileForm(forms.ModelForm[SessionFile]):
    upload = forms.FileField(help_text="Weights, test data: what the session's programs fetch().")

    class Meta:
        model = SessionFile
        fields = ["session", "name", "content_type"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["name"].required = False
        self.fields["name"].help_text = "The name a program fetch()es it by (default: the file's)."
        limit = settings.SESSION_FILE_MAX_BYTES
        self.fields["upload"].help_text += f" At most {limit:,} bytes."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
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
class SessionFileAdmin(admin.ModelAdmin[SessionFile]):
    """Uploaded once, then read-only: stored runs are keyed by the file's sha256."""

    form = SessionFileForm
    list_display = ("name", "session", "size", "content_type", "created")
    search_fields = ("name", "session__slug")
    raw_id_fields = ("session",)
    readonly_fields = ("session", "name", "content_type", "size", "sha256", "created")

    def get_fields(self, request: HttpRequest, obj: SessionFile | None = None) -> tuple[str, ...]:
        if obj is None:
            return ("session", "upload", "name", "content_type")
        return self.readonly_fields

    def get_form(
        self,
        request: HttpRequest,
        obj: SessionFile | None = None,
        change: bool = False,
        **kwargs: Any,
    ) -> type[forms.ModelForm[SessionFile]]:
        # Only a new file is uploaded; a stored one is shown, never edited.
        if obj is not None:
            kwargs["form"] = forms.ModelForm
        return super().get_form(request, obj, change, **kwargs)

    def get_readonly_fields(
        self, request: HttpRequest, obj: SessionFile | None = None
    ) -> list[str] | tuple[str, ...]:
        return self.readonly_fields if obj is not None else ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[SessionFile]:
        return super().get_queryset(request).defer("data").select_related("session")


class StateFileInline(admin.TabularInline[StateFile, ProgramState]):
    model = StateFile
    fields = ("path", "blob")
    readonly_fields = ("path", "blob")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: ProgramState | None = None) -> bool:
        return False


@admin.register(ProgramState)
class ProgramStateAdmin(admin.ModelAdmin[ProgramState]):
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
