"""Guided sessions: the live layer on top of an ordinary archive Session.

The conversation itself is stored as Turns and the learner's code as KernelVersions of
one Kernel, so a guided session reads, embeds, exports and replays like any other. What
only a live session needs lives here: the lesson it follows, the lock that keeps one reply
at a time, token accounting for budgets, and the guardrail's record.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models, transaction
from django.db.models import Q, Sum
from django.urls import reverse
from django.utils import timezone

from config import processes
from kernels import replay
from sessions.models import Session, Turn
from sessions.programs import Kernel, KernelVersion

# The reply lock's lease: renewed every third of it while the reply is written, so a
# request that died without releasing the lock (its server killed on another host) holds
# it this long at most. On this host its holder is seen to be gone at once.
REPLY_LEASE_SECONDS = 30
# The longest a reply may keep renewing it: a stream nobody closes must not hold it for ever.
REPLY_MAX_SECONDS = 900
# Turn kinds a published session hides (GuidedSession.chatter).
CHATTER_KINDS = ("offline_notice", "run_note")


class GuidedSessionQuerySet(models.QuerySet["GuidedSession"]):
    def for_user(self, user: User | AnonymousUser) -> GuidedSessionQuerySet:
        """Sessions this user may open: their own, and every one for staff (read only)."""
        if user.is_authenticated and user.is_staff:
            return self
        if user.is_authenticated:
            return self.filter(learner=user)
        return self.none()


class GuidedSession(models.Model):
    session = models.OneToOneField(Session, on_delete=models.CASCADE, related_name="guided")
    learner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="guided_sessions"
    )
    # "" for a free-form session (a kernel with no harness: submissions are only compiled).
    lesson_slug = models.SlugField(max_length=80, blank=True)
    # The lesson plan as it was when the session started: plans are edited over time,
    # and the tutor's (cached) system prompt must not change under a running session.
    lesson = models.JSONField(default=dict, blank=True)
    kernel = models.OneToOneField(Kernel, on_delete=models.CASCADE, related_name="guided")
    starter = models.TextField(blank=True)
    # The host program's starter (WebGPU JavaScript) where the learner writes host code:
    # a lesson's scaffold, or the free-form one. "" where the harness is the host.
    host_starter = models.TextField(blank=True)
    # Replies that handed over code and were redacted, and "just write it for me" requests.
    guardrail_count = models.PositiveIntegerField(default=0)
    answer_requests = models.PositiveIntegerField(default=0)
    # Claimed by the request writing a reply (conditional UPDATE), so a double click or a
    # second tab cannot interleave two replies. See claim_reply().
    replying_since = models.DateTimeField(null=True, blank=True)
    # Who holds it (config.processes.claim_name) and until when, unless renewed.
    reply_holder = models.CharField(max_length=200, blank=True)
    reply_expires = models.DateTimeField(null=True, blank=True)
    # What went wrong with the last reply, in plain words, until a reply succeeds.
    last_error = models.CharField(max_length=500, blank=True)
    # "Continue with the tutor": the turn of another session this one carries on from,
    # and the turns up to it summarised for Claude as they were then (a snapshot, like
    # the lesson: the prompt must not change under a running session).
    continued_from = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="continuations"
    )
    earlier_turns = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    objects = GuidedSessionQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"guided {self.session.slug}"

    def get_absolute_url(self) -> str:
        return reverse("tutor:session", args=[self.session.slug])

    @property
    def is_free_form(self) -> bool:
        return not self.lesson_slug

    # -- one reply at a time ---------------------------------------------------------

    def claim_reply(self) -> bool:
        """Take the reply lock; False if another request holds it.

        It is free when nobody holds it, when its lease ran out, or when the process that
        took it is gone from this host (a server killed mid-reply).
        """
        now = timezone.now()
        free = Q(reply_expires__isnull=True) | Q(reply_expires__lt=now)
        holder = GuidedSession.objects.filter(pk=self.pk).values_list("reply_holder", flat=True)
        if (held_by := holder.first()) and processes.is_gone(held_by):
            free |= Q(reply_holder=held_by)
        claim = {
            "replying_since": now,
            "reply_holder": processes.claim_name(),
            "reply_expires": now + timedelta(seconds=REPLY_LEASE_SECONDS),
        }
        claimed = GuidedSession.objects.filter(free, pk=self.pk).update(**claim)
        if claimed:
            for field, value in claim.items():
                setattr(self, field, value)
        return bool(claimed)

    def renew_reply(self) -> bool:
        """Extend this claim's lease; False if it is no longer this claim's lock."""
        expires = timezone.now() + timedelta(seconds=REPLY_LEASE_SECONDS)
        mine = GuidedSession.objects.filter(pk=self.pk, reply_holder=self.reply_holder)
        return bool(self.reply_holder and mine.update(reply_expires=expires))

    def reply_heartbeat(self) -> processes.Heartbeat:
        """A started heartbeat that renews this claim while the reply is written."""
        return processes.Heartbeat(
            self.renew_reply, REPLY_LEASE_SECONDS / 3, for_at_most=REPLY_MAX_SECONDS
        ).start()

    def release_reply(self) -> None:
        """Give the lock back, unless it has been taken over since (its lease ran out)."""
        mine = GuidedSession.objects.filter(pk=self.pk, reply_holder=self.reply_holder)
        mine.update(replying_since=None, reply_holder="", reply_expires=None)
        self.replying_since, self.reply_holder, self.reply_expires = None, "", None

    def set_error(self, message: str) -> None:
        self.last_error = message[:500]
        GuidedSession.objects.filter(pk=self.pk).update(last_error=self.last_error)

    def clear_error(self) -> None:
        if self.last_error:
            self.last_error = ""
            GuidedSession.objects.filter(pk=self.pk).update(last_error="")

    def count(self, field: str) -> None:
        GuidedSession.objects.filter(pk=self.pk).update(**{field: models.F(field) + 1})
        self.refresh_from_db(fields=[field])

    # -- turns -----------------------------------------------------------------------

    def next_turn_number(self) -> int:
        last = self.session.turns.aggregate(models.Max("number"))["number__max"]
        return (last or 0) + 1

    def add_turn(self, role: str, content: str, **fields: Any) -> Turn:
        return Turn.objects.create(
            session=self.session,
            number=self.next_turn_number(),
            role=role,
            content=content,
            timestamp=timezone.now(),
            **fields,
        )

    def pending_turn(self) -> Turn | None:
        """The turn still waiting for the tutor's answer: the last turn, when it is the
        learner's (or a tool result the tutor has not answered), or the one a reply cut
        off began to answer."""
        last = self.session.turns.order_by("-number").first()
        if last is None:
            return None
        if last.role == Turn.Role.LEARNER or last.kind == "tool_result":
            return last
        if last.meta.get("incomplete"):
            # A reply cut off answers nothing: the turn it began to answer is still waiting.
            return self.session.turns.filter(number=last.meta.get("reply_to") or 0).first()
        return None

    def latest_version(self) -> KernelVersion | None:
        return self.kernel.versions.order_by("-number").first()

    def compared_with(self, version: KernelVersion) -> KernelVersion | None:
        """The earlier version whose readbacks the learner chose as this version's
        reference, as the last turn that submitted it says; None for the usual check."""
        turns = self.session.turns.filter(kernel_version=version, meta__kind="submission")
        last = turns.order_by("-number").first()
        number = last.meta.get("compare_with") if last is not None else None
        if not isinstance(number, int) or number >= version.number:
            return None
        return self.kernel.versions.exclude(host_program="").filter(number=number).first()

    @property
    def can_compare(self) -> bool:
        """Whether a submission may be compared with an earlier version: in a free-form
        session where nothing else says what the outputs should be."""
        return self.is_free_form and not (self.kernel.harness or {}).get("reference")

    def comparable_versions(self) -> list[KernelVersion]:
        """The versions a submission may be compared with: those with a host program."""
        if not self.can_compare:
            return []
        versions = self.kernel.versions.exclude(host_program="").order_by("-number")
        return list(versions.only("pk", "number", "note"))

    def replay(self, version: KernelVersion) -> replay.Replay:
        """The run of this version a page shows now (kernels.replay.for_reader), under the
        comparison the learner chose."""
        return replay.for_reader(version, compare_with=self.compared_with(version))

    # -- publishing --------------------------------------------------------------------

    def chatter(self) -> models.QuerySet[Turn]:
        """Turns of the live page that are no part of the session as a record: the
        automatic reviewer's notices about what it can do (with canned refusals) and
        notes that a run could not start. Publishing hides them, keeping their numbers."""
        return self.session.turns.filter(meta__kind__in=CHATTER_KINDS)

    def publish(self, visibility: str) -> None:
        """Public or unlisted, with the chatter hidden (Session.publish refuses private)."""
        with transaction.atomic():
            self.chatter().update(hidden=True)
            self.session.publish(visibility)

    # -- tokens ----------------------------------------------------------------------

    def tokens_used(self) -> int:
        return self.api_calls.aggregate(total=Sum("total_tokens"))["total"] or 0

    def usage_totals(self) -> dict[str, int]:
        totals = self.api_calls.aggregate(
            input=Sum("input_tokens"),
            output=Sum("output_tokens"),
            cache_read=Sum("cache_read_tokens"),
            cache_write=Sum("cache_write_tokens"),
            total=Sum("total_tokens"),
            calls=models.Count("id"),
        )
        return {key: value or 0 for key, value in totals.items()}


class ApiCall(models.Model):
    """One request to the Messages API and the tokens it used, failed ones included
    (a stream cut off mid-way was still billed for what it read)."""

    class Outcome(models.TextChoices):
        OK = "ok"
        ERROR = "error"

    guided = models.ForeignKey(GuidedSession, on_delete=models.CASCADE, related_name="api_calls")
    # Denormalised from guided.learner: the per-learner daily budget sums by it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tutor_api_calls"
    )
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.SET_NULL)
    model = models.CharField(max_length=100)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.OK)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    # The sum of the four, kept as a column so budgets are one SUM.
    total_tokens = models.PositiveIntegerField(default=0)
    request_id = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created"]
        indexes = [
            # The per-learner budget: SUM(total_tokens) over the last 24 hours.
            models.Index(fields=["user", "created"], name="tutor_apicall_user_created"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    total_tokens=models.F("input_tokens")
                    + models.F("output_tokens")
                    + models.F("cache_read_tokens")
                    + models.F("cache_write_tokens")
                ),
                name="tutor_apicall_total_is_sum",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} {self.total_tokens} tokens ({self.outcome})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.total_tokens = (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )
        super().save(*args, **kwargs)

    def attach(self, turn: Turn) -> None:
        self.turn = turn
        ApiCall.objects.filter(pk=self.pk).update(turn=turn)

    @classmethod
    def used_by(cls, user: User, hours: int = 24) -> int:
        since = timezone.now() - timedelta(hours=hours)
        used = cls.objects.filter(user=user, created__gte=since).aggregate(t=Sum("total_tokens"))
        return used["t"] or 0


class GuardrailEvent(models.Model):
    class Kind(models.TextChoices):
        # A tutor reply contained kernel code; it was withheld from the learner.
        REDACTED = "redacted", "kernel code withheld from a reply"
        # The learner asked the tutor to write the kernel for them.
        ANSWER_REQUEST = "answer_request", "asked for the solution"

    guided = models.ForeignKey(
        GuidedSession, on_delete=models.CASCADE, related_name="guardrail_events"
    )
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.SET_NULL)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # Which rule of tutor/guardrail.py the reply crossed (function, interface, statements).
    rules = models.JSONField(default=list, blank=True)
    # What was withheld, for curators in the admin; never shown to the learner.
    withheld = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} in {self.guided}"
