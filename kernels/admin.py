from __future__ import annotations

from django import forms
from django.contrib import admin

from kernels.engine.harness import HarnessError, parse_harness
from kernels.models import Kernel, KernelVersion, Run


def _clean_harness(value: dict | None) -> dict | None:
    if value:
        try:
            parse_harness(value)
        except HarnessError as error:
            raise forms.ValidationError(str(error)) from None
    return value


class KernelForm(forms.ModelForm):
    class Meta:
        model = Kernel
        fields = ["session", "name", "title", "harness"]

    def clean_harness(self) -> dict:
        return _clean_harness(self.cleaned_data["harness"]) or {}


class KernelVersionForm(forms.ModelForm):
    class Meta:
        model = KernelVersion
        fields = ["number", "note", "expected_status", "turn", "source", "harness_override"]

    def clean_harness_override(self) -> dict | None:
        return _clean_harness(self.cleaned_data["harness_override"])


class KernelVersionInline(admin.StackedInline):
    model = KernelVersion
    form = KernelVersionForm
    extra = 0
    fields = ("number", "note", "expected_status", "turn", "source", "harness_override")
    raw_id_fields = ("turn",)


@admin.register(Kernel)
class KernelAdmin(admin.ModelAdmin):
    form = KernelForm
    list_display = ("name", "session", "title")
    search_fields = ("name", "session__slug", "title")
    raw_id_fields = ("session",)
    inlines = (KernelVersionInline,)


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("pk", "state", "status", "adapter", "created", "finished")
    list_filter = ("state", "status", "adapter")
    search_fields = ("source_sha256", "harness_digest")
    readonly_fields = [field.name for field in Run._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False
