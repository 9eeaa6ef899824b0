from __future__ import annotations

from django.contrib import admin

from tutor.models import ApiCall, GuardrailEvent, GuidedSession


@admin.register(GuidedSession)
class GuidedSessionAdmin(admin.ModelAdmin[GuidedSession]):
    list_display = (
        "session",
        "learner",
        "lesson_slug",
        "guardrail_count",
        "answer_requests",
        "created",
    )
    list_filter = ("lesson_slug",)
    search_fields = ("session__slug", "session__title", "learner__username")
    raw_id_fields = ("session", "learner", "kernel")
    readonly_fields = ("lesson", "replying_since", "created")


@admin.register(GuardrailEvent)
class GuardrailEventAdmin(admin.ModelAdmin[GuardrailEvent]):
    list_display = ("guided", "kind", "rules", "turn", "created")
    list_filter = ("kind",)
    raw_id_fields = ("guided", "turn")
    # Curators review what was withheld; it is never shown to the learner.
    readonly_fields = ("guided", "turn", "kind", "rules", "withheld", "created")


@admin.register(ApiCall)
class ApiCallAdmin(admin.ModelAdmin[ApiCall]):
    list_display = (
        "guided", "model", "outcome", "input_tokens", "output_tokens",
        "cache_read_tokens", "cache_write_tokens", "total_tokens", "created",
    )  # fmt: skip
    list_filter = ("outcome", "model")
    raw_id_fields = ("guided", "user", "turn")
