"""How the writer puts an import's turns, kernel versions and program states into the
database: a batch per transaction, into a session no reader sees yet, keeping what a
re-import must keep of the session it replaces (sessions/importers/writer.py swaps
them).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from django.db import connection, models, transaction

from sessions.importers.specs import (
    FileSpec,
    ImageSpec,
    ImportProblem,
    Item,
    KernelSpec,
    StateSpec,
    TurnSpec,
    VersionSpec,
)
from sessions.models import Session, SessionImage, Turn
from sessions.programs import (
    Blob,
    Kernel,
    KernelVersion,
    ProgramState,
    SessionFile,
    StateFile,
    sha256_text,
)

# What a re-import rewrites of a version it keeps (its id, and so its forks, stay).
VERSION_FIELDS = [
    "source",
    "sha256",
    "turn",
    "note",
    "expected_status",
    "harness_override",
    "host_program",
    "meta",
    "state",
]
# The meta key that records a curator's choice to hide (True) or show (False) a turn.
CURATED = "hidden_by_curator"
# The meta key that records a curator's link of a turn to a kernel version: {"kernel":
# name, "version": number}, or None for "no version". A re-import keeps it.
RELINKED = "relinked_by_curator"


def _curator_marks(session: Session | None, key: str) -> dict[str, Any]:
    """What a curator set under key in the session's turns, by recorded message
    (meta.source_id): only turns a curator touched carry it."""
    if session is None:
        return {}
    return {
        meta["source_id"]: meta[key]
        for meta in Turn.objects.filter(session=session, meta__has_key=key)
        .values_list("meta", flat=True)
        .iterator()
        if isinstance(meta, dict) and meta.get("source_id")
    }


class Batches:
    """Inserts turns and kernel versions in batches, each its own transaction, and links
    them as it goes.

    A turn points at a kernel version and a version at the turn that made it. Links to
    rows already written are set at each flush, from the batch just inserted or from
    a bounded cache of version keys (the database answers the rare miss). Links that
    point forwards (a kernelbin/1 file lists its turns before its kernels) wait for
    finish(); a transcript import has none, so its bookkeeping does not grow with the
    file.

    session is new and empty. previous is the session a re-import replaces: what a
    curator chose there (hidden turns, links to versions), its published numbers and
    its versions are read from it, and it is left untouched; the versions of it this
    import makes again are paired with their new rows in `kept` (old pk → new pk), for
    the writer to keep the old rows, and so their forks' ids.
    """

    VERSION_CACHE = 4096

    def __init__(
        self,
        session: Session,
        frozen: bool,
        batch_size: int,
        previous: Session | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.session = session
        self.previous = previous
        self.progress = progress
        self.frozen = frozen
        self.batch_size = batch_size
        earlier = KernelVersion.objects.filter(kernel__session=previous)
        self.old_versions: dict[tuple[str, int], int] = {
            (name, number): pk
            for name, number, pk in earlier.values_list("kernel__name", "number", "pk")
        }
        self.kept: dict[int, int] = {}
        # What the earlier import's versions held, to say which the new one changed.
        self.old_content: dict[int, tuple[str, str]] = {
            pk: (sha, sha256_text(host))
            for pk, sha, host in earlier.values_list("pk", "sha256", "host_program")
        }
        self.changed_versions: list[str] = []
        self.new_versions = 0
        earlier_turns = Turn.objects.filter(session=previous)
        # The recorded messages the session's turns held before, to count the new ones.
        self.old_messages: set[str] = {
            meta["source_id"]
            for meta in earlier_turns.values_list("meta", flat=True)
            if isinstance(meta, dict) and meta.get("source_id")
        }
        self.new_messages = 0
        self.states: dict[int, int] = {}  # state number → pk
        # Each path's content in the last state written, and its sha256 (_write_state).
        self.state_files: dict[str, tuple[str | bytes, str]] = {}
        self.state_count = 0
        # Set by the writer when it swaps the sessions.
        self.versions_dropped = self.forks_dropped = 0
        self.turns: list[TurnSpec] = []
        self.versions: list[tuple[VersionSpec, Kernel]] = []
        self.kernels: dict[str, Kernel] = {}
        self.version_cache: OrderedDict[tuple[str, int], int] = OrderedDict()
        self.waiting_versions: list[tuple[int, int]] = []  # (version pk, turn number)
        self.waiting_turns: list[tuple[int, tuple[str, int]]] = []  # (turn number, version)
        self.batch_pks: dict[int, int] = {}  # the turns of the last batch written
        self.turn_count = 0
        self.version_count = 0
        # What a curator chose to hide or show, by the recorded message (meta.source_id):
        # a re-import keeps it. Only turns a curator touched carry the choice.
        self.curated: dict[str, bool] = {
            source: bool(mark) for source, mark in _curator_marks(previous, CURATED).items()
        }
        self.curated_kept = 0
        # A curator's links of turns to versions, by recorded message (meta.source_id).
        self.relinks: dict[str, dict[str, Any] | None] = _curator_marks(previous, RELINKED)
        self.relinks_kept = 0
        # A published session's numbers by recorded message (_renumber).
        self.published_numbers: dict[str, int] = {}
        self.renumber: dict[int, int] = {}
        self.numbers_used: set[int] = set()
        self.next_number = 1
        if frozen:
            for number, meta in earlier_turns.values_list("number", "meta").iterator():
                if isinstance(meta, dict) and meta.get("source_id"):
                    self.published_numbers.setdefault(meta["source_id"], number)
                self.next_number = max(self.next_number, number + 1)
        self.published_claimed = set(self.published_numbers.values())

    def _renumber(self, spec: TurnSpec) -> None:
        """A published session keeps every number it handed out: a turn holding a
        recorded message it held before takes that number again, a new one (a sub-agent's
        turn brought by its file) the next number after the last."""
        source_id = spec.meta.get("source_id")
        number = self.published_numbers.get(source_id) if source_id else None
        if number is None or number in self.numbers_used:
            number = spec.number
            if source_id or number in self.numbers_used or number in self.published_claimed:
                while self.next_number in self.numbers_used:
                    self.next_number += 1
                number = self.next_number
        self.renumber[spec.number] = number
        self.numbers_used.add(number)
        spec.number = number

    def _final(self, number: int) -> int | None:
        """The number a turn of the file is written with (None: not read yet)."""
        return self.renumber.get(number) if self.frozen else number

    def add(self, item: Item) -> None:
        if isinstance(item, TurnSpec):
            if self.frozen:
                self._renumber(item)
            self.turns.append(item)
            if len(self.turns) >= self.batch_size:
                self.flush()
        elif isinstance(item, KernelSpec):
            if item.name in self.kernels:
                raise ImportProblem(f"Kernel '{item.name}' appears more than once.")
            made = Kernel(
                session=self.session, name=item.name, title=item.title, harness=item.harness
            )
            made.save()
            self.kernels[item.name] = made
        elif isinstance(item, VersionSpec):
            kernel = self.kernels.get(item.kernel)
            if kernel is None:
                raise ImportProblem(f"A version of kernel '{item.kernel}' comes before the kernel.")
            self.versions.append((item, kernel))
            if len(self.versions) >= self.batch_size:
                self.flush()
        elif isinstance(item, FileSpec):
            # A file of the same name is replaced (a re-import that brings it again).
            SessionFile.objects.filter(session=self.session, name=item.name).delete()
            SessionFile.objects.create(
                session=self.session, name=item.name, data=item.data, content_type=item.content_type
            )
        elif isinstance(item, ImageSpec):
            SessionImage.objects.get_or_create(
                session=self.session, sha256=item.sha256, defaults=vars(item)
            )
        elif isinstance(item, StateSpec):
            with transaction.atomic():
                self._write_state(item)
        else:
            raise TypeError(f"cannot write {type(item).__name__}")

    def _write_state(self, spec: StateSpec) -> None:
        if spec.number in self.states:
            raise ImportProblem(f"Program state {spec.number} appears more than once.")
        files: dict[str, str] = {}
        new: dict[str, bytes] = {}
        for path, content in sorted(spec.files.items()):
            known = self.state_files.get(path)
            if known is not None and known[0] is content:
                files[path] = known[1]
            else:
                new[path] = content.encode() if isinstance(content, str) else content
        for path, sha in zip(list(new), Blob.store(list(new.values())), strict=True):
            files[path] = sha
            self.state_files[path] = (spec.files[path], sha)
        state = ProgramState.objects.create(
            session=self.session,
            number=spec.number,
            kind=spec.kind,
            entry=spec.entry,
            digest=ProgramState.digest_of(spec.entry, spec.kind, files),
            modules=[{"kernel": kernel, "version": number} for kernel, number in spec.modules],
        )
        StateFile.objects.bulk_create(
            StateFile(state=state, path=path, blob_id=sha) for path, sha in files.items()
        )
        self.states[spec.number] = state.pk
        self.state_count += 1

    def _state_pk(self, number: int | None) -> int | None:
        if number is None:
            return None
        if number not in self.states:
            raise ImportProblem(f"Something refers to program state {number}, which is missing.")
        return self.states[number]

    def flush(self) -> None:
        """Write the pending turns, then the pending versions, then the links they allow."""
        # Rendered before the batch's transaction: only writing holds the lock.
        turns = self._rendered_turns()
        with transaction.atomic():
            links = self._write_turns(turns)
            self._write_versions()
            pairs = []
            for number, turn_pk, key in links:
                version_pk = self._version_pk(key)
                if version_pk is None:
                    self.waiting_turns.append((number, key))
                else:
                    pairs.append((version_pk, turn_pk))
            _set_column(Turn, "kernel_version_id", pairs)
        if self.progress is not None:
            self.progress(self.turn_count)

    def _rendered_turns(self) -> list[Turn]:
        turns = [
            Turn(
                session=self.session,
                number=spec.number,
                role=spec.role,
                content=spec.content,
                timestamp=spec.timestamp,
                meta=spec.meta,
                hidden=spec.hidden,
                state_id=self._state_pk(spec.state),
            )
            for spec in self.turns
        ]
        if self.curated:
            self._keep_curated(turns)
        if self.relinks:
            self._keep_relinks(turns)
        for turn in turns:
            turn.html = turn.rendered()  # bulk_create does not call save()
        return turns

    def _write_turns(self, turns: list[Turn]) -> list[tuple[int, int, tuple[str, int]]]:
        """Insert the pending turns; (number, pk, version) for each that links a version."""
        self.batch_pks = {}
        if not self.turns:
            return []
        created = Turn.objects.bulk_create(turns)
        self.turn_count += len(created)
        if self.old_messages:
            self.new_messages += sum(
                1 for turn in created if turn.meta.get("source_id") not in self.old_messages
            )
        self.batch_pks = {turn.number: turn.pk for turn in created}
        links = [
            (spec.number, turn.pk, spec.kernel)
            for spec, turn in zip(self.turns, created, strict=True)
            if spec.kernel
        ]
        self.turns = []
        return links

    def _keep_curated(self, turns: list[Turn]) -> None:
        for turn in turns:
            choice = self.curated.get(turn.meta.get("source_id", ""))
            if choice is not None:
                turn.hidden = choice
                turn.meta = {**turn.meta, CURATED: choice}
                self.curated_kept += 1

    def _keep_relinks(self, turns: list[Turn]) -> None:
        for spec, turn in zip(self.turns, turns, strict=True):
            source_id = turn.meta.get("source_id", "")
            if source_id not in self.relinks:
                continue
            link = self.relinks[source_id]
            turn.meta = {**turn.meta, RELINKED: link}
            if isinstance(link, dict) and isinstance(link.get("version"), int):
                spec.kernel = (str(link.get("kernel", "")), link["version"])
            else:
                spec.kernel = None
            self.relinks_kept += 1

    def _write_versions(self) -> None:
        if not self.versions:
            return
        batch = self.batch_pks
        finals = {s.turn: self._final(s.turn) for s, _ in self.versions if s.turn is not None}
        earlier = self._turn_pks(
            sorted({n for n in finals.values() if n is not None and n not in batch})
        )
        created = []
        kept: list[int | None] = []  # the row of the session replaced each one stands for
        for spec, kernel in self.versions:
            version = KernelVersion(
                kernel=kernel,
                number=spec.number,
                source=spec.source,
                sha256=sha256_text(spec.source),
                turn_id=None
                if spec.turn is None or (final := finals[spec.turn]) is None
                else batch.get(final) or earlier.get(final),
                note=spec.note,
                expected_status=spec.expected_status,
                harness_override=spec.harness_override,
                host_program=spec.host_program,
                meta=spec.meta,
                state_id=self._state_pk(spec.state),
            )
            old_pk = self.old_versions.get((kernel.name, spec.number))
            if old_pk is not None:
                kept.append(old_pk)
                if self.old_content[old_pk] != (version.sha256, sha256_text(spec.host_program)):
                    self.changed_versions.append(f"{kernel.name} v{spec.number}")
            else:
                kept.append(None)
                self.new_versions += 1
            created.append(version)
        KernelVersion.objects.bulk_create(created)
        for (spec, kernel), version, old_pk in zip(self.versions, created, kept, strict=True):
            if old_pk is not None:
                self.kept[old_pk] = version.pk
            self._remember((kernel.name, spec.number), version.pk)
            if spec.turn is not None and version.turn_id is None:
                self.waiting_versions.append((version.pk, spec.turn))
        self.version_count += len(created)
        self.versions = []

    def _remember(self, key: tuple[str, int], pk: int) -> None:
        self.version_cache[key] = pk
        self.version_cache.move_to_end(key)
        if len(self.version_cache) > self.VERSION_CACHE:
            self.version_cache.popitem(last=False)

    def _version_pk(self, key: tuple[str, int]) -> int | None:
        if key in self.version_cache:
            self.version_cache.move_to_end(key)
            return self.version_cache[key]
        kernel = self.kernels.get(key[0])
        if kernel is None:
            return None
        pk = kernel.versions.filter(number=key[1]).values_list("pk", flat=True).first()
        if pk is not None:
            self._remember(key, pk)
        return pk

    def _turn_pks(self, numbers: list[int]) -> dict[int, int]:
        """The pks of turns this import wrote, by number."""
        found: dict[int, int] = {}
        for start in range(0, len(numbers), self.batch_size):
            chunk = numbers[start : start + self.batch_size]
            found.update(
                Turn.objects.filter(session=self.session, number__in=chunk).values_list(
                    "number", "pk"
                )
            )
        return found

    def finish(self) -> None:
        """Write what is pending, refuse to drop a published turn, set the forward links."""
        self.flush()
        self._check_published_turns_kept()
        with transaction.atomic():
            self._link_waiting_versions()
            self._link_waiting_turns()
            if self.frozen:
                self._renumber_ranges()

    def _renumber_ranges(self) -> None:
        """A turn that names the range of turns nested under it (meta.nested_range, and
        "turns A–B" in its text) names them by the numbers they were written with."""
        for turn in Turn.objects.filter(session=self.session, meta__has_key="nested_range"):
            first, last = turn.meta["nested_range"]
            now = [self.renumber.get(first, first), self.renumber.get(last, last)]
            if now != [first, last]:
                turn.content = turn.content.replace(
                    f"turns {first}–{last}", f"turns {now[0]}–{now[1]}"
                )
                turn.meta = {**turn.meta, "nested_range": now}
                turn.save(update_fields=["content", "meta"])

    def _check_published_turns_kept(self) -> None:
        if not self.frozen or self.previous is None:
            return
        written = Turn.objects.filter(session=self.session).values("number")
        lost = Turn.objects.filter(session=self.previous).exclude(number__in=written)
        numbers = list(lost.order_by("number").values_list("number", flat=True)[:11])
        if numbers:
            listed = ", ".join(str(n) for n in numbers[:10]) + (" …" if len(numbers) > 10 else "")
            raise ImportProblem(
                f"Session '{self.previous.slug}' is published and the file drops turns "
                f"{listed}: published turn numbers are frozen."
            )

    def changes(self) -> list[str]:
        """What this import changed in a session imported before, for the report."""
        if not self.old_messages and not self.old_content:
            return []
        changed = self.changed_versions
        listed = ", ".join(changed[:10]) + (" …" if len(changed) > 10 else "")
        return [
            f"Changed since the last import: {self.new_messages} new turn(s); "
            f"{self.new_versions} new kernel version(s); "
            + (
                f"{len(changed)} version(s) with other code ({listed})."
                if changed
                else "no version's code changed."
            )
        ]

    def _link_waiting_versions(self) -> None:
        """Versions made by a turn that came after them in the file."""
        waiting = [(pk, self._final(number) or 0) for pk, number in self.waiting_versions]
        turn_pks = self._turn_pks(sorted({number for _, number in waiting}))
        pairs = []
        for version_pk, number in waiting:
            if number not in turn_pks:
                raise ImportProblem(f"A kernel version refers to turn {number}, which is missing.")
            pairs.append((turn_pks[number], version_pk))
        _set_column(KernelVersion, "turn_id", pairs)

    def _link_waiting_turns(self) -> None:
        """Turns that point at a version that came after them in the file."""
        turn_pks = self._turn_pks(sorted({number for number, _ in self.waiting_turns}))
        pairs = []
        for number, (name, version) in self.waiting_turns:
            version_pk = self._version_pk((name, version))
            if version_pk is None:
                raise ImportProblem(
                    f"turn {number}: refers to kernel '{name}' version {version}, which is "
                    "not in the file."
                )
            pairs.append((version_pk, turn_pks[number]))
        _set_column(Turn, "kernel_version_id", pairs)


def _set_column(model: type[models.Model], column: str, pairs: list[tuple[int, int]]) -> None:
    """UPDATE model SET column = value WHERE id = pk, for (value, pk) pairs, in one go.

    bulk_update() writes one CASE WHEN per row, which is slow for thousands of rows;
    executemany of a one-row UPDATE is a fraction of that on SQLite and PostgreSQL.
    """
    if not pairs:
        return
    quote = connection.ops.quote_name
    table, column = quote(model._meta.db_table), quote(column)
    # Names from our own models, quoted; the values are parameters.
    sql = f"UPDATE {table} SET {column} = %s WHERE id = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, pairs)
