from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Case, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

# The archive's other models (kernels, program states, files) are in their own module:
# importing it here is what makes them this app's.
from sessions import programs  # noqa: F401
from sessions.markdown import render_content


class Tag(models.Model):
    name = models.CharField(max_length=40, unique=True)
    slug = models.SlugField(max_length=40, unique=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


# The longest title a session may have.
TITLE_LENGTH = 200


class SessionQuerySet(models.QuerySet["Session"]):
    def listed(self) -> SessionQuerySet:
        """What may appear in lists and search: public sessions only, never unlisted."""
        return self.filter(visibility=Session.Visibility.PUBLIC)

    def viewable_by(self, user: User | AnonymousUser) -> SessionQuerySet:
        """What a URL may open: public and unlisted, and private ones to their owner and staff."""
        if user.is_authenticated and user.is_staff:
            return self
        shared = ~Q(visibility=Session.Visibility.PRIVATE)
        if user.is_authenticated:
            return self.filter(shared | Q(owner=user))
        return self.filter(shared)

    def curated_first(self) -> SessionQuerySet:
        """Newest first, with learners' live sessions after the curated and imported ones
        unless staff featured them: one click on Publish does not put a learner's session
        above the showcase."""
        curated = Case(
            When(Q(source=Session.Source.LIVE) & Q(featured=False), then=Value(0)),
            default=Value(1),
        )
        return self.annotate(curated=curated).order_by("-curated", "-created")

    def with_turn_count(self) -> SessionQuerySet:
        """Each session with `turn_count`: its last turn's number, which turns are numbered
        up to from 1. Read from the (session, number) index, it costs the same for a session
        of three turns and of 200,000, where COUNT reads every turn (the front page of a site
        holding one such session took 5.9 times as long)."""
        last = Turn.objects.filter(session=OuterRef("pk")).order_by("-number").values("number")
        return self.annotate(turn_count=Coalesce(Subquery(last[:1]), 0))

    def embeddable(self) -> SessionQuerySet:
        """What embeds and oEmbed may show: never a private session, whoever asks (embeds
        are public by nature, and carry no cookies)."""
        return self.exclude(visibility=Session.Visibility.PRIVATE)


class Session(models.Model):
    class Source(models.TextChoices):
        FIXTURE = "fixture"
        IMPORTED = "imported"
        LIVE = "live"

    class Visibility(models.TextChoices):
        PUBLIC = "public"
        UNLISTED = "unlisted", "Unlisted (anyone with the link)"
        PRIVATE = "private"

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=TITLE_LENGTH)
    summary = models.TextField(blank=True)
    learner = models.CharField(max_length=100, blank=True)
    tutor_model = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.IMPORTED)
    # Identity of the recording this session came from (a Claude Code sessionId), so a
    # second import of the same recording updates it instead of making a copy.
    source_key = models.CharField(max_length=200, blank=True)
    visibility = models.CharField(
        max_length=10, choices=Visibility.choices, default=Visibility.PRIVATE
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    tags = models.ManyToManyField(Tag, blank=True, related_name="sessions")
    created = models.DateTimeField(default=timezone.now)
    updated = models.DateTimeField(auto_now=True)
    # Set the first time the session is made public or unlisted. From then on its turn
    # numbers are frozen: embeds and permalinks in the wild point at them.
    published_at = models.DateTimeField(null=True, blank=True)
    # Set by staff: a learner's published live session listed among the curated ones.
    featured = models.BooleanField(
        default=False,
        help_text="List this live session with the curated ones on the front page (staff).",
    )

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        constraints = [
            models.UniqueConstraint(
                fields=["source_key"],
                condition=~Q(source_key=""),
                name="session_one_per_source_key",
            ),
        ]

    def __str__(self) -> str:
        return self.title

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.visibility != self.Visibility.PRIVATE and self.published_at is None:
            self.published_at = timezone.now()
            if "update_fields" in kwargs:
                kwargs["update_fields"] = {*kwargs["update_fields"], "published_at"}
        super().save(*args, **kwargs)

    def get_absolute_url(self) -> str:
        return reverse("sessions:detail", args=[self.slug])

    @property
    def is_published(self) -> bool:
        return self.published_at is not None

    @property
    def is_embeddable(self) -> bool:
        """Whether embeds may show it (SessionQuerySet.embeddable)."""
        return self.visibility != self.Visibility.PRIVATE

    def publish(self, visibility: str = Visibility.PUBLIC) -> None:
        if visibility == self.Visibility.PRIVATE:
            raise ValueError("publishing makes a session public or unlisted")
        self.visibility = visibility
        if self.published_at is None:
            self.published_at = timezone.now()
        self.save(update_fields=["visibility", "published_at", "updated"])

    def unpublish(self) -> None:
        # published_at stays: numbers handed out once remain frozen.
        self.visibility = self.Visibility.PRIVATE
        self.save(update_fields=["visibility", "updated"])

    def touch(self) -> None:
        """Mark the session changed: rendered pages are cached under `updated`."""
        self.updated = timezone.now()
        Session.objects.filter(pk=self.pk).update(updated=self.updated)

    def cache_key(self, *parts: object) -> str:
        return ":".join(
            str(part) for part in ("session", self.pk, self.updated.isoformat(), *parts)
        )


class TurnQuerySet(models.QuerySet["Turn"]):
    def shown(self) -> TurnQuerySet:
        """The turns a reader sees: not the ones a curator (or the importer) hid. Hidden
        turns keep their numbers, so permalinks and embeds stay valid."""
        return self.filter(hidden=False)


class Turn(models.Model):
    class Role(models.TextChoices):
        LEARNER = "learner"
        TUTOR = "tutor"
        TOOL = "tool"
        SYSTEM = "system"

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="turns")
    number = models.PositiveIntegerField()
    role = models.CharField(max_length=10, choices=Role.choices)
    content = models.TextField(help_text="Markdown source.")
    # Rendered once from content on save; the only HTML we ever mark safe.
    html = models.TextField(editable=False)
    timestamp = models.DateTimeField(null=True, blank=True)
    # Tool name, token counts, model, source uuid, kind (thinking, tool_call, …).
    meta = models.JSONField(default=dict, blank=True)
    kernel_version = models.ForeignKey(
        "KernelVersion",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="turns",
        help_text="The kernel version this turn submitted or reviewed.",
    )
    state = models.ForeignKey(
        "ProgramState",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="turns",
        help_text="The state of the learner's project this turn wrote or reviewed.",
    )
    hidden = models.BooleanField(
        default=False,
        help_text="Kept, with its number, but out of the reader's way: pages, embeds, the "
        "Markdown export and search leave it out.",
    )
    # Not stored: what a page that lists the turn sets on it for its template. replayed:
    # the run its badge shows (a replay's Run, which this archive layer does not know
    # of), picture: that run's picture; section: the outline section the turn opens;
    # folded: the sub-agent's turns it holds, agent_label: what they were.
    replayed: object
    picture: dict[str, Any] | None
    section: object
    folded: list[Turn]
    agent_label: str

    objects = TurnQuerySet.as_manager()

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="turn_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="turn_number_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug} #{self.number} ({self.role})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        fields = kwargs.get("update_fields")
        # A partial save checks and renders only what it writes: hiding a turn or
        # recording its run neither renumbers it nor changes its HTML.
        if fields is None or "number" in fields:
            self.clean()
        if fields is None or {"content", "meta"} & set(fields):
            self.html = self.rendered()
            if fields is not None:
                kwargs["update_fields"] = {*fields, "html"}
        super().save(*args, **kwargs)
        self.session.touch()

    def get_absolute_url(self) -> str:
        return f"{self.session.get_absolute_url()}#turn-{self.number}"

    @property
    def body_html(self) -> SafeString:
        # Produced by render_content at save time, which sanitises last.
        return mark_safe(self.html)  # noqa: S308

    @property
    def kind(self) -> str:
        return str(self.meta.get("kind") or "")

    @property
    def is_typed(self) -> bool:
        """Text a person typed in a terminal, shown as typed rather than as Markdown."""
        return bool(self.meta.get("typed"))

    def rendered(self) -> str:
        """The content as sanitised HTML (stored in `html` whenever the turn is saved)."""
        return render_content(self.content, typed=self.is_typed)

    @property
    def is_collapsed(self) -> bool:
        """Shown folded, meta.summary as its one line: tool calls, thinking, and the long
        notes an importer marks collapsed (compaction summaries, raw lines, sub-agents)."""
        return (
            self.role == self.Role.TOOL
            or self.kind == "thinking"
            or bool(self.meta.get("collapsed"))
        )

    def clean(self) -> None:
        if self.pk and self.session.is_published:
            stored = Turn.objects.filter(pk=self.pk).values_list("number", flat=True).first()
            if stored is not None and stored != self.number:
                raise ValidationError({"number": "Turn numbers are frozen once published."})

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        result = super().delete(*args, **kwargs)
        self.session.touch()
        return result


class SessionImage(models.Model):
    """A picture shown in a session's turns (Turn.meta["images"] names it by sha256):
    re-encoded on import by sessions.images, served only as an image."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="images")
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=20)
    data = models.BinaryField()
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["session", "sha256"], name="session_image_unique"),
            models.CheckConstraint(
                condition=Q(content_type__in=["image/png", "image/jpeg"]),
                name="session_image_type",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug} {self.sha256[:12]}"


class Upload(models.Model):
    """A staff upload imported off the request (sessions/uploads.py): a transcript or an
    export to import, or project files to add to a session, spooled to disk until it is
    done; how far it got, and what it did or why it failed."""

    class Kind(models.TextChoices):
        IMPORT = "import"
        FILES = "files"

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    # Its page's address: not to be guessed (it names the files and the session).
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    # Where files go; what an import made, once it is done.
    session = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL)
    # What the form chose, and the names and sizes of the files spooled.
    options = models.JSONField(default=dict)
    spool = models.CharField(max_length=500)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    progress = models.CharField(max_length=200, blank=True)
    # The import's report: {"summary": "...", "details": ["...", ...]}.
    report = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    # The process that takes it (config.processes): one that is gone has lost it.
    worker = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(default=timezone.now)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.kind} upload {self.pk} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("sessions:upload", args=[self.pk])

    @property
    def is_finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED)
