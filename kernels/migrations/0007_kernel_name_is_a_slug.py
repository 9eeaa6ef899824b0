import re

from django.apps.registry import Apps
from django.db import migrations, models
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.utils.text import slugify

NAME = re.compile(r"[-a-zA-Z0-9_]+\Z")
NAME_MAX = 60


def usable_name(name: str, taken: set[str]) -> str:
    """A name a kernel's URLs can carry, close to the one it had, unique in its session."""
    base = slugify(name)[:NAME_MAX].strip("-_") or "kernel"
    candidate, number = base, 2
    while candidate in taken:
        suffix = f"-{number}"
        candidate, number = base[: NAME_MAX - len(suffix)] + suffix, number + 1
    return candidate


def rename_unusable(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    """Names written before the constraint (an empty one from an import, one with spaces
    from the admin) broke their session's pages: give them usable ones first."""
    Kernel = apps.get_model("kernels", "Kernel")
    for kernel in Kernel.objects.all():
        if NAME.match(kernel.name) and len(kernel.name) <= NAME_MAX:
            continue
        taken = set(
            Kernel.objects.filter(session=kernel.session_id).values_list("name", flat=True)
        )
        kernel.name = usable_name(kernel.name, taken)
        kernel.save(update_fields=["name"])


class Migration(migrations.Migration):
    dependencies = [
        ("kernels", "0006_fork"),
    ]

    operations = [
        migrations.RunPython(rename_unusable, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="kernel",
            constraint=models.CheckConstraint(
                condition=models.Q(("name__regex", "^[-a-zA-Z0-9_]+\\Z")),
                name="kernel_name_is_a_slug",
                violation_error_message=(
                    "A kernel's name is part of its URLs: use letters, digits, hyphens and "
                    "underscores only."
                ),
            ),
        ),
    ]
