"""A session's cache stamp for a reader without cookies, by a query compiled once.

Cached pages, embeds and replay answers are kept under their session's `updated` stamp,
so a reader without cookies is answered with one lookup and a cache read. Django builds
and compiles a query anew on every call: for this lookup 0.36 ms, against 0.02 ms to run
it, and more than the rest of serving a cached page. So the lookup is built from the same
queryset methods as every other, compiled on first use, and then only run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.db.models import QuerySet

from sessions.models import Session


class Prepared:
    """A query built by build(*markers) and compiled once, then run with values in place
    of the markers. Only for exact lookups, whose values reach the database as given."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], names: Sequence[str]) -> None:
        self.build = build
        self.markers = {f"\x00{name}\x00": name for name in names}
        self.compiled: tuple[str, tuple[Any, ...]] | None = None

    def first(self, **values: Any) -> tuple[Any, ...] | None:
        """The first row, as the database gives it (no conversion of its values)."""
        if self.compiled is None:
            self.compiled = self.build(*self.markers).query.sql_with_params()
        sql, params = self.compiled
        named = [values[self.markers[p]] if p in self.markers else p for p in params]
        with connection.cursor() as cursor:
            cursor.execute(sql, named)
            row: tuple[Any, ...] | None = cursor.fetchone()
        return row


def _stamped(sessions: QuerySet[Session]) -> Callable[[str], QuerySet[Session, tuple[Any, ...]]]:
    return lambda slug: sessions.filter(slug=slug).values_list("pk", "updated")


# What a reader without cookies may open, and what embeds may show.
OPENABLE = Prepared(_stamped(Session.objects.viewable_by(AnonymousUser())), ["slug"])
EMBEDDABLE = Prepared(_stamped(Session.objects.embeddable()), ["slug"])


def stamp(prepared: Prepared, slug: str) -> str | None:
    """ "session:<id>:<updated>" of the session at slug that the query finds, to key what
    is cached about it; None when it finds none (missing, or not for this reader)."""
    row = prepared.first(slug=slug)
    return None if row is None else stamp_of(row)


def stamp_of(row: Sequence[Any]) -> str:
    """The stamp of a row that starts with a session's id and its `updated`."""
    # SQLite gives `updated` as text with a space, which no cache key may hold.
    return f"session:{row[0]}:{str(row[1]).replace(' ', 'T')}"
