"""How a re-import replaces a session without holding the database for long.

The new import is written, a batch per transaction (sessions/importers/batches.py), into
a stand-in: a private session no reader sees. Meanwhile readers read the old session and
other writers get in between two batches. When every batch is in, one short transaction
swaps them (its work grows with the kernel versions and the turns linked to them, not
with all the turns): the old session's
kept kernels and versions move to the stand-in, rewritten with what the import made of
them, so that their ids, and so their forks' ids, stay; its files and whatever else
points at it follow; the stand-in takes its slug, and the old session, now private under
another slug, is deleted a batch at a time. A failure before the swap deletes the
stand-in the same way and leaves the old session as it was.
"""

from __future__ import annotations

import secrets
from datetime import datetime

from django.db import IntegrityError, connection, models, transaction
from django.db.models import Count

from sessions.importers.batches import VERSION_FIELDS, Batches
from sessions.importers.specs import ImportProblem
from sessions.models import Session, SessionImage, Tag, Turn
from sessions.programs import Kernel, KernelVersion, ProgramState, SessionFile

DELETE_BATCH = 500
# What the swap moves or rewrites itself; any other row pointing at a session follows it.
REBUILT = {Turn, Kernel, ProgramState, SessionImage, SessionFile}


def stand_in(session: Session) -> Session:
    """A new private, ownerless session to write a re-import of session into."""
    return Session.objects.create(
        slug=f"{session.slug[:50]}-importing-{secrets.token_hex(6)}",
        title=session.title,
        source=session.source,
        visibility=Session.Visibility.PRIVATE,
    )


def delete_in_batches(session_pk: int) -> None:
    """Delete a session a batch of turns and program states per transaction, so that
    other writers get in between, then the session and what is left of it."""
    for model in (Turn, ProgramState):
        while True:
            with transaction.atomic():
                rows = model.objects.filter(session_id=session_pk)
                pks = list(rows.values_list("pk", flat=True)[:DELETE_BATCH])
                if not pks:
                    break
                model.objects.filter(pk__in=pks).delete()
    Session.objects.filter(pk=session_pk).delete()


def swap(
    old: Session,
    seen: datetime,
    new: Session,
    batches: Batches,
    keep_files: bool,
    tags: list[Tag] | None,
) -> None:
    """Make new the session old was, in one transaction, leaving old private under
    another slug for delete_in_batches. new takes old's fields as the object old holds
    them (with the import's changes), and tags (None: old's). seen is old's `updated`
    when the import began: an old session changed since (a curator's edit, another
    import) is not replaced."""
    try:
        with transaction.atomic():
            found = Session.objects.select_for_update().filter(pk=old.pk, updated=seen)
            if not found.exists():
                raise ImportProblem(
                    f"Session '{old.slug}' changed while this import was written (an edit, "
                    "or another import of it): import it again."
                )
            _keep_versions(old, batches)
            _keep_kernels(old, new, batches)
            if keep_files:
                taken = SessionFile.objects.filter(session=new).values("name")
                SessionFile.objects.filter(session=old).exclude(name__in=taken).update(session=new)
            _move_the_rest(old, new)
            tags = list(old.tags.all()) if tags is None else tags
            Session.objects.filter(pk=old.pk).update(
                slug=f"{old.slug[:50]}-replaced-{secrets.token_hex(6)}",
                source_key="",
                visibility=Session.Visibility.PRIVATE,
            )
            for field in Session._meta.concrete_fields:
                if not field.primary_key:
                    setattr(new, field.attname, getattr(old, field.attname))
            new.save()
            new.tags.set(tags)
    except IntegrityError as error:
        raise ImportProblem(
            f"Session '{old.slug}' could not take its place ({error}): import it again."
        ) from None


def _keep_versions(old: Session, batches: Batches) -> None:
    """The old rows of the versions the import made again take what it made of them
    (their ids stay, and so do their forks); the turns linked to the new rows link to
    them; the versions it no longer makes are dropped, with their forks."""
    kept = list(batches.kept.items())
    table = connection.ops.quote_name(KernelVersion._meta.db_table)
    fields = [KernelVersion._meta.get_field(name) for name in VERSION_FIELDS]
    columns = [connection.ops.quote_name(f.column) for f in fields if isinstance(f, models.Field)]
    listed = ", ".join(columns)
    # Names from our own model, quoted; the ids are parameters.
    copy = (
        f"UPDATE {table} SET ({listed}) = "  # noqa: S608
        f"(SELECT {listed} FROM {table} AS made WHERE made.id = %s) WHERE id = %s"
    )
    turns = connection.ops.quote_name(Turn._meta.db_table)
    relink = f"UPDATE {turns} SET kernel_version_id = %s WHERE kernel_version_id = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(copy, [(made, pk) for pk, made in kept])
        # The old session's turns let go of them, so that no page finds them through it.
        cursor.executemany(relink, [(None, pk) for pk, _ in kept])
        cursor.executemany(relink, [(pk, made) for pk, made in kept])
    KernelVersion.objects.filter(pk__in=[made for _, made in kept]).delete()
    dropped = KernelVersion.objects.filter(kernel__session=old).exclude(pk__in=list(batches.kept))
    # Forks are replay's (kernels.models.Fork), above the archive: counted through their
    # relation's name, not imported.
    batches.forks_dropped = dropped.aggregate(forks=Count("forks"))["forks"]
    batches.versions_dropped = dropped.count()
    dropped.delete()


def _keep_kernels(old: Session, new: Session, batches: Batches) -> None:
    """A kernel the import made again keeps its old row, with the import's title,
    harness and versions; one it no longer makes is dropped."""
    made = {kernel.name: kernel for kernel in batches.kernels.values()}
    for kernel in Kernel.objects.filter(session=old):
        again = made.get(kernel.name)
        if again is None:
            kernel.delete()
            continue
        KernelVersion.objects.filter(kernel=again).update(kernel=kernel)
        again.delete()
        Kernel.objects.filter(pk=kernel.pk).update(
            session=new, title=again.title, harness=again.harness
        )


def _move_the_rest(old: Session, new: Session) -> None:
    """Rows of other apps that point at the session (a tutor's guided session) follow it."""
    for relation in Session._meta.related_objects:
        if relation.related_model in REBUILT or relation.many_to_many:
            continue
        field = relation.field
        # Typed as a model or "self"; a relation to Session from another model is never "self".
        model: type[models.Model] = relation.related_model  # type: ignore[assignment]
        model._base_manager.filter(**{field.name: old}).update(**{field.name: new})
