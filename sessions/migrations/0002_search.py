"""Full-text search: FTS5 tables and triggers on SQLite, GIN indexes on PostgreSQL
(sessions/search.py). No model changes: the index lives beside the tables."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def install(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from sessions import search

    search.install(schema_editor.connection)


def uninstall(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    from sessions import search

    search.uninstall(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ("tutoring_sessions", "0001_initial"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
