"""The learner's programs as the archive keeps them: kernels and their versions, the
states of the project a session wrote (files stored once by content), and the files staff
attach to a session. sessions.models imports this module, so Django counts these models
as the archive's (app label tutoring_sessions); their tables keep the names they had when
they belonged to the kernels app.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from kernels.engine.outcome import Status


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
        db_table = "kernels_kernel"
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

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        self.session.touch()

    def get_absolute_url(self) -> str:
        return reverse("kernels:timeline", args=[self.session.slug, self.name])

    @classmethod
    def name_problem(cls, name: str) -> str:
        """Why name cannot name a kernel, in the words the admin uses; "" if it can."""
        field = cls._meta.get_field("name")
        assert isinstance(field, models.CharField)
        try:
            field.clean(name, None)
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
        "ProgramState",
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
        db_table = "kernels_kernelversion"
        ordering = ["kernel", "number"]
        constraints = [
            models.UniqueConstraint(fields=["kernel", "number"], name="version_number_unique"),
            models.CheckConstraint(condition=Q(number__gte=1), name="version_number_from_one"),
        ]

    def __str__(self) -> str:
        return f"{self.kernel} v{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.sha256 = sha256_text(self.source)
        super().save(*args, **kwargs)
        self.kernel.session.touch()

    @property
    def harness(self) -> dict[str, Any]:
        own = self.harness_override
        spec: dict[str, Any] = own if own is not None else self.kernel.harness
        return spec

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
        db_table = "kernels_sessionfile"
        ordering = ["session", "name"]
        constraints = [
            models.UniqueConstraint(fields=["session", "name"], name="session_file_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.session.slug}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
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

    class Meta:
        db_table = "kernels_blob"

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size:,} bytes)"

    @staticmethod
    def store(contents: list[bytes]) -> list[str]:
        """Store each content not stored yet, in one insert; their sha256s, in order."""
        # Each hashed once: a buffer kept whole is up to 64 MiB (kernels/whole_buffers.py).
        digests = [hashlib.sha256(data).hexdigest() for data in contents]
        blobs = dict(zip(digests, contents, strict=True))
        have = set(Blob.objects.filter(pk__in=list(blobs)).values_list("pk", flat=True))
        Blob.objects.bulk_create(
            (
                Blob(sha256=key, size=len(data), data=data)
                for key, data in blobs.items()
                if key not in have
            ),
            ignore_conflicts=True,
        )
        return digests


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
        db_table = "kernels_programstate"
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
        db_table = "kernels_statefile"
        ordering = ["state", "path"]
        constraints = [
            models.UniqueConstraint(fields=["state", "path"], name="state_file_path_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.state} {self.path}"
