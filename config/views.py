from __future__ import annotations

import hmac
import time

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from kernels.replay import replay_health
from tutor.llm import tutor_health


def _database_health() -> dict:
    started = time.perf_counter()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as error:
        return {"ok": False, "error": str(error).splitlines()[0][:200]}
    return {
        "ok": True,
        "vendor": connection.vendor,
        "ms": round(1000 * (time.perf_counter() - started), 2),
    }


def _may_see_details(request: HttpRequest) -> bool:
    """Staff, or a monitor presenting HEALTHZ_TOKEN as a bearer token."""
    if request.user.is_authenticated and request.user.is_staff:
        return True
    token = settings.HEALTHZ_TOKEN
    presented = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(presented.encode(), token.encode())


@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Anyone may ask whether Kernelbin is up; only staff or a monitor see why not.

    Worker PIDs, drivers and crash counts help an attacker as much as an operator.
    """
    database = _database_health()
    replay = replay_health()
    if not (database["ok"] and replay["ok"]):
        status = "degraded"
    elif replay.get("full"):
        status = "busy"  # new replays are turned away until the queue drains
    else:
        status = "ok"
    body: dict = {"status": status}
    if _may_see_details(request):
        body |= {"database": database, "replay": replay, "tutor": tutor_health()}
    return JsonResponse(body, status=200 if database["ok"] else 503)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, DisallowedHost):
        # Django's own text advises the operator on ALLOWED_HOSTS: not for visitors.
        message = "This server does not answer to that host name."
    else:
        message = str(exception)
    return render(request, "400.html", {"message": message}, status=400)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"message": message}, status=404)
