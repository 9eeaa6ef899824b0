from __future__ import annotations

import json
import re
from urllib.parse import urlencode, urlsplit

from csp.decorators import csp_replace
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.html import format_html
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods

from config.context_processors import site_origin
from kernels import replay
from sessions import search
from sessions.access import get_embeddable_session, get_session_for_user
from sessions.export import export_markdown, export_session
from sessions.forms import CappedUploadHandler, ImportForm
from sessions.importers.files import import_file, size_limit
from sessions.importers.options import ImportOptions
from sessions.importers.writer import ImportProblem
from sessions.models import Session, Tag, Turn
from sessions.templatetags.kernelbin import inline_hash

EMBED_MAX_TURNS = 50
EMBED_STYLES = ("css/theme.css", "css/turns.css", "css/embed.css")
EMBED_SCRIPT = "js/embed.js"
# Embeds may be framed by any site, and run only the CSS and JS we inline into them.
EMBED_CSP = {
    "frame-ancestors": ["*"],
    "script-src": [inline_hash(EMBED_SCRIPT)],
    "style-src": [inline_hash(*EMBED_STYLES)],
}
EMBED_THEMES = ("auto", "light", "dark")
OEMBED_WIDTH = 640
OEMBED_MAX_HEIGHT = 900


def embed_url(origin: str, session: Session, first: int, last: int) -> str:
    path = reverse("sessions:embed", args=[session.slug])
    return f"{origin}{path}?{urlencode({'from': first, 'to': last})}"


def iframe_code(
    origin: str, session: Session, first: int, last: int, width: int, height: int
) -> str:
    return format_html(
        '<iframe src="{}" width="{}" height="{}" title="{}" frameborder="0" loading="lazy">'
        "</iframe>",
        embed_url(origin, session, first, last),
        width,
        height,
        f"{session.title}, turns {first} to {last} (Kernelbin)",
    )


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.listed()
    query = request.GET.get("q", "").strip()[:200]
    tag = None
    if tag_slug := request.GET.get("tag"):
        # Only tags of listed sessions: a private session's tag must not show, nor exist.
        tag = get_object_or_404(
            Tag.objects.filter(sessions__in=Session.objects.listed()).distinct(), slug=tag_slug
        )
        sessions = sessions.filter(tags=tag)
    if query:
        page = _search_page(sessions, query, request.GET.get("page"))
    else:
        newest = sessions.annotate(turn_count=Count("turns")).order_by("-created")
        page = Paginator(newest.prefetch_related("tags"), 20).get_page(request.GET.get("page"))
    tags = Tag.objects.filter(sessions__visibility=Session.Visibility.PUBLIC).distinct()
    return render(
        request,
        "sessions/index.html",
        {"page": page, "query": query, "tag": tag, "tags": tags},
    )


def _search_page(sessions: QuerySet[Session], query: str, number: str | None) -> Page:
    """A page of search results, best first: each session with its matching turns."""
    page = Paginator(search.ranked_session_ids(sessions, query), 20).get_page(number)
    found = Session.objects.annotate(turn_count=Count("turns")).prefetch_related("tags")
    found = found.in_bulk(page.object_list)
    page.object_list = search.hits([found[pk] for pk in page.object_list], query)
    return page


def _page_number(paginator: Paginator, raw: str | None) -> int:
    """The page asked for; the first for nonsense, the last for past the end."""
    try:
        return paginator.validate_number(raw or 1)
    except PageNotAnInteger:
        return 1
    except EmptyPage:
        return paginator.num_pages


def _turn_page_number(turns: QuerySet, number: int, per_page: int) -> int:
    return turns.filter(number__lt=number).count() // per_page + 1


@require_GET
def detail(request: HttpRequest, slug: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    turns = session.turns.select_related("kernel_version__kernel")
    per_page = settings.TURNS_PER_PAGE

    # "Go to turn N" and permalinks to turns beyond the first page land on the right page.
    if "turn" in request.GET:
        try:
            number = int(request.GET["turn"])
        except ValueError:
            number = 0
        if not turns.filter(number=number).exists():
            raise Http404(f"This session has no turn {request.GET['turn'][:20]}.")
        page_number = _turn_page_number(turns, number, per_page)
        query = f"?page={page_number}" if page_number > 1 else ""
        return redirect(f"{session.get_absolute_url()}{query}#turn-{number}")

    origin = site_origin(request)
    # A reader without cookies gets the same bytes as every other such reader.
    anonymous = not request.user.is_authenticated and not request.COOKIES
    page_key = session.cache_key("page", request.GET.get("page", "")[:12], per_page, origin)
    if anonymous and (html := cache.get(page_key)) is not None:
        return HttpResponse(html)

    paginator = Paginator(turns, per_page)
    page_number = _page_number(paginator, request.GET.get("page"))
    # The body depends only on the session, the page and our origin, never on the reader.
    body_key = session.cache_key("body", page_number, per_page, origin)
    body = cache.get(body_key)
    if body is None:
        body = _render_session_body(session, paginator, page_number, origin)
        cache.set(body_key, body, timeout=settings.PAGE_CACHE_SECONDS)
    context = {
        "session": session,
        "body": body,
        "oembed_href": _oembed_href(origin, session),
        "can_embed": session.is_embeddable,
    }
    response = render(request, "sessions/detail.html", context)
    if anonymous:
        cache.set(page_key, response.content, timeout=settings.PAGE_CACHE_SECONDS)
    return response


def _render_session_body(
    session: Session, paginator: Paginator, page_number: int, origin: str
) -> str:
    page = paginator.page(page_number)
    shown = list(page.object_list)
    first = shown[0].number if shown else 1
    context = {
        "session": session,
        "page": page,
        "turns": shown,
        "page_first": first,
        "page_last": shown[-1].number if shown else 0,
        "paginated": paginator.num_pages > 1,
        "turn_count": paginator.count,
        "kernels": session.kernels.annotate(version_count=Count("versions")),
        "embed_first": first,
        "embed_last": min(paginator.count, first + 4),
        "embed_base": origin + reverse("sessions:embed", args=[session.slug]),
        "can_embed": session.is_embeddable,
        "site_url": origin,
    }
    return render_to_string("sessions/_session_body.html", context)


def _oembed_href(origin: str, session: Session) -> str:
    target = f"{origin}{session.get_absolute_url()}"
    return f"{origin}{reverse('sessions:oembed')}?{urlencode({'url': target, 'format': 'json'})}"


class BadRange(ValueError):
    pass


def _parse_turn_bound(value: str | None, name: str) -> int:
    if value is None or value == "":
        raise BadRange(f"The '{name}' parameter is required: a turn number like {name}=3.")
    if not re.fullmatch(r"\d{1,9}", value):
        raise BadRange(f"'{name}' must be a whole turn number, not {value[:40]!r}.")
    return int(value)


def parse_range(params, last_turn: int) -> tuple[int, int]:
    """from/to as 1-based inclusive turn numbers, checked against the session."""
    first = _parse_turn_bound(params.get("from"), "from")
    last = _parse_turn_bound(params.get("to"), "to")
    if first < 1:
        raise BadRange("Turn numbers start at 1.")
    if first > last:
        raise BadRange(f"'from' ({first}) is after 'to' ({last}): swap them.")
    if last > last_turn:
        raise BadRange(f"This session has {last_turn} turns; 'to' ({last}) is past the end.")
    if last - first + 1 > EMBED_MAX_TURNS:
        raise BadRange(f"An embed shows at most {EMBED_MAX_TURNS} turns; this asks for more.")
    return first, last


def _embed_error(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    return render(request, "embed/error.html", {"message": message}, status=status)


@require_GET
@xframe_options_exempt
@csp_replace(EMBED_CSP)
def embed(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        session = get_embeddable_session(slug)
    except Http404:
        return _embed_error(request, "There is no public session at this address.", 404)
    origin = site_origin(request)
    theme = request.GET.get("theme", "auto")
    params = (request.GET.get("from", "")[:12], request.GET.get("to", "")[:12], theme[:12])
    # Only a valid range is ever cached, so a hit needs no bounds check.
    key = session.cache_key("embed", *params, origin)
    page = cache.get(key)
    if page is None:
        last_turn = session.turns.order_by("-number").values_list("number", flat=True).first()
        try:
            if theme not in EMBED_THEMES:
                raise BadRange(f"theme must be one of {', '.join(EMBED_THEMES)}.")
            first, last = parse_range(request.GET, last_turn or 0)
        except BadRange as error:
            return _embed_error(request, str(error))
        turns = session.turns.filter(number__gte=first, number__lte=last)
        turns = list(turns.select_related("kernel_version__kernel", "kernel_version__turn"))
        complete = _attach_outcomes(turns)
        link = f"{origin}{session.get_absolute_url()}"
        context = {
            "session": session,
            "turns": turns,
            "first": first,
            "last": last,
            "theme": theme,
            "session_link": link,
            "turn_link": f"{link}?turn={first}",
            "site_url": origin,
        }
        page = render_to_string("embed/session.html", context)
        seconds = settings.PAGE_CACHE_SECONDS if complete else settings.EMBED_PENDING_CACHE_SECONDS
        cache.set(key, page, timeout=seconds)
    return HttpResponse(page)


def _attach_outcomes(turns: list[Turn]) -> bool:
    """Give each turn that reviewed a kernel the finished run a reader would see now
    (turn.replayed, or None: nothing is started from an embed). True when each kernel
    that can be replayed has a stored outcome: those do not change, so the page can stay."""
    versions = {turn.kernel_version_id: turn.kernel_version for turn in turns}
    versions.pop(None, None)
    shown = {pk: replay.for_reader(version) for pk, version in versions.items()}
    for turn in turns:
        seen = shown.get(turn.kernel_version_id)
        turn.replayed = seen.run if seen is not None and seen.outcome is not None else None
    # A kernel that cannot be replayed shows no outcome, now or later.
    replayable = [seen for seen in shown.values() if not seen.problem]
    return all(seen.run is not None and seen.run.cacheable for seen in replayable)


def _oembed_target(url: str, request: HttpRequest) -> tuple[Session, int, int]:
    """Which session and turn range an oEmbed url points at; Http404 for anything else."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- parsing the port is what rejects "host:99999" or "host:x"
    except ValueError:  # "http://[::1" and other text that is not a URL
        raise Http404("Not a URL.") from None
    ours = {urlsplit(site_origin(request)).netloc, request.get_host()}
    if parts.scheme not in ("http", "https") or parts.netloc not in ours:
        raise Http404("Not a Kernelbin URL.")
    try:
        match = resolve(parts.path)
    except Resolver404:
        raise Http404("Not a Kernelbin session URL.") from None
    if match.view_name not in ("sessions:detail", "sessions:embed"):
        raise Http404("Not a Kernelbin session URL.")
    session = get_embeddable_session(match.kwargs["slug"])
    last_turn = session.turns.order_by("-number").values_list("number", flat=True).first() or 0
    if not last_turn:
        raise Http404("This session has no turns to embed.")
    params = QueryDict(parts.query)
    fragment = re.fullmatch(r"turn-(\d{1,9})", parts.fragment)
    if "from" in params or "to" in params:
        first, last = parse_range(params, last_turn)
    elif fragment and 1 <= int(fragment[1]) <= last_turn:
        first = last = int(fragment[1])
    else:
        first, last = 1, min(last_turn, 5)
    return session, first, last


def _positive_int(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name)
    if value in (None, ""):
        return None
    if not re.fullmatch(r"\d{1,6}", value) or int(value) < 1:
        raise BadRange(f"{name} must be a positive whole number of pixels.")
    return int(value)


@require_GET
def oembed(request: HttpRequest) -> HttpResponse:
    fmt = request.GET.get("format", "json")
    if fmt != "json":
        return JsonResponse({"error": "Only format=json is supported."}, status=501)
    url = request.GET.get("url", "")
    if not url:
        return JsonResponse({"error": "The url parameter is required."}, status=400)
    try:
        maxwidth = _positive_int(request, "maxwidth")
        maxheight = _positive_int(request, "maxheight")
        session, first, last = _oembed_target(url, request)
    except BadRange as error:
        return JsonResponse({"error": str(error)}, status=400)
    except Http404 as error:
        return JsonResponse({"error": str(error)}, status=404)

    width = min(OEMBED_WIDTH, maxwidth or OEMBED_WIDTH)
    # A first guess; the embed then reports its real height to the page (postMessage).
    height = min(OEMBED_MAX_HEIGHT, 120 + 180 * (last - first + 1), maxheight or OEMBED_MAX_HEIGHT)
    document = {
        "type": "rich",
        "version": "1.0",
        "title": f"{session.title} · turns {first}–{last}" if first != last else session.title,
        "provider_name": "Kernelbin",
        "provider_url": site_origin(request),
        "cache_age": 3600,
        "html": iframe_code(site_origin(request), session, first, last, width, height),
        "width": width,
        "height": height,
    }
    if session.learner:
        document["author_name"] = session.learner
    return JsonResponse(document)


def _export_filename(session: Session, extension: str) -> str:
    return f'inline; filename="{session.slug}.{extension}"'


@require_GET
def export_json(request: HttpRequest, slug: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    body = json.dumps(export_session(session), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = _export_filename(session, "json")
    return response


@require_GET
def export_md(request: HttpRequest, slug: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    response = HttpResponse(export_markdown(session), content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = _export_filename(session, "md")
    return response


# Importing ------------------------------------------------------------------------------

# Room for the form fields and multipart framing around the file itself.
UPLOAD_OVERHEAD = 64 * 1024


@csrf_exempt  # CSRF is checked in _import_form, once the upload handler is in place
@require_http_methods(["GET", "POST"])
def import_session(request: HttpRequest) -> HttpResponse:
    """Staff upload a Claude Code transcript or a kernelbin/1 export; the report follows."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not request.user.is_staff:
        raise PermissionDenied("Only staff may import sessions.")
    limit = size_limit("")
    if request.method == "POST":
        # Refuse an oversize upload before reading a byte of it.
        length = request.META.get("CONTENT_LENGTH") or "0"
        if length.isdigit() and int(length) > limit + UPLOAD_OVERHEAD:
            form = ImportForm()
            error = f"The file is larger than the import limit of {limit:,} bytes."
            context = {"form": form, "error": error, "limit": limit}
            return render(request, "sessions/import.html", context, status=413)
        # Before anything reads the body (the CSRF check would): uploads go to a
        # temporary file in chunks, never whole into memory.
        request.upload_handlers = [CappedUploadHandler(request, limit)]
    return _import_form(request, limit)


@csrf_protect
def _import_form(request: HttpRequest, limit: int) -> HttpResponse:
    context: dict = {"limit": limit}
    if request.method != "POST":
        context["form"] = ImportForm()
        return render(request, "sessions/import.html", context)
    form = ImportForm(request.POST, request.FILES)
    context["form"] = form
    handler = request.upload_handlers[0]
    if isinstance(handler, CappedUploadHandler) and handler.too_big:
        context["error"] = f"The file is larger than the import limit of {limit:,} bytes."
        return render(request, "sessions/import.html", context, status=413)
    if not form.is_valid():
        return render(request, "sessions/import.html", context, status=400)
    upload = form.cleaned_data["file"]
    try:
        with upload.open("rb") as stream:
            options = ImportOptions(
                title=form.cleaned_data["title"] or None,
                slug=form.cleaned_data["slug"] or None,
                visibility=form.cleaned_data["visibility"] or None,
                redact=form.cleaned_data["redact"],
                owner=request.user,
            )
            report = import_file(stream, options=options, size=upload.size, name=upload.name)
    except ImportProblem as problem:
        context["error"] = f"{problem} Nothing was imported."
        return render(request, "sessions/import.html", context, status=400)
    context.update(report=report, form=ImportForm())
    return render(request, "sessions/import.html", context)
