"""Kernels, their versions, program states, their files and blobs, and session files
moved to the archive (tutoring_sessions 0008): this app forgets them. Their tables and
rows stay as they are, now the archive's; a fork's version is the archive's version."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kernels", "0013_run_picture"),
        ("tutoring_sessions", "0008_programs_are_the_archives"),
        ("tutor", "0005_kernel_is_the_archives"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="fork",
                    name="version",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="forks",
                        to="tutoring_sessions.kernelversion",
                    ),
                ),
                migrations.DeleteModel(name="StateFile"),
                migrations.DeleteModel(name="Blob"),
                migrations.DeleteModel(name="KernelVersion"),
                migrations.DeleteModel(name="ProgramState"),
                migrations.DeleteModel(name="SessionFile"),
                migrations.DeleteModel(name="Kernel"),
            ],
            database_operations=[],
        ),
    ]
