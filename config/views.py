from __future__ import annotations

import hmac
import sys
import time
from typing import Any

from csp.utils import build_policy
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.db import DatabaseError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from kernels.replay import replay_health
from tutor.llm import tutor_health


def _database_health() -> dict[str, Any]:
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
    body: dict[str, Any] = {"status": status}
    if _may_see_details(request):
        body |= {"database": database, "replay": replay, "tutor": tutor_health()}
    return JsonResponse(body, status=200 if database["ok"] else 503)


# Django's headers for every page, set on the error pages an outer middleware answers (a
# bad Host is refused before the middleware that would add them runs).
ERROR_PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def _error_page(
    request: HttpRequest, template: str, context: dict[str, Any], status: int
) -> HttpResponse:
    response = render(request, template, context, status=status)
    for header, value in ERROR_PAGE_HEADERS.items():
        response.headers.setdefault(header, value)
    response.headers.setdefault(
        "Content-Security-Policy", build_policy(settings.CONTENT_SECURITY_POLICY["DIRECTIVES"])
    )
    return response


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, DisallowedHost):
        # Django's own text advises the operator on ALLOWED_HOSTS: not for visitors.
        message = "This server does not answer to that host name."
    else:
        message = str(exception)
    return _error_page(request, "400.html", {"message": message}, 400)


def _database_busy(error: BaseException | None) -> bool:
    """SQLite's write lock stayed taken past SQLITE_BUSY_TIMEOUT."""
    return isinstance(error, OperationalError) and "locked" in str(error)


def server_error(request: HttpRequest) -> HttpResponse:
    """500, or 503 with Retry-After when the database was too busy to write: that request
    may simply be sent again."""
    if not _database_busy(sys.exc_info()[1]):
        return defaults.server_error(request)
    retry = settings.DATABASE_BUSY_RETRY_AFTER
    context = {"retry_after": retry}
    response = _error_page(request, "503.html", context, 503)
    response["Retry-After"] = str(retry)
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"message": message}, status=404)
