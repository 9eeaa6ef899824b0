from __future__ import annotations

import json
import math
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache as page_cache
from django.core.files.uploadedfile import UploadedFile
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from config.context_processors import site_origin
from config.ratelimit import client_key, hit
from kernels import forks, jobs, pictures, replay, whole_buffers
from kernels.digits import EmptyDrawing, drawing_harness, preprocess
from kernels.engine.host.check import harness_values
from kernels.engine.outcome import Status, output_list, output_values
from kernels.engine.run_warnings import as_stored
from kernels.models import Run
from kernels.program_lines import file_lines, in_file
from kernels.speed_figures import timeline_speeds, version_change
from pages import embedding, fork_form, reader_pages, story
from pages.access import get_session_for_user
from pages.host_context import host_context, host_diff_html
from pages.outcome_context import outcome_context
from pages.pass_context import passes_context
from pages.stamps import OPENABLE, Prepared, stamp
from sessions.markdown import render_code
from sessions.models import Session, Turn
from sessions.programs import Kernel, KernelVersion

if TYPE_CHECKING:
    from typing_extensions import TypeIs


def get_reviewed_turn(request: HttpRequest, slug: str, number: int) -> tuple[Turn, KernelVersion]:
    """The turn and the version it reviewed, if this user may open its session and it
    reviewed one; else 404."""
    # One query on the way to a replay: the session's visibility rides along as a filter.
    turn = (
        Turn.objects.select_related("kernel_version__kernel__session")
        .filter(session__in=Session.objects.viewable_by(request.user))
        .filter(session__slug=slug, number=number)
        .first()
    )
    if turn is None:
        get_session_for_user(request, slug)  # a missing or hidden session says so first
        raise Http404(f"This session has no turn {number}.")
    if turn.kernel_version is None:
        raise Http404(
            f"Turn {number} did not submit or review a kernel, so there is nothing to replay."
        )
    return turn, turn.kernel_version


def replay_turn_number(version: KernelVersion | None) -> int | None:
    """The turn whose replay page shows this version: the first that reviewed it."""
    if version is None:
        return None
    first = version.turns.order_by("number").values_list("number", flat=True).first()
    if first is None and version.turn is not None:
        first = version.turn.number
    return first


def _version_link(version: KernelVersion | None) -> dict[str, Any] | None:
    number = replay_turn_number(version)
    if version is None or number is None:
        return None
    url = reverse("kernels:replay", args=[version.kernel.session.slug, number])
    return {"version": version, "url": url, "turn": number}


def _run_payload(shown: replay.Replay, outcome: object = None) -> dict[str, Any]:
    """What replay.json returns, and what the page's script renders from (outcome: what
    stands in for a finished run's outcome, by default the outcome)."""
    version, run = shown.version, shown.run
    body = {
        "kernel": version.kernel.name,
        "version": version.number,
        "sha256": version.sha256,
        "expected_status": version.expected_status or None,
        "state": run.state if run else "none",
    }
    if run is not None:
        body["run"] = {"id": run.pk, "created": run.created.isoformat(), "adapter": run.adapter}
        if run.state == Run.State.DONE:
            body["outcome"] = as_stored(shown.outcome or {}) if outcome is None else outcome
            body["matches_expected"] = (
                run.status == version.expected_status if version.expected_status else None
            )
    return body


@require_http_methods(["GET", "POST"])
@reader_pages.one_render_at_a_time("replay")
def replay_page(request: HttpRequest, slug: str, number: int, key: str | None) -> HttpResponse:
    kept = reader_pages.stored(key, STORED_ANSWER, slug=slug)
    if kept is not None:
        return reader_pages.serve_page(request, kept)
    found = stamp(OPENABLE, slug) if key is not None else None
    turn, version = get_reviewed_turn(request, slug, number)
    session = version.kernel.session
    fresh = request.method == "POST"
    if fresh:
        wait = hit("replay-fresh", client_key(request), settings.REPLAY_FRESH_PER_MINUTE, 60)
        if wait:
            messages.error(request, f"You have asked for many fresh runs; try again in {wait} s.")
            return redirect(request.path)

    shown = replay.for_reader(version, start=True, fresh=fresh)
    if fresh and not shown.problem:
        return redirect(request.path)
    kept_buffer = _newest_kept(key, shown)

    previous, following = version.previous(), version.next()
    outcome = shown.outcome
    before = replay.for_reader(previous).run if previous else None
    change = (
        version_change(outcome, before.outcome, previous.number)
        if previous is not None and _done(before)
        else None
    )
    diff = version.diff_from(previous) if previous else ""
    context = {
        **outcome_context(shown),
        "passes": passes_context(
            outcome,
            request.GET.get("pass"),
            shown.finished_run,
            {
                "whole": reverse("kernels:whole_buffer", args=[session.slug, turn.number]),
                "npy": reverse("kernels:whole_buffer_npy", args=[session.slug, turn.number]),
            },
        ),
        "session": session,
        "turn": turn,
        "kernel": version.kernel,
        "diff_html": render_code(diff, "diff") if diff else "",
        "host": host_context(version, outcome, run=shown.run),
        "host_diff_html": host_diff_html(version, previous),
        "previous": _version_link(previous),
        "next": _version_link(following),
        "change": change,
        "digits": (
            _digits_figure(version, shown.run)
            if shown.run and outcome and outcome.get("report")
            else None
        ),
        "problem": shown.problem,
        "busy": shown.busy,
        "missing": shown.missing,
        "json_url": reverse("kernels:replay_json", args=[session.slug, turn.number]),
        "introduced_at": version.turn,
        "program": _program_context(version),
        "intent": story.intent(version, outcome),
        "explained_at": story.explaining_turn(turn),
        "share": _share(request, turn, version),
        **_fork_editor(request, version),
        **_embedding_context(request, turn),
    }
    response, swaps = reader_pages.render_page(request, key, "kernels/replay.html", context)
    pending = bool(context["passes"] and context["passes"]["pending"])
    also = (kept_buffer,)
    reader_pages.keep(key, None if pending else found, shown, response.content, swaps, also)
    return response


def _newest_kept(key: str | None, shown: replay.Replay) -> int | None:
    """The newest buffer kept whole of the shown run's job, for a page to be kept (which
    STORED_ANSWER checks): read before the page is made, never newer than it."""
    if key is None or shown.run is None:
        return None
    return whole_buffers.newest_kept_id(shown.run)


def _fork_editor(request: HttpRequest, version: KernelVersion) -> dict[str, Any]:
    """What "Try your own fix" offers: the version's kernel and host program, or the file
    of a Triton or CUDA program (a sign-in link for a reader who is not signed in)."""
    gpu_file = fork_form.gpu_file(version, request.user)
    texts = [gpu_file["text"]] if gpu_file else [version.source, version.host_program]
    return {
        "gpu_file": gpu_file,
        "fork_source": gpu_file["text"] if gpu_file else version.source,
        "sign_in_url": fork_form.sign_in_url(request.path),
        # A version longer than a fork may be gets no editor (it would carry the whole
        # text into the page, only to be refused).
        "forkable": max(len(text) for text in texts) <= settings.FORK_MAX_CHARS,
    }


def _share(request: HttpRequest, turn: Turn, version: KernelVersion) -> dict[str, Any]:
    """What a shared link to a replay page shows: its URL, title and card."""
    origin = site_origin(request)
    title = f"{version.kernel.name} v{version.number} replayed · {turn.session.title}"
    card = reverse("kernels:turn_card", args=[turn.session.slug, turn.number])
    description = f"Kernel {version.kernel.name} v{version.number}, replayed on the server."
    return {
        "title": title,
        "description": f"{version.note} {description}" if version.note else description,
        "url": origin + request.path,
        "image": origin + card,
    }


def _program_context(version: KernelVersion) -> dict[str, Any] | None:
    """The program state the version was written in: its entry, its files, and its shader
    modules (this one marked), each linked to its kernel's timeline."""
    state = version.state
    if state is None:
        return None
    slug = version.kernel.session.slug
    modules = [
        {
            "kernel": module["kernel"],
            "version": module["version"],
            "this": (module["kernel"], module["version"]) == (version.kernel.name, version.number),
            "url": reverse("kernels:timeline", args=[slug, module["kernel"]]),
        }
        for module in state.modules
        if isinstance(module, dict) and Kernel.name_problem(str(module.get("kernel"))) == ""
    ]
    paths = list(state.files.order_by("path").values_list("path", flat=True))
    return {"state": state, "paths": paths, "modules": modules}


def _embedding_context(request: HttpRequest, turn: Turn) -> dict[str, Any]:
    """A replay page's discovery link and the code to embed it, where it may be embedded."""
    if not turn.session.is_embeddable:
        return {}
    origin = site_origin(request)
    target = embedding.replay_target(turn)
    page = f"{origin}{request.path}"
    return {
        "oembed_href": embedding.oembed_href(origin, page),
        "embed_code": embedding.script_code(target, origin),
        "page_url": page,
    }


def _run_id(value: str) -> int:
    """The run a page asks about; 0, which no run has, for anything that is not an id."""
    return int(value) if value.isdigit() and len(value) < 19 else 0


@require_GET
def replay_json(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    """A finished run's answer to a plain GET from a reader who is not signed in is kept
    (per turn and adapter, pages/reader_pages.py) and served while the session is
    unchanged and its run is still the newest of its kernel: one precompiled query, where
    finding the turn, its job and its run takes three and the job's digests (4.6 against
    0.6 ms for /healthz, in process)."""
    key = reader_pages.page_key(request, "replay.json", slug, number)
    npy = reverse("kernels:whole_buffer_npy", args=[slug, number])
    if key is None:
        version = get_reviewed_turn(request, slug, number)[1]
        return replay_json_response(request, version, npy=npy)
    kept = reader_pages.stored(key, STORED_ANSWER, slug=slug)
    if kept is not None:
        return HttpResponse(kept["body"], content_type="application/json")
    found = stamp(OPENABLE, slug)
    shown = replay.for_reader(get_reviewed_turn(request, slug, number)[1], start=True)
    # A buffer kept whole after this answer was kept (its run outlasting the wait of the
    # request that asked) makes the answer stale, as a newer run does.
    also = (_newest_kept(key, shown),)
    response = _answer(shown, {}, npy=npy)
    reader_pages.keep(key, found, shown, response.content, also=also)
    return response


# The session's stamp, the newest run of a kernel's sources under its harness, and the
# newest buffer kept whole of that job.
STORED_ANSWER = Prepared(
    lambda slug, sources, harness: (
        Session.objects.viewable_by(AnonymousUser())
        .filter(slug=slug)
        .annotate(
            newest=replay.newest_run(sources, harness),
            kept=whole_buffers.newest_kept(sources, harness),
        )
        .values_list("pk", "updated", "newest", "kept")
    ),
    ["slug", "sources", "harness"],
)


def replay_json_response(
    request: HttpRequest,
    version: KernelVersion,
    extra: dict[str, Any] | None = None,
    start: bool = True,
    npy: str = "",
) -> HttpResponse:
    """replay.json of a version, archived or a fork's (extra: what else the answer says;
    start: whether a run is started when none is stored; npy: where its buffers kept
    whole download)."""
    try:
        wait = float(request.GET.get("wait", "0"))
    except ValueError:
        wait = math.nan
    if not math.isfinite(wait):  # nan would pass the clamp below
        return JsonResponse({"error": "wait must be a number of seconds (0 to 10)."}, status=400)
    wait = min(max(wait, 0.0), 10.0)
    if not replay.backend().long_poll:
        wait = 0.0

    if "run" in request.GET:
        # The page polls the run it is showing, and never starts another by asking.
        shown = replay.for_reader(version, run_id=_run_id(request.GET["run"]))
    else:
        shown = replay.for_reader(version, start=start)
    return _answer(shown, extra or {}, wait, npy)


def _answer(
    shown: replay.Replay, extra: dict[str, Any], wait: float = 0.0, npy: str = ""
) -> HttpResponse:
    """replay.json's answer about what a reader sees of a version (waiting up to wait
    seconds for its run to finish), with the buffers kept whole of its job, if any, and
    where each downloads (npy)."""
    if shown.problem:
        return JsonResponse({"error": shown.problem, "state": "none"}, status=422)
    if shown.busy:
        response = JsonResponse({"error": shown.busy, "state": "busy"}, status=503)
        response["Retry-After"] = str(shown.retry_after)
        return response
    if shown.run is None:
        return JsonResponse({"error": "No such run of this kernel.", "state": "none"}, status=404)
    if wait:
        # Answered once the outcome is ready; it is stored after this answer has gone.
        shown.run = replay.wait(shown.run, wait, answer_first=True)
    status = 200 if shown.run.state == Run.State.DONE else 202
    if status == 200 and npy and (kept := whole_buffers.listed(shown.run, npy)):
        extra = {**extra, "whole_buffers": kept}
    return HttpResponse(_run_json(shown, extra), content_type="application/json", status=status)


def _run_json(shown: replay.Replay, extra: dict[str, Any]) -> str:
    """replay.json's body. A stored outcome goes in as the text stored: a cached run's
    outcome is neither parsed nor encoded again on the way out."""
    text = replay.stored_outcome_text(shown.run) if shown.run else None
    lines = file_lines(shown.version)
    if lines is not None and shown.outcome is not None:
        # A program from a page: its error and console name the page's lines, as the
        # replay page does (index.html:193), and "lines" maps any other line of the run.
        outcome = in_file(as_stored(shown.outcome), lines)
        body = {**_run_payload(shown, outcome=outcome), **extra}
        body["lines"] = {"file": lines.file, "starts": [list(s) for s in lines.starts]}
        return json.dumps(body, cls=DjangoJSONEncoder)
    # A run stored before warning_items (its warnings coded items, or sentences) is
    # read and served in today's shape.
    if text is None or '"warning_items":' not in text:
        return json.dumps({**_run_payload(shown), **extra}, cls=DjangoJSONEncoder)
    marker = f"stored-outcome-{uuid.uuid4().hex}"
    framed = json.dumps({**_run_payload(shown, outcome=marker), **extra}, cls=DjangoJSONEncoder)
    return framed.replace(json.dumps(marker), text, 1)


def _done(run: Run | None) -> TypeIs[Run]:
    return run is not None and run.state == Run.State.DONE


@require_GET
def timeline(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    kernel = get_object_or_404(Kernel, session=session, name=name)
    versions = list(kernel.versions.select_related("turn", "kernel__session"))
    # One that cannot be replayed shows as not run; its replay page says why.
    runs = [replay.for_reader(version).run for version in versions]
    rows: list[dict[str, Any]] = [
        {"version": version, "link": _version_link(version), "run": run}
        for version, run in zip(versions, runs, strict=True)
    ]
    finished = [
        (version.number, run.outcome if _done(run) else None)
        for version, run in zip(versions, runs, strict=True)
    ]
    for row, speed in zip(rows, timeline_speeds(finished), strict=True):
        row["speed"] = speed
    # A Triton or CUDA kernel replays its program on a GPU worker, never a harness.
    gpu = any(forks.is_gpu_version(version) for version in versions)
    context = {"session": session, "kernel": kernel, "rows": rows, "gpu_kernel": gpu}
    return render(request, "kernels/timeline.html", context)


def _digits_figure(version: KernelVersion, run: Run) -> dict[str, Any] | None:
    """For a classifier over images: the first digits, then the ones it got wrong."""
    key = f"digits:{run.pk}"
    figure = page_cache.get(key)
    if figure is None:
        figure = _digits(version, run.outcome["report"]["predictions"])
        page_cache.set(key, figure or {}, settings.PAGE_CACHE_SECONDS)
    return figure or None


def _digits(version: KernelVersion, predictions: list[int]) -> dict[str, Any] | None:
    try:
        harness = jobs.parsed_harness(version)
    except jobs.ReplayProblem:
        return None
    if harness is None or harness.reference is None or harness.report is None:
        return None
    # The harness's own inputs: a program that fetch()ed the same digits was checked
    # against a reference fed with them.
    images = harness_values(harness, harness.reference.args[0], settings.FIXTURES_DIR)
    labels = harness_values(harness, harness.report.labels, settings.FIXTURES_DIR)
    if images is None or labels is None or images.ndim != 2 or images.shape[1] != 784:
        return None  # not 28 x 28 images
    labels = labels.reshape(-1)
    if labels.size < len(predictions) or images.shape[0] < len(predictions):
        return None
    wrong = [i for i, p in enumerate(predictions) if p != labels[i]]
    shown = sorted({*range(min(40, len(predictions))), *wrong[:60]})
    svg = pictures.digit_grid(images, labels, predictions, shown)
    return {"svg": svg, "wrong": len(wrong), "count": len(predictions), "shown": len(shown)}


class DigitsProblem(ValueError):
    """What the draw-a-digit page says instead of a classification, with its HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _classifier() -> KernelVersion | None:
    versions = KernelVersion.objects.filter(
        kernel__session__slug=settings.DIGITS_SESSION,
        kernel__session__visibility=Session.Visibility.PUBLIC,
        kernel__name=settings.DIGITS_KERNEL,
    )
    return versions.select_related("kernel__session").order_by("-number").first()


def _read_drawing(upload: UploadedFile | None) -> np.ndarray:
    """The uploaded image as an MNIST-style input, or a DigitsProblem saying what is wrong."""
    from PIL import Image, UnidentifiedImageError

    if upload is None:
        raise DigitsProblem("No drawing was sent: draw a digit, then press Classify.")
    if (upload.size or 0) > settings.DIGITS_MAX_BYTES:
        limit = settings.DIGITS_MAX_BYTES // 1024
        raise DigitsProblem(f"That image is larger than {limit:,} KB.", status=413)
    try:
        with Image.open(upload) as image:
            if image.format not in ("PNG", "JPEG", "GIF", "WEBP", "BMP"):
                raise DigitsProblem("Send a PNG, JPEG, GIF, WebP or BMP image.")
            # Checked before the pixels are decoded: a small file can claim a huge image.
            if max(image.size) > 1024 or min(image.size) < 28:
                raise DigitsProblem(
                    f"The image is {image.width} x {image.height} pixels; "
                    "it must be between 28 and 1024 pixels on each side."
                )
            pixels = np.asarray(image.convert("L"))
    except Image.DecompressionBombError:
        raise DigitsProblem(
            "The image is far too large in pixels; it must be between 28 and 1024 pixels "
            "on each side."
        ) from None
    except (UnidentifiedImageError, OSError):
        raise DigitsProblem("That file is not an image we can read.") from None
    try:
        return preprocess(pixels)
    except EmptyDrawing:
        raise DigitsProblem("The canvas is empty: draw a digit first.") from None
    except ValueError as error:
        raise DigitsProblem(str(error)) from None


def _classify(version: KernelVersion, pixels: np.ndarray) -> dict[str, Any]:
    shown = replay.run_now(version, drawing_harness(version.harness, pixels), answer_first=True)
    if shown.problem:
        raise DigitsProblem(shown.problem, status=500)
    if shown.busy:
        raise DigitsProblem(shown.busy, status=503)
    outcome = shown.outcome
    if outcome is None:
        raise DigitsProblem("The classifier did not finish; try again.", status=503)
    output = next((o for o in outcome.get("outputs", []) if o.get("got")), None)
    got = output_values(output, "got") if output is not None else None
    if outcome["status"] not in (Status.PASSED, Status.MISMATCH) or output is None or got is None:
        raise DigitsProblem(f"The classifier could not run: {outcome['message']}", status=500)
    # A never-written or non-finite score counts as no chance (JSON has no NaN).
    probs = np.nan_to_num(got.filled(0).astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    return {
        "prediction": int(np.argmax(probs)),
        "probabilities": probs.ravel().tolist(),
        "bars": pictures.bars(
            "probabilities", output_list(output, "expected"), got.ravel().tolist()
        ),
        "matches_numpy": outcome["status"] == Status.PASSED,
        "environment": outcome["environment"].get("label", ""),
        "run_ms": outcome["timings"].get("run_ms"),
        "input": pictures.png_data_uri(pixels.reshape(28, 28)),
    }


@require_http_methods(["GET", "POST"])
def digits(request: HttpRequest) -> HttpResponse:
    version = _classifier()
    wants_json = "application/json" in request.headers.get("Accept", "")
    context: dict[str, Any] = {"version": version, "max_kb": settings.DIGITS_MAX_BYTES // 1024}
    if version is None:
        context["problem"] = "The classifier's session is not loaded on this site."
        return render(request, "kernels/digits.html", context, status=503)
    if request.method == "GET":
        return render(request, "kernels/digits.html", context)

    status = 200
    try:
        if wait := hit("digits", client_key(request), settings.DIGITS_PER_MINUTE, 60):
            raise DigitsProblem(f"Too many drawings at once; try again in {wait} s.", status=429)
        context["result"] = _classify(version, _read_drawing(request.FILES.get("image")))
    except DigitsProblem as problem:
        context["problem"], status = str(problem), problem.status
    if wants_json:
        html = render(request, "kernels/_digit_result.html", context).content.decode()
        body = {"html": html, "error": context.get("problem")}
        if result := context.get("result"):
            body.update(prediction=result["prediction"], probabilities=result["probabilities"])
        return JsonResponse(body, status=status)
    return render(request, "kernels/digits.html", context, status=status)
