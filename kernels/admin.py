from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from kernels.models import Fork, Run


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
