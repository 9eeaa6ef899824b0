from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from kernels.models import Fork, KeptBuffer, Run


@admin.register(Fork)
class ForkAdmin(admin.ModelAdmin[Fork]):
    """Readers' forks are public text written by anyone: curators read and delete them."""

    list_display = ("id", "version", "created")
    search_fields = ("id", "version__kernel__session__slug")
    readonly_fields = ("id", "version", "source", "host_program", "created")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = ("pk", "state", "status", "adapter", "created", "finished")
    list_filter = ("state", "status", "adapter")
    search_fields = ("source_sha256", "harness_digest")
    readonly_fields = [field.name for field in Run._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(KeptBuffer)
class KeptBufferAdmin(admin.ModelAdmin[KeptBuffer]):
    """Buffers kept whole on readers' requests (up to 64 MiB each): curators see what is
    stored and delete it (a reader may ask again)."""

    list_display = ("buffer", "pass_number", "dtype", "count", "adapter", "created")
    search_fields = ("source_sha256", "harness_digest", "buffer")
    # Its blob by sha256: shown as the object, the admin would load its bytes to print it.
    exclude = ["blob"]
    readonly_fields = [f.name for f in KeptBuffer._meta.fields if f.name != "blob"] + ["blob_id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: KeptBuffer) -> None:
        KeptBuffer.objects.filter(pk=obj.pk).delete_with_bytes()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KeptBuffer]) -> None:
        KeptBuffer.objects.filter(pk__in=queryset.values("pk")).delete_with_bytes()
