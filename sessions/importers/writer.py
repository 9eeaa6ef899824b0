"""The one session writer behind every import, and what it reports.

Each importer (kernelbin/1 files in `kernelbin`, Claude Code transcripts in
`claude_code`) turns its file into a `SessionSpec` and an iterator of `TurnSpec`,
`KernelSpec` and `VersionSpec`; `write_session` inserts them in batches, so memory does
not grow with the file, and a failure anywhere writes nothing.

Every import is written a batch per transaction, so that an import of any size never
holds the database's write lock for long (SQLite has one for the whole file): a sign-in
or a tutor's turn gets in between two batches. A new session stays private until its
last batch is in, and a failure deletes it. A re-import is written into a private
stand-in while readers keep reading the session it replaces, and swapped with it at
the end in one short transaction (sessions/importers/replace.py); a failure deletes the
stand-in and leaves the old session as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils.text import slugify

from sessions.importers import replace
from sessions.importers.batches import Batches
from sessions.importers.specs import (
    ImportProblem,
    Item,
    SessionSpec,
    Written,
)
from sessions.models import Session, Tag

if TYPE_CHECKING:
    from django.contrib.auth.models import User


WRITE_BATCH = 500
# Set on a new session only once all of it is written.
PUBLISHING = ("visibility", "published_at")


def _unique_slug(base: str) -> str:
    base = base[:70].strip("-") or "session"
    taken = set(Session.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    if base not in taken:
        return base
    return next(f"{base}-{n}" for n in range(2, len(taken) + 3) if f"{base}-{n}" not in taken)


def _claim_session(spec: SessionSpec, owner: User | None, notes: list[str]) -> tuple[Session, bool]:
    sessions = Session.objects.select_for_update()
    if spec.match_source_key and spec.source_key:
        session = sessions.filter(source_key=spec.source_key).first()
        if session is not None:
            if spec.slug_given and spec.slug != session.slug:
                if session.is_published:
                    raise ImportProblem(
                        f"This recording was imported before as '{session.slug}', which is "
                        "published: its slug is frozen (embeds use it). Leave out the slug, "
                        "or unpublish and rename it in the admin first."
                    )
                if Session.objects.filter(slug=spec.slug).exists():
                    raise ImportProblem(f"The slug '{spec.slug}' belongs to another session.")
                notes.append(f"Renamed the session from '{session.slug}' to '{spec.slug}'.")
                session.slug = spec.slug
            return session, False
        if spec.slug_given:
            if Session.objects.filter(slug=spec.slug).exists():
                raise ImportProblem(
                    f"The slug '{spec.slug}' belongs to another session (a different "
                    "recording). Choose another slug."
                )
            slug = spec.slug
        else:
            slug = _unique_slug(spec.slug)
        return Session(slug=slug, owner=owner), True

    session = sessions.filter(slug=spec.slug).first()
    return (session, False) if session else (Session(slug=spec.slug, owner=owner), True)


def _write_items(batches: Batches, items: Iterable[Item]) -> None:
    for item in items:
        batches.add(item)
    batches.finish()
    batches.session.touch()


def _write_new(batches: Batches, items: Iterable[Item], held: dict[str, Any]) -> None:
    """A new session's items, a batch per transaction, then the fields that publish it;
    a failure anywhere deletes the session, so that nothing of it stays."""
    session = batches.session
    try:
        _write_items(batches, items)
        with transaction.atomic():
            for key, value in held.items():
                setattr(session, key, value)
            session.save()
    except BaseException:
        replace.delete_in_batches(session.pk)
        raise


def _take_source_key(session: Session, source_key: str, notes: list[str]) -> None:
    """The recording's key for this session, unless another session holds it."""
    holder = Session.objects.filter(source_key=source_key).exclude(pk=session.pk).first()
    if holder is not None:
        notes.append(
            f"Session '{holder.slug}' already holds this recording's source key, so this "
            "copy has none."
        )
        session.source_key = ""
    else:
        session.source_key = source_key


def write_session(
    spec: SessionSpec,
    items: Iterable[Item],
    *,
    owner: User | None = None,
    batch_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Written:
    """Write one session and everything in it, or nothing.

    A session that exists is replaced whole (a new row takes its place and slug): its
    turns and program states are written anew; its kernels and versions are kept by
    name and number and rewritten (so their forks stay), those the file no longer has
    dropped. When it has been published,
    its turn numbers are frozen: a turn holding a recorded message (meta.source_id) that
    a number held before gets that number again, new ones the numbers after the last,
    and an import that would drop a published turn is refused. progress is told the
    number of turns written after each batch.
    """
    notes: list[str] = []
    with transaction.atomic():
        session, created = _claim_session(spec, owner, notes)
        frozen = session.is_published
        seen = session.updated
        values = {**(spec.defaults if created else {}), **spec.fields}
        # Numbers handed out once stay frozen: the first publication date stays too.
        if session.published_at is not None:
            values.pop("published_at", None)
        held = {key: values.pop(key) for key in PUBLISHING if created and key in values}
        # A session imported before gets these fields only when the import is swapped in.
        for key, value in values.items():
            setattr(session, key, value)
        if spec.source_key:
            _take_source_key(session, spec.source_key, notes)
        tags = (
            None
            if spec.tags is None
            else [
                Tag.objects.get_or_create(slug=slugify(name), defaults={"name": name})[0]
                for name in spec.tags
            ]
        )
        if created:
            session.save()
            if tags is not None:
                session.tags.set(tags)
        target = session if created else replace.stand_in(session)
    batches = Batches(
        target, frozen, batch_size or WRITE_BATCH, None if created else session, progress
    )
    if created:
        _write_new(batches, items, held)
    else:
        try:
            _write_items(batches, items)
            replace.swap(session, seen, target, batches, not spec.replace_files, tags)
        except BaseException:
            replace.delete_in_batches(target.pk)
            raise
        replace.delete_in_batches(session.pk)
        session = target
    notes += _kept_and_changed(batches, created)
    return Written(
        session=session,
        created=created,
        turns=batches.turn_count,
        kernels=len(batches.kernels),
        versions=batches.version_count,
        notes=notes,
        states=batches.state_count,
    )


def _kept_and_changed(batches: Batches, created: bool) -> list[str]:
    """The report's notes on what the write kept of an earlier import and what it changed."""
    found: list[str] = []
    if batches.curated_kept:
        found.append(f"Kept the curator's choice to hide or show {batches.curated_kept} turn(s).")
    if batches.state_count:
        found.append(f"Rebuilt {batches.state_count} program state(s) of the learner's project.")
    if batches.relinks_kept:
        found.append(f"Kept the curator's links of {batches.relinks_kept} turn(s) to versions.")
    if batches.kept:
        found.append(
            f"Kept {len(batches.kept)} kernel version(s) of the earlier import in "
            "place: their forks keep their ids and URLs."
        )
    if not created:
        found += batches.changes()
    if batches.versions_dropped:
        found.append(
            f"Dropped {batches.versions_dropped} kernel version(s) the recording no longer "
            f"makes, with {batches.forks_dropped} fork(s) of them."
        )
    return found
