from __future__ import annotations

import base64
import difflib
import hashlib
import json
import re

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from kernels.engine.outcome import Status
from sessions.models import Session


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# A kernel's name is a segment of its URLs (<slug:name>): one or more letters, digits,
# hyphens or underscores, as the slug converter and SlugField's validator match them. The
# database holds every writer to it (importers, the admin, the shell) by this constraint.
KERNEL_NAME_CHECK = Q(name__regex=r"^[-a-zA-Z0-9_]+\Z")


class Kernel(models.Model):
    session = models.ForeignKey(
        "tutoring_sessions.Session", on_delete=models.CASCADE, related_name="kernels"
    )
    name = models.SlugField(max_length=60)
    title = models.CharField(max_length=200, blank=True)
    # The harness spec (kernels/engine/harness.py). Empty: the kernel is only compiled.
    harness = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["session", "name"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="kernel_name_unique"),
            models.CheckConstraint(
                condition=KERNEL_NAME_CHECK,
                name="kernel_name_is_a_slug",
                violation_error_message=(
                    "A kernel's name is part of its URLs: use letters, digits, hyphens and "
                    "underscores only."
                ),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug}/{self.name}"

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        self.session.touch()

    def get_absolute_url(self) -> str:
        return reverse("kernels:timeline", args=[self.session.slug, self.name])

    @classmethod
    def name_problem(cls, name: str) -> str:
        """Why name cannot name a kernel, in the words the admin uses; "" if it can."""
        try:
            cls._meta.get_field("name").clean(name, None)
        except ValidationError as error:
            return " ".join(error.messages)
        return ""


class KernelVersion(models.Model):
    kernel = models.ForeignKey(Kernel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.TextField()
    # sha256 of the WGSL source; a run's key covers the host program and files too
    # (kernels.replay.job_for).
    sha256 = models.CharField(max_length=64, editable=False)
    # The learner's WebGPU host program (JavaScript). Empty: the harness is the host.
    # A version with one replays as a program (kernels/engine/host/).
    host_program = models.TextField(
        blank=True,
        help_text="The learner's WebGPU host code (JavaScript). It may fetch() the "
        "session's files and kernel.wgsl (this version's WGSL).",
    )
    turn = models.ForeignKey(
        "tutoring_sessions.Turn",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="introduced_versions",
        help_text="The turn that introduced this version.",
    )
    # The program state this version was written in: its replay runs that state's
    # program on that state's files. None for curated versions driven by a harness.
    state = models.ForeignKey(
        "kernels.ProgramState",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="versions",
    )
    harness_override = models.JSONField(
        null=True, blank=True, help_text="Replaces the kernel's harness for this version only."
    )
    note = models.CharField(max_length=200, blank=True)
    # For curated sessions: the status a replay must end in, so tests prove the bug
    # still reproduces and the fix still passes.
    expected_status = models.CharField(
        max_length=20, blank=True, choices=[(s.value, s.label) for s in Status]
    )
    # Where an imported version came from (file path, tool call, how it was rebuilt).
    meta = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["kernel", "number"]
        constraints = [
            models.UniqueConstraint(fields=["kernel", "number"], name="version_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="version_number_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.kernel} v{self.number}"

    def save(self, *args, **kwargs) -> None:
        self.sha256 = sha256_text(self.source)
        super().save(*args, **kwargs)
        self.kernel.session.touch()

    @property
    def harness(self) -> dict:
        return self.harness_override if self.harness_override is not None else self.kernel.harness

    def previous(self) -> KernelVersion | None:
        return self.kernel.versions.filter(number__lt=self.number).order_by("-number").first()

    def next(self) -> KernelVersion | None:
        return self.kernel.versions.filter(number__gt=self.number).order_by("number").first()

    def diff_from(self, other: KernelVersion) -> str:
        """A unified diff from another version's source to this one's."""
        return version_diff(other.source, self.source, other.number, self.number)


def version_diff(old: str, new: str, old_number: int, new_number: int) -> str:
    """A unified diff between two versions' texts, labelled with their numbers."""
    return text_diff(old, new, f"v{old_number}", f"v{new_number}")


def text_diff(old: str, new: str, old_label: str, new_label: str) -> str:
    """A unified diff between two texts (an archived version and a reader's fork of it)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=old_label,
        tofile=new_label,
    )
    return "".join(lines)


# What a session file may be called: a relative path a program can fetch().
FILE_NAME = re.compile(r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")


def check_file_name(name: str) -> str:
    """name if a program may fetch() it by that name; ValueError saying why not."""
    if not FILE_NAME.fullmatch(name) or ".." in name.split("/") or len(name) > 200:
        raise ValueError(
            f"{name!r} is not a file name a program can fetch: use letters, digits, '.', "
            "'_', '-' and '/' between folders, 200 characters at most."
        )
    return name


class SessionFile(models.Model):
    """A file a session's host programs may fetch() (trained weights, test data).

    Staff upload it; it is read-only after (a run's key holds its sha256, so changing
    it would change what stored runs mean). Kept in the database, not under MEDIA: the
    size is capped (SESSION_FILE_MAX_BYTES), it travels with the session's export,
    and the web tier stays stateless.
    """

    session = models.ForeignKey(
        "tutoring_sessions.Session", on_delete=models.CASCADE, related_name="files"
    )
    name = models.CharField(max_length=200, help_text="The name a program fetch()es it by.")
    content_type = models.CharField(max_length=100, blank=True)
    size = models.PositiveIntegerField(editable=False)
    sha256 = models.CharField(max_length=64, editable=False)
    data = models.BinaryField()
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["session", "name"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="session_file_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug}/{self.name}"

    def save(self, *args, **kwargs) -> None:
        data = bytes(self.data)
        self.size = len(data)
        self.sha256 = hashlib.sha256(data).hexdigest()
        super().save(*args, **kwargs)
        self.session.touch()


class Blob(models.Model):
    """One file's bytes, stored once whatever number of program states hold it: a file
    a learner did not change between two turns costs one row of StateFile, not a copy."""

    sha256 = models.CharField(max_length=64, primary_key=True, editable=False)
    size = models.PositiveIntegerField(editable=False)
    data = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size:,} bytes)"

    @classmethod
    def store(cls, contents: list[bytes]) -> list[str]:
        """Store each content not stored yet, in one insert; their sha256s, in order."""
        blobs = {hashlib.sha256(data).hexdigest(): data for data in contents}
        have = set(cls.objects.filter(pk__in=list(blobs)).values_list("pk", flat=True))
        cls.objects.bulk_create(
            (
                cls(sha256=key, size=len(data), data=data)
                for key, data in blobs.items()
                if key not in have
            ),
            ignore_conflicts=True,
        )
        return [hashlib.sha256(data).hexdigest() for data in contents]


class ProgramState(models.Model):
    """The learner's project as it stood after a turn: every file it held then (pages,
    scripts, shaders, data written in the session), and the program that runs it.

    A turn links to the state it wrote or reviewed (Turn.state); a kernel version made
    in it links here too (KernelVersion.state), and its replay runs this state's program
    with fetch() served from these files over the session's uploaded files
    (SessionFile). Numbered in the order the session made them.
    """

    class Kind(models.TextChoices):
        WEBGPU = "webgpu", "WebGPU"
        TRITON = "triton", "Triton"
        CUDA = "cuda", "CUDA"

    session = models.ForeignKey(
        "tutoring_sessions.Session", on_delete=models.CASCADE, related_name="states"
    )
    number = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.WEBGPU)
    # The file whose program runs: a page (its scripts) or a script; "" when the state
    # holds no program that can run here (shaders only).
    entry = models.CharField(max_length=200, blank=True)
    # sha256 over the entry, the kind and every (path, file sha256): two states with the
    # same digest run the same program on the same files.
    digest = models.CharField(max_length=64, editable=False)
    # The shader modules its files hold, in path order: [{"kernel": name, "version": n}].
    modules = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["session", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="state_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="state_number_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug} state {self.number}"

    @staticmethod
    def digest_of(entry: str, kind: str, files: dict[str, str]) -> str:
        """files: path → sha256."""
        content = json.dumps([entry, kind, sorted(files.items())], separators=(",", ":"))
        return hashlib.sha256(content.encode()).hexdigest()

    def file_shas(self) -> dict[str, str]:
        """path → sha256 of each file the state holds."""
        return dict(self.files.values_list("path", "blob_id"))

    def file_data(self) -> dict[str, bytes]:
        """path → content of each file the state holds."""
        rows = self.files.values_list("path", "blob__data")
        return {path: bytes(data) for path, data in rows}


class StateFile(models.Model):
    """A file of a program state: its path in the project, its content by address."""

    state = models.ForeignKey(ProgramState, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=200)
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["state", "path"]
        constraints = [
            models.UniqueConstraint(fields=["state", "path"], name="state_file_path_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.state} {self.path}"


class RunQuerySet(models.QuerySet):
    def for_key(self, source_sha256: str, harness_digest: str, environment_id: str):
        return self.filter(
            source_sha256=source_sha256,
            harness_digest=harness_digest,
            environment_id=environment_id,
        )

    def fleet_environment_id(self) -> str | None:
        """Where the replay workers run now: the environment of the newest finished run."""
        done = self.filter(state=Run.State.DONE).exclude(environment_id__in=("", "none"))
        return done.order_by("-finished").values_list("environment_id", flat=True).first()

    def cached(self, source_sha256: str, harness_digest: str, environment_id: str):
        """The finished runs that may stand in for a new one, newest first."""
        runs = self.for_key(source_sha256, harness_digest, environment_id)
        return runs.filter(state=Run.State.DONE, cacheable=True).order_by("-finished")


class Run(models.Model):
    """One execution of kernel sources under a harness on one environment.

    Runs are keyed by content, not by version: the same source under the same harness
    on the same adapter is the same run, whichever session it appears in.
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"

    # sha256 over every kernel source the harness's passes use (kernels.jobs.sources_digest).
    source_sha256 = models.CharField(max_length=64)
    harness_digest = models.CharField(max_length=64)
    environment_id = models.CharField(max_length=64)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    status = models.CharField(
        max_length=20, blank=True, choices=[(s.value, s.label) for s in Status]
    )
    cacheable = models.BooleanField(default=False)
    outcome = models.JSONField(default=dict, blank=True)
    # What a host program's trace draws (kernels/trace_pictures.py), drawn from the outcome
    # when it is stored, so that a page only reads it. None for a run with no program
    # trace, and for one stored before pictures were: drawn on its first view, then kept.
    picture = models.JSONField(null=True, blank=True)
    adapter = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(default=timezone.now)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    # host:pid of the process that last took it: a killed worker shows here.
    worker = models.CharField(max_length=200, blank=True)
    # For staff, never for readers: why it crashed (each dead worker's pid, how it ended
    # and the tail of its stderr), or a traceback.
    detail = models.TextField(blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        constraints = [
            # Identical concurrent requests share one run: at most one unfinished run
            # per key. A second request that hits this joins the first.
            models.UniqueConstraint(
                fields=["source_sha256", "harness_digest", "environment_id"],
                condition=~Q(state="done"),
                name="run_one_in_flight_per_key",
            ),
        ]
        indexes = [
            # A job's runs, for the run a reader sees (replay._find_run) and the newest run
            # a stored answer is checked against (replay.newest_run): without it both read
            # the whole table.
            models.Index(fields=["source_sha256", "harness_digest"], name="run_by_job"),
            # The fleet's environment under REPLAY_BACKEND=celery (fleet_environment_id).
            models.Index(fields=["-finished"], name="run_newest_finished"),
            # The cache lookup on every replay (RunQuerySet.cached).
            models.Index(
                fields=["source_sha256", "harness_digest", "environment_id", "-finished"],
                name="run_cache_lookup",
                condition=Q(state="done", cacheable=True),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} {self.state} {self.status}"


class ForkQuerySet(models.QuerySet):
    def viewable_by(self, user) -> ForkQuerySet:
        """A fork is as visible as its session: one made private hides its forks too."""
        return self.filter(version__kernel__session__in=Session.objects.viewable_by(user))

    def embeddable(self) -> ForkQuerySet:
        return self.filter(version__kernel__session__in=Session.objects.embeddable())


class Fork(models.Model):
    """A reader's edit of an archived version, run under that version's harness.

    Its id is a content address (Fork.addresses): the same edit of the same version under
    the same harness is the same fork, so its URL can be shared and embedded for good.
    Its runs are found by content like a version's (kernels.replay.job_for(as_version())).
    Forks made before ids had 130 bits keep their 12 characters (60 bits).
    """

    id = models.CharField(primary_key=True, max_length=52, editable=False)
    version = models.ForeignKey(KernelVersion, on_delete=models.CASCADE, related_name="forks")
    source = models.TextField()
    # Only for a version with a host program: the reader's edit of it.
    host_program = models.TextField(blank=True)
    created = models.DateTimeField(default=timezone.now)

    objects = ForkQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"fork {self.id} of {self.version}"

    def get_absolute_url(self) -> str:
        return reverse("kernels:fork", args=[self.id])

    @staticmethod
    def addresses(
        version_id: int, source: str, host_program: str, harness_digest: str
    ) -> tuple[str, str]:
        """The ids a fork of this content may have, in the order they are tried: 26
        characters of base32 over what it runs (130 bits, no look-alike case), and all 52
        (the whole SHA-256) for the edit that meets another with the same 26."""
        content = json.dumps([version_id, source, host_program, harness_digest])
        digest = hashlib.sha256(content.encode()).digest()
        whole = base64.b32encode(digest).decode().lower().rstrip("=")
        return whole[:26], whole

    def holds(self, version: KernelVersion, source: str, host_program: str) -> bool:
        """Whether this fork is that edit: the whole content compared, not its hash."""
        return (self.version_id, self.source, self.host_program) == (
            version.pk,
            source,
            host_program,
        )

    def as_version(self) -> KernelVersion:
        """The edited version, never saved: replayed and shown as an archived one is. It
        has no id, so a host program is checked against the kernel's final program."""
        version = self.version
        return KernelVersion(
            kernel=version.kernel,
            number=version.number,
            source=self.source,
            sha256=sha256_text(self.source),
            host_program=self.host_program,
            turn_id=version.turn_id,
            harness_override=version.harness_override,
            state_id=version.state_id,
            meta=version.meta,
        )
