from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tutoring_sessions", "0002_search"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="hidden",
            field=models.BooleanField(
                default=False,
                help_text="Kept, with its number, but out of the reader's way: pages, embeds, "
                "the Markdown export and search leave it out.",
            ),
        ),
    ]
