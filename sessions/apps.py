import django_stubs_ext
from django.apps import AppConfig
from django.db.models.signals import post_migrate

# ModelAdmin and the other classes django-stubs makes generic are subscripted in the code
# (ModelAdmin[Session]); this gives them __class_getitem__ at run time. Here, not in the
# settings: Django imports every app's AppConfig before any models or admin module, and
# importing this loads the ORM (0.24 s on the H100's host), which config/wsgi.py starts
# the replay workers before.
django_stubs_ext.monkeypatch()

# The migration that sets up full-text search (sessions/search.py).
SEARCH_MIGRATION = ("tutoring_sessions", "0002_search")


def _restore_search(using: str, **kwargs: object) -> None:
    # SQLite drops a table's triggers when a migration rebuilds that table (to add a
    # column with a default, say): put them back, so search never silently falls behind.
    from django.db import connections
    from django.db.migrations.recorder import MigrationRecorder

    from sessions import search

    db = connections[using]
    if SEARCH_MIGRATION in MigrationRecorder(db).applied_migrations():
        search.install(db)


class SessionsConfig(AppConfig):
    name = "sessions"
    # django.contrib.sessions owns the label "sessions".
    label = "tutoring_sessions"
    verbose_name = "Tutoring sessions"

    def ready(self) -> None:
        post_migrate.connect(_restore_search, sender=self)
