from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_GET, require_http_methods

from config.context_processors import site_origin
from pages import embedding, folding, navigation
from pages.access import get_embeddable_session, get_session_for_user
from pages.forms import CappedUploadHandler, ImportForm, ProjectFilesForm
from pages.stamps import EMBEDDABLE, OPENABLE, stamp
from sessions import images, search, uploads
from sessions.export import export_markdown, export_session
from sessions.importers.files import size_limit
from sessions.models import Session, Tag, Turn, Upload
from sessions.programs import KernelVersion

# The parameters a session page reads. Its own URL keeps them: in its discovery link (so
# that an oEmbed consumer embeds the turns the URL names) and in its cache key.
PAGE_PARAMS = ("page", "turn", "from", "to", "show")
TURN_NUMBER = re.compile(r"[0-9]{1,9}")


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon's file under its stored name, found when asked (with hashed static names
    that needs the manifest, which only exists once collectstatic has run), never a
    permanent redirect: the name changes with the icon."""
    return redirect(static("favicon.ico"))


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    sessions = Session.objects.listed()
    query = search.clean_query(request.GET.get("q", ""))
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
        newest = sessions.with_turn_count().curated_first()
        page = Paginator(newest.prefetch_related("tags"), 20).get_page(request.GET.get("page"))
    tags = Tag.objects.filter(sessions__visibility=Session.Visibility.PUBLIC).distinct()
    return render(
        request,
        "sessions/index.html",
        {"page": page, "query": query, "tag": tag, "tags": tags},
    )


def _search_page(sessions: QuerySet[Session], query: str, number: str | None) -> Page[Any]:
    """A page of search results, best first: each session with its matching turns (the
    page of ranked ids, each id replaced by its SessionHit)."""
    page: Page[Any] = Paginator(search.ranked_session_ids(sessions, query), 20).get_page(number)
    found = Session.objects.with_turn_count().prefetch_related("tags").in_bulk(page.object_list)
    page.object_list = search.hits([found[pk] for pk in page.object_list], query)
    return page


@require_GET
def session_search(request: HttpRequest, slug: str) -> HttpResponse:
    """The turns of one session that hold any of the reader's words, best first; when
    only one does, the reader goes straight to it."""
    session = get_session_for_user(request, slug)
    query = search.clean_query(request.GET.get("q", ""))
    matches, total = search.in_session(session, query) if query else ([], 0)
    if total == 1:
        return redirect(matches[0].url)
    context = {"session": session, "query": query, "matches": matches, "total": total}
    return render(request, "sessions/search.html", context)


class TurnPaginator(Paginator[Turn]):
    """A session's main-line turns, a page at a time: a queryset, filtered further."""

    object_list: QuerySet[Turn]

    def page_of(self, number: int) -> QuerySet[Turn]:
        """The turns of page `number` (validated), as Paginator.page slices them, as a
        queryset (Page.object_list is one, but is not typed so)."""
        bottom = (number - 1) * self.per_page
        return self.object_list[bottom : bottom + self.per_page]


def _page_number(paginator: Paginator[Turn], raw: str | None) -> int:
    """The page asked for; the first for nonsense, the last for past the end."""
    try:
        return paginator.validate_number(raw or 1)
    except PageNotAnInteger:
        return 1
    except EmptyPage:
        return paginator.num_pages


def _asked_page(request: HttpRequest, paginator: TurnPaginator, session: Session) -> int:
    """The page holding ?turn=N (a permalink, "go to turn N"), else ?page. A hidden turn
    keeps its number: its permalink opens the page where it would be; a sub-agent's turn,
    the page of the main-line turn it is folded under."""
    if "turn" not in request.GET:
        return _page_number(paginator, request.GET.get("page"))
    raw = request.GET["turn"]
    # ASCII digits, and few enough for int() and the database (str.isdigit took "²", and
    # int() refuses more than 4,300 digits: both were a 500).
    if not TURN_NUMBER.fullmatch(raw) or not session.turns.filter(number=int(raw)).exists():
        raise Http404(f"This session has no turn {raw[:20]}.")
    before = paginator.object_list.filter(number__lte=int(raw)).count()
    return max(before - 1, 0) // paginator.per_page + 1


@require_GET
def detail(request: HttpRequest, slug: str) -> HttpResponse:
    origin = site_origin(request)
    query = urlencode(
        [(name, request.GET[name][:12]) for name in PAGE_PARAMS if name in request.GET]
    )
    # A reader without cookies gets the same bytes as every other such reader.
    anonymous = not request.user.is_authenticated and not request.COOKIES
    page_key = None
    if anonymous and (found := stamp(OPENABLE, slug)) is not None:
        page_key = f"{found}:page:{query}:{origin}"
        if (html := cache.get(page_key)) is not None:
            return HttpResponse(html)

    session = get_session_for_user(request, slug)
    view = folding.view_of(request.GET.get("show"))
    turns = folding.filtered(session.turns.shown(), view)
    # Pages count main-line turns; a sub-agent's turns come with the call they fold under.
    top = folding.main_line(turns)
    # Counted once, both: the page size needs the main line's before the paginator.
    count, total = folding.counts(turns)
    paginator = TurnPaginator(top, navigation.page_size(count, settings.TURNS_PER_PAGE))
    paginator.count = count
    page_number = _asked_page(request, paginator, session)
    # The body depends only on the session, the view, the page and our origin, never on
    # the reader.
    body_key = session.cache_key("body", view, page_number, paginator.per_page, origin)
    body, seconds = cache.get(body_key), settings.PAGE_CACHE_SECONDS
    if body is None:
        if view:
            total = session.turns.shown().count()
        body, complete = _render_session_body(
            session, turns, paginator, page_number, origin, view, total
        )
        # Badges show stored runs: while one is missing, look again soon.
        seconds = seconds if complete else settings.EMBED_PENDING_CACHE_SECONDS
        cache.set(body_key, body, timeout=seconds)
    link = f"{origin}{session.get_absolute_url()}"
    canonical = f"{link}?page={page_number}" if page_number > 1 and not view else link
    # A link to a turn shows that turn: its own URL, and its kernel's card.
    if "turn" in request.GET:
        number = int(request.GET["turn"])  # _asked_page found the turn
        og_url, og_title = f"{link}?turn={number}", f"{session.title} · turn {number}"
        card = reverse("kernels:turn_card", args=[session.slug, number])
    else:
        og_url, og_title = canonical, session.title
        card = reverse("kernels:session_card", args=[session.slug])
    context = {
        "session": session,
        "body": body,
        "og_url": og_url,
        "og_title": og_title,
        "og_image": origin + card,
        "oembed_href": embedding.oembed_href(origin, f"{link}?{query}" if query else link),
        "canonical": canonical,
        "can_embed": session.is_embeddable,
    }
    response = render(request, "sessions/detail.html", context)
    if page_key is not None:
        cache.set(page_key, response.content, timeout=seconds)
    return response


def _render_session_body(
    session: Session,
    turns: QuerySet[Turn],
    paginator: TurnPaginator,
    page_number: int,
    origin: str,
    view: str,
    total: int,
) -> tuple[str, bool]:
    """The session page's body, and whether every kernel on it has a stored run."""
    page = paginator.page(page_number)
    heads = list(paginator.page_of(page_number).values_list("number", flat=True))
    # The page: its main-line turns and the sub-agents' turns folded under them, up to
    # the next page's first turn.
    on_this_page = turns.filter(number__gte=heads[0]) if heads else turns.none()
    if page.has_next():
        following = paginator.object_list.filter(number__gt=heads[-1])
        next_first = following.values_list("number", flat=True).first()
        if next_first is not None:
            on_this_page = on_this_page.filter(number__lt=next_first)
    shown = list(on_this_page.select_related("kernel_version__kernel"))
    versions = KernelVersion.objects.filter(kernel__session=session)
    runs, complete = navigation.stored_runs(versions.select_related("kernel__session", "turn"))
    first = shown[0].number if shown else 1
    last = shown[-1].number if shown else 0
    outline = navigation.outline(session, first, last)
    sections = outline.sections
    opening = {section.number: section for section in sections}
    for turn in shown:
        turn.replayed = runs.get(turn.kernel_version_id) if turn.kernel_version_id else None
        turn.section = opening.get(turn.number)
    link = session.get_absolute_url()
    on_page = {turn.number for turn in shown}
    for section in sections:
        number = section.number
        section.href = (
            f"#turn-{number}" if number in on_page else f"{link}?turn={number}#turn-{number}"
        )
    snippet = embedding.range_target(session, first, min(last, first + embedding.DEFAULT_TURNS - 1))
    context = {
        "session": session,
        "page": page,
        "turns": folding.fold(shown),
        "page_first": first,
        "page_last": last,
        "paginated": paginator.num_pages > 1,
        "turn_count": total,
        "view": view,
        "views": folding.VIEWS,
        "kernels": session.kernels.annotate(version_count=Count("versions")),
        "outline": sections,
        "outline_partial": outline.partial,
        "jumps": navigation.jumps(session, runs),
        "snippet": snippet,
        "snippet_script": embedding.script_code(snippet, origin),
        "snippet_iframe": embedding.iframe_code(snippet, origin),
        "oembed_url": reverse("sessions:oembed"),
        "default_width": embedding.OEMBED_WIDTH,
        "max_width": embedding.OEMBED_MAX_WIDTH,
        "embed_base": origin + reverse("sessions:embed", args=[session.slug]),
        "code_templates": embedding.code_templates(origin),
        "heights": (embedding.HEIGHT_BASE, embedding.HEIGHT_PER_TURN, embedding.OEMBED_MAX_HEIGHT),
        "can_embed": session.is_embeddable,
        "site_url": origin,
    }
    return render_to_string("sessions/_session_body.html", context), complete


def _embed_error(request: HttpRequest, message: str, status: int = 400) -> HttpResponse:
    return render(request, "embed/error.html", {"message": message}, status=status)


@require_GET
@xframe_options_exempt
@embedding.embed_policy
def embed(request: HttpRequest, slug: str) -> HttpResponse:
    found = stamp(EMBEDDABLE, slug)
    if found is None:
        return _embed_error(request, "There is no public session at this address.", 404)
    origin = site_origin(request)
    params = [request.GET.get(name, "")[:12] for name in ("from", "to", "theme")]
    # Only a valid range is ever cached, so a hit needs no bounds check.
    key = ":".join([found, "embed", *params, origin])
    page = cache.get(key)
    if page is None:
        session = get_embeddable_session(slug)
        last_turn = session.turns.order_by("-number").values_list("number", flat=True).first()
        try:
            theme = embedding.parse_theme(request.GET)
            first, last = embedding.parse_range(request.GET, last_turn or 0)
        except embedding.BadRange as error:
            return _embed_error(request, str(error))
        page, complete = embedding.render_embed(session, first, last, theme, origin)
        seconds = settings.PAGE_CACHE_SECONDS if complete else settings.EMBED_PENDING_CACHE_SECONDS
        cache.set(key, page, timeout=seconds)
    return HttpResponse(page)


def _positive_int(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name)
    if not value:
        return None
    if not re.fullmatch(r"\d{1,6}", value) or int(value) < 1:
        raise embedding.BadRange(f"{name} must be a positive whole number of pixels.")
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
        target = embedding.target_of(url, request)
    except embedding.BadRange as error:
        return JsonResponse({"error": str(error)}, status=400)
    except Http404 as error:
        return JsonResponse({"error": str(error)}, status=404)
    origin = site_origin(request)
    return JsonResponse(embedding.oembed_document(target, origin, maxwidth, maxheight))


def _export_filename(session: Session, extension: str) -> str:
    return f'inline; filename="{session.slug}.{extension}"'


def _cached_export(session: Session, kind: str, render: Callable[[], str]) -> str:
    """An export's text, cached as pages are: under the session's `updated` stamp, which
    every change to the session moves (Session.touch), and the same for every reader
    allowed to read it."""
    key = session.cache_key("export", kind)
    text: str | None = cache.get(key)
    if text is None:
        text = render()
        cache.set(key, text, timeout=settings.PAGE_CACHE_SECONDS)
    return text


@require_GET
def export_json(request: HttpRequest, slug: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    body = _cached_export(
        session, "json", lambda: json.dumps(export_session(session), indent=2, ensure_ascii=False)
    )
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    response["Content-Disposition"] = _export_filename(session, "json")
    return response


@require_GET
def export_md(request: HttpRequest, slug: str) -> HttpResponse:
    session = get_session_for_user(request, slug)
    body = _cached_export(session, "md", lambda: export_markdown(session))
    response = HttpResponse(body, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = _export_filename(session, "md")
    return response


@require_GET
def image(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """A picture of a session, as the image it is and nothing else: never a page, never
    in a frame, to whoever may read the session."""
    sha, _, extension = name.partition(".")
    session = get_session_for_user(request, slug)
    found = session.images.filter(sha256=sha).first() if len(sha) == 64 else None
    if found is None or images.EXTENSIONS.get(found.content_type) != extension:
        raise Http404("This session has no such image.")
    response = HttpResponse(bytes(found.data), content_type=found.content_type)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Content-Disposition"] = f'inline; filename="{name}"'
    # Named by its content, so it never changes; kept by the reader's browser only, so a
    # session made private again is no longer served from a shared cache.
    response["Cache-Control"] = "private, max-age=86400"
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
    context: dict[str, Any] = {"limit": limit}
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
    chosen = {name: form.cleaned_data[name] for name in IMPORT_CHOICES}
    upload = uploads.queue(
        Upload.Kind.IMPORT,
        request.user,
        chosen,
        form.cleaned_data["files"],
        main=form.cleaned_data["file"],
    )
    return _see_other(upload.get_absolute_url())


# What the import form chooses; the files come with them.
IMPORT_CHOICES = ("title", "slug", "visibility", "redact", "folder")


def _see_other(url: str) -> HttpResponse:
    # 303: the browser GETs the upload's page, and a reload does not upload it again.
    response = redirect(url)
    response.status_code = 303
    return response


@csrf_exempt  # CSRF is checked in _files_form, once the upload handler is in place
@require_http_methods(["GET", "POST"])
def session_files(request: HttpRequest, slug: str) -> HttpResponse:
    """Staff add a project's files to a session in one step: what its programs fetch."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not request.user.is_staff:
        raise PermissionDenied("Only staff may add files to sessions.")
    if request.method == "POST":
        request.upload_handlers = [CappedUploadHandler(request, size_limit(""))]
    return _files_form(request, get_object_or_404(Session, slug=slug))


@csrf_protect
def _files_form(request: HttpRequest, session: Session) -> HttpResponse:
    context: dict[str, Any] = {"session": session, "form": ProjectFilesForm()}
    context["files"] = session.files.order_by("name").values_list("name", "size")
    if request.method != "POST":
        return render(request, "sessions/files.html", context)
    form = ProjectFilesForm(request.POST, request.FILES)
    handler = request.upload_handlers[0]
    if isinstance(handler, CappedUploadHandler) and handler.too_big:
        context["error"] = "The files are larger than the upload limit."
        return render(request, "sessions/files.html", context, status=413)
    if not form.is_valid() or not form.cleaned_data["files"]:
        context["form"] = form
        context["error"] = "Choose an archive or some files."
        return render(request, "sessions/files.html", context, status=400)
    chosen = {"folder": form.cleaned_data["folder"]}
    upload = uploads.queue(
        Upload.Kind.FILES, request.user, chosen, form.cleaned_data["files"], session=session
    )
    return _see_other(upload.get_absolute_url())


@require_GET
def upload_page(request: HttpRequest, upload_id: str) -> HttpResponse:
    """How far a staff upload got: its progress, then its report or why it failed."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not request.user.is_staff:
        raise PermissionDenied("Only staff may see uploads.")
    upload = uploads.unless_lost(
        get_object_or_404(Upload.objects.select_related("session"), pk=upload_id)
    )
    return render(request, "sessions/upload.html", {"upload": upload})
