from __future__ import annotations

import difflib

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from config.ratelimit import client_key, hit
from kernels import pictures, replay
from kernels.models import Kernel, KernelVersion, Run
from kernels.outcomes import Status
from sessions.markdown import render_code, render_source
from sessions.models import Session, Turn


def _get_session_for_user(request: HttpRequest, slug: str) -> Session:
    return get_object_or_404(Session.objects.viewable_by(request.user), slug=slug)


def _get_reviewed_turn(request: HttpRequest, slug: str, number: int) -> Turn:
    session = _get_session_for_user(request, slug)
    turn = session.turns.select_related("kernel_version__kernel__session").filter(number=number)
    turn = turn.first()
    if turn is None:
        raise Http404(f"This session has no turn {number}.")
    if turn.kernel_version is None:
        raise Http404(
            f"Turn {number} did not submit or review a kernel, so there is nothing to replay."
        )
    return turn


def replay_turn_number(version: KernelVersion | None) -> int | None:
    """The turn whose replay page shows this version: the first that reviewed it."""
    if version is None:
        return None
    first = version.turns.order_by("number").values_list("number", flat=True).first()
    if first is None and version.turn_id:
        first = version.turn.number
    return first


def _version_link(version: KernelVersion | None) -> dict | None:
    number = replay_turn_number(version)
    if version is None or number is None:
        return None
    url = reverse("kernels:replay", args=[version.kernel.session.slug, number])
    return {"version": version, "url": url, "turn": number}


def _start_or_find(
    job: replay.Job, fresh: bool = False
) -> tuple[Run | None, replay.ReplayUnavailable | None]:
    """A run to show, starting one if none exists; or the reason none can start now."""
    run = None if fresh else replay.find_run(job)
    if run is not None:
        return run, None
    try:
        return replay.start_run(job, fresh=fresh), None
    except replay.ReplayUnavailable as unavailable:
        return None, unavailable


def run_payload(run: Run | None, version: KernelVersion) -> dict:
    """What replay.json returns, and what the page's script renders from."""
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
            body["outcome"] = run.outcome
            body["matches_expected"] = (
                run.status == version.expected_status if version.expected_status else None
            )
    return body


@require_http_methods(["GET", "POST"])
def replay_page(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    turn = _get_reviewed_turn(request, slug, number)
    version = turn.kernel_version
    session = version.kernel.session
    fresh = request.method == "POST"
    if fresh:
        wait = hit("replay-fresh", client_key(request), settings.REPLAY_FRESH_PER_MINUTE, 60)
        if wait:
            messages.error(request, f"You have asked for many fresh runs; try again in {wait} s.")
            return redirect(request.path)

    problem, run, busy = "", None, None
    try:
        job = replay.job_for(version)
    except replay.ReplayProblem as error:
        problem = str(error)
    else:
        run, busy = _start_or_find(job, fresh=fresh)
        if fresh:
            return redirect(request.path)

    previous, following = version.previous(), version.next()
    outcome = run.outcome if run and run.state == Run.State.DONE else None
    compile_error = (outcome or {}).get("compile") or {}
    error_lines = (
        [compile_error["line"]]
        if compile_error.get("kernel", "self") == "self" and compile_error.get("line")
        else []
    )
    diff = ""
    if previous:
        diff = "".join(
            difflib.unified_diff(
                previous.source.splitlines(keepends=True),
                version.source.splitlines(keepends=True),
                fromfile=f"v{previous.number}",
                tofile=f"v{version.number}",
            )
        )
    context = {
        "session": session,
        "turn": turn,
        "version": version,
        "kernel": version.kernel,
        "source_html": render_source(version.source, "wgsl", error_lines),
        "diff_html": render_code(diff, "diff") if diff else "",
        "previous": _version_link(previous),
        "next": _version_link(following),
        "run": run,
        "outcome": outcome,
        "status": Status(outcome["status"]) if outcome else None,
        "figures": pictures.figures(outcome) if outcome else [],
        "problem": problem,
        "busy": busy,
        "json_url": reverse("kernels:replay_json", args=[session.slug, turn.number]),
        "introduced_at": version.turn,
    }
    return render(request, "kernels/replay.html", context)


def _int_or_none(value: str) -> int | None:
    return int(value) if value.isdigit() and len(value) < 19 else None


@require_GET
def replay_json(request: HttpRequest, slug: str, number: int) -> JsonResponse:
    turn = _get_reviewed_turn(request, slug, number)
    version = turn.kernel_version
    try:
        job = replay.job_for(version)
    except replay.ReplayProblem as error:
        return JsonResponse({"error": str(error), "state": "none"}, status=422)
    try:
        wait = min(max(float(request.GET.get("wait", "0")), 0.0), 10.0)
    except ValueError:
        return JsonResponse({"error": "wait must be a number of seconds (0 to 10)."}, status=400)
    if not replay.backend().long_poll:
        wait = 0.0

    if "run" in request.GET:
        # The page polls the run it is showing, and never starts another by asking.
        run = Run.objects.filter(
            pk=_int_or_none(request.GET["run"]),
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
        ).first()
        if run is None:
            return JsonResponse({"error": "No such run of this kernel.", "state": "none"}, status=404)
        busy = None
    else:
        run, busy = _start_or_find(job)
    if run is None:
        response = JsonResponse({"error": str(busy), "state": "busy"}, status=503)
        response["Retry-After"] = str(busy.retry_after)
        return response
    if wait and run.state != Run.State.DONE:
        run = replay.wait(run, wait)
    status = 200 if run.state == Run.State.DONE else 202
    return JsonResponse(run_payload(run, version), status=status)


@require_GET
def timeline(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    session = _get_session_for_user(request, slug)
    kernel = get_object_or_404(Kernel, session=session, name=name)
    rows = []
    for version in kernel.versions.select_related("turn", "kernel__session"):
        try:
            run = replay.find_run(replay.job_for(version))
        except replay.ReplayProblem:
            run = None
        rows.append({"version": version, "link": _version_link(version), "run": run})
    return render(
        request, "kernels/timeline.html", {"session": session, "kernel": kernel, "rows": rows}
    )
