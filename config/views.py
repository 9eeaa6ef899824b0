from __future__ import annotations

import time

from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kernels.replay import replay_health


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


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    database = _database_health()
    replay = replay_health()
    ok = database["ok"] and replay["ok"]
    body = {"status": "ok" if ok else "degraded", "database": database, "replay": replay}
    return JsonResponse(body, status=200 if database["ok"] else 503)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return render(request, "400.html", {"message": str(exception)}, status=400)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"message": message}, status=404)
