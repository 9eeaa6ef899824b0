from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from sessions.importers.batches import CURATED, RELINKED
from sessions.models import Session, Tag, Turn


class TurnInline(admin.StackedInline):
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

    def get_readonly_fields(self, request: HttpRequest, obj: Session | None = None):
        # Embeds and permalinks point at published turn numbers.
        return ("number",) if obj and obj.is_published else ()

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        return not (obj and obj.is_published) and super().has_delete_permission(request, obj)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
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

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).with_turn_count()

    def save_formset(self, request: HttpRequest, form, formset, change: bool) -> None:
        for turn_form in formset.forms:
            if "hidden" in turn_form.changed_data:
                _record_curated(turn_form.instance)
            if "kernel_version" in turn_form.changed_data:
                _record_relink(turn_form.instance)
        super().save_formset(request, form, formset, change)

    @admin.display(ordering="turn_count", description="turns")
    def turn_count(self, session: Session) -> int:
        return session.turn_count

    def get_readonly_fields(self, request: HttpRequest, obj: Session | None = None):
        fields = super().get_readonly_fields(request, obj)
        return (*fields, "slug") if obj and obj.is_published else fields

    def get_prepopulated_fields(self, request: HttpRequest, obj: Session | None = None):
        # A published slug is read-only: embeds in the wild use it.
        return {} if obj and obj.is_published else self.prepopulated_fields

    @admin.action(description="Publish as public")
    def publish_public(self, request: HttpRequest, queryset: QuerySet) -> None:
        for session in queryset:
            session.publish(Session.Visibility.PUBLIC)
        self.message_user(request, f"Published {queryset.count()} session(s).", messages.SUCCESS)

    @admin.action(description="Publish as unlisted (link only)")
    def publish_unlisted(self, request: HttpRequest, queryset: QuerySet) -> None:
        for session in queryset:
            session.publish(Session.Visibility.UNLISTED)
        self.message_user(request, f"Published {queryset.count()} session(s) as unlisted.")

    @admin.action(description="Unpublish (make private)")
    def unpublish(self, request: HttpRequest, queryset: QuerySet) -> None:
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
class TurnAdmin(admin.ModelAdmin):
    list_display = ("session", "number", "role", "hidden", "kernel_version")
    list_filter = ("role", "hidden")
    search_fields = ("session__slug", "content")
    raw_id_fields = ("session", "kernel_version", "state")
    actions = ("hide", "show")

    def get_readonly_fields(self, request: HttpRequest, obj: Turn | None = None):
        return ("number", "session") if obj and obj.session.is_published else ()

    def save_model(self, request: HttpRequest, obj: Turn, form, change: bool) -> None:
        if "hidden" in form.changed_data:
            _record_curated(obj)
        if "kernel_version" in form.changed_data:
            _record_relink(obj)
        super().save_model(request, obj, form, change)

    @admin.action(description="Hide (keeps the numbers: links and embeds stay valid)")
    def hide(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_hidden(request, queryset, True)

    @admin.action(description="Show")
    def show(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_hidden(request, queryset, False)

    def _set_hidden(self, request: HttpRequest, queryset: QuerySet, hidden: bool) -> None:
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
class TagAdmin(admin.ModelAdmin):
    list_display = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
