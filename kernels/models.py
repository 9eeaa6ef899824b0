from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from kernels.engine.outcome import Status
from sessions.models import Session
from sessions.programs import Blob, KernelVersion, StateFile, sha256_text


class RunQuerySet(models.QuerySet["Run"]):
    def for_key(self, source_sha256: str, harness_digest: str, environment_id: str) -> RunQuerySet:
        return self.filter(
            source_sha256=source_sha256,
            harness_digest=harness_digest,
            environment_id=environment_id,
        )

    def fleet_environment_id(self) -> str | None:
        """Where the replay workers run now: the environment of the newest finished run."""
        done = self.filter(state=Run.State.DONE).exclude(environment_id__in=("", "none"))
        # A Triton or CUDA program's run names its GPU (kernels/engine/gpu_run.py): not
        # where the WebGPU replays run.
        done = done.exclude(environment_id__startswith="cuda:")
        return done.order_by("-finished").values_list("environment_id", flat=True).first()

    def cached(self, source_sha256: str, harness_digest: str, environment_id: str) -> RunQuerySet:
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


class ForkQuerySet(models.QuerySet["Fork"]):
    def viewable_by(self, user: User | AnonymousUser) -> ForkQuerySet:
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
        has no id, so a host program is checked against the kernel's final program, and
        a Triton or CUDA fork's source (the whole file it edits) runs in its file's place
        (kernels.jobs.gpu_program_job)."""
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


class GpuForkRunQuerySet(models.QuerySet["GpuForkRun"]):
    def started_by(self, user: User, since: timedelta) -> GpuForkRunQuerySet:
        """The runs this reader started within the period up to now, oldest first."""
        return self.filter(user=user, created__gte=timezone.now() - since).order_by("created")


class GpuForkRun(models.Model):
    """A run of a Triton or CUDA fork that a signed-in reader started: what their daily
    quota counts (GPU_FORKS_PER_DAY, kernels/forks.py). A fork served from a stored run,
    or joining one in flight, starts none and costs nothing. Kept when its run is gone:
    the GPU time was spent."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="gpu_fork_runs"
    )
    fork = models.ForeignKey(Fork, on_delete=models.CASCADE, related_name="gpu_runs")
    # One reader pays for a run, however many asked for it while it was in flight.
    run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="started_by"
    )
    created = models.DateTimeField(default=timezone.now)

    objects = GpuForkRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created"]
        indexes = [
            # The quota: a reader's runs over the last 24 hours.
            models.Index(fields=["user", "created"], name="gpu_fork_run_user_created"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ran {self.fork_id} ({self.created:%Y-%m-%d %H:%M})"


class WorkerQuerySet(models.QuerySet["Worker"]):
    def connected(self) -> WorkerQuerySet:
        """Workers whose announcement is recent enough (WORKER_SEEN_WITHIN seconds)."""
        since = timezone.now() - timedelta(seconds=settings.WORKER_SEEN_WITHIN)
        return self.filter(seen__gte=since)

    def offering(self, capability: str) -> list[Worker]:
        """Connected workers that offer this capability ("webgpu", "triton", "cuda"); a
        fleet has a few, read whole (SQLite has no lookup into a JSON list)."""
        return [w for w in self.connected() if capability in w.capabilities]


class Worker(models.Model):
    """A Celery worker as it announced itself (kernels/tasks.py): what it offers, on which
    GPU, renewed while it runs and removed when it stops."""

    name = models.CharField(max_length=200, unique=True)
    # The capabilities it offers: "webgpu", "triton", "cuda" (kernels.jobs.capability).
    capabilities = models.JSONField(default=list)
    gpu = models.CharField(max_length=200, blank=True)
    seen = models.DateTimeField(default=timezone.now)

    objects = WorkerQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(self.capabilities)})"


class KeptBufferQuerySet(models.QuerySet["KeptBuffer"]):
    def of_run(self, run: Run) -> KeptBufferQuerySet:
        """The buffers kept whole from runs of the same job as this run (by content, as
        runs are: a fork that runs what a version runs shares them)."""
        return self.filter(source_sha256=run.source_sha256, harness_digest=run.harness_digest)

    def delete_with_bytes(self) -> None:
        """Delete these, and their bytes where nothing else holds them (another kept
        buffer, a program state's file): up to 64 MiB each."""
        held = set(self.values_list("blob_id", flat=True))
        self.delete()
        held -= set(KeptBuffer.objects.filter(blob__in=held).values_list("blob_id", flat=True))
        held -= set(StateFile.objects.filter(blob__in=held).values_list("blob_id", flat=True))
        Blob.objects.filter(pk__in=held).delete()


class KeptBuffer(models.Model):
    """One storage buffer after one pass of a job, kept whole on a reader's request
    (kernels/whole_buffers.py), where the run's capture kept only its first cells.

    Keyed by the job's content like a run (source_sha256, harness_digest: the plain
    replay's, which the page shows), and kept once per pass and buffer. Its bytes are a
    Blob, stored once whatever asks for them; picture: the block means the page draws
    (pictures.block_means), computed once, when it is kept.
    """

    source_sha256 = models.CharField(max_length=64)
    harness_digest = models.CharField(max_length=64)
    pass_number = models.PositiveIntegerField()
    buffer = models.CharField(max_length=200)
    dtype = models.CharField(max_length=8)
    shape = models.JSONField(default=list)
    count = models.PositiveBigIntegerField()
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="+")
    picture = models.JSONField(default=dict)
    # The run that kept it, and the adapter it ran on.
    run = models.ForeignKey(Run, null=True, on_delete=models.SET_NULL, related_name="+")
    adapter = models.CharField(max_length=200, blank=True)
    created = models.DateTimeField(default=timezone.now)

    objects = KeptBufferQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source_sha256", "harness_digest", "pass_number", "buffer"],
                name="kept_buffer_once_per_job_pass_buffer",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.buffer} after pass {self.pass_number} ({self.count:,} {self.dtype})"
