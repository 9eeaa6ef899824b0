"""Full-text search: FTS5 tables and triggers on SQLite, GIN indexes on PostgreSQL
(sessions/search.py). No model changes: the index lives beside the tables."""

from django.db import migrations


def install(apps, schema_editor):
    from sessions import search

    search.install(schema_editor.connection)


def uninstall(apps, schema_editor):
    from sessions import search

    search.uninstall(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("tutoring_sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
