"""A guided session's kernel is the archive's Kernel now (tutoring_sessions 0008): the
same table and column, so only Django's idea of the field changes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tutor", "0004_host_starter"),
        ("tutoring_sessions", "0008_programs_are_the_archives"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="guidedsession",
                    name="kernel",
                    field=models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="guided",
                        to="tutoring_sessions.kernel",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
