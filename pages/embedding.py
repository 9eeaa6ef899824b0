"""Our pages on other sites: what each of our URLs embeds, the codes a blogger pastes,
oEmbed's document and the discovery link that leads consumers to it.

Every URL form of ours keeps its range: a session page (`?turn=N`, `#turn-N`,
`?from=A&to=B`, `?page=P`), an embed URL, and a replay page or its embed. WordPress
and Ghost find the oEmbed document through the page's discovery link, so each page puts
its own URL, range and all, into that link.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode, urljoin, urlsplit

from csp.decorators import csp_replace
from django.conf import settings
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponseBase, QueryDict
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from config.context_processors import site_origin
from kernels import pictures
from kernels.models import Fork
from pages import embed_heights, navigation
from pages.access import get_embeddable_session
from pages.templatetags.kernelbin import inline_hash
from sessions.models import Session, Turn

EMBED_MAX_TURNS = 50
EMBED_STYLES = ("css/theme.css", "css/turns.css", "css/outcome.css", "css/embed.css")
# Runs inside an embed: reports its height to the page framing it.
EMBED_SCRIPT = "js/embed-frame.js"
# Runs on the blogger's page: turns our links into auto-sized iframes. Its URL has no
# content hash in it, so that snippets pasted into posts keep working after a deploy.
LOADER_SCRIPT = "js/embed.js"
# Embeds may be framed by any site, and run only the CSS and JS we inline into them.
EMBED_CSP = {
    "frame-ancestors": ["*"],
    "script-src": [inline_hash(EMBED_SCRIPT)],
    "style-src": [inline_hash(*EMBED_STYLES)],
}
View = TypeVar("View", bound=Callable[..., HttpResponseBase])


def embed_policy(view: View) -> View:
    """The view's pages under EMBED_CSP."""
    # django-csp types its decorators for views that take the request alone; these take
    # their URL's arguments too, and the decorator passes them on.
    return csp_replace(EMBED_CSP)(view)  # type: ignore[return-value]


# Light unless asked: an embed sits in somebody else's page, most of them light, whatever
# the reader's system prefers. "auto" follows the reader's system.
THEMES = ("light", "dark", "auto")
DEFAULT_THEME = "light"
DEFAULT_TURNS = 5
OEMBED_WIDTH = 640
# The widest frame oEmbed answers with (a consumer's maxwidth is honoured up to it).
OEMBED_MAX_WIDTH = 1280
# The first guess of a range's height where its page is not laid out (the page's
# script, before the panel has asked the server).
OEMBED_MAX_HEIGHT = 900
REPLAY_HEIGHT = 460
HEIGHT_BASE, HEIGHT_PER_TURN = 120, 180


class BadRange(ValueError):
    """A range or theme an embed cannot show; the message says why."""


def _parse_turn_bound(value: str | None, name: str) -> int:
    if value is None or value == "":
        raise BadRange(f"The '{name}' parameter is required: a turn number like {name}=3.")
    if not re.fullmatch(r"\d{1,9}", value):
        raise BadRange(f"'{name}' must be a whole turn number, not {value[:40]!r}.")
    return int(value)


def parse_range(params: QueryDict, last_turn: int) -> tuple[int, int]:
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


def parse_theme(params: QueryDict) -> str:
    theme = params.get("theme") or DEFAULT_THEME
    if theme not in THEMES:
        raise BadRange(f"theme must be one of {', '.join(THEMES)}.")
    return theme


@dataclass(frozen=True)
class Target:
    """What an embed shows: turns first..last of a session, the replay of the kernel
    a turn reviewed (turn set), or a reader's fork of a version (fork set)."""

    session: Session
    first: int
    last: int
    turn: Turn | None = None
    theme: str = DEFAULT_THEME
    fork: Fork | None = None

    @property
    def title(self) -> str:
        if self.fork is not None:
            forked = self.fork.version
            return f"{forked.kernel.name} v{forked.number}, forked · {self.session.title}"
        if self.turn is not None and (version := self.turn.kernel_version) is not None:
            return f"{version.kernel.name} v{version.number} replayed · {self.session.title}"
        if self.first == self.last:
            return f"{self.session.title} · turn {self.first}"
        return f"{self.session.title} · turns {self.first}–{self.last}"

    def embed_url(self, origin: str) -> str:
        slug = self.session.slug
        if self.fork is not None:
            path = reverse("kernels:fork_embed", args=[self.fork.id])
            params: dict[str, str | int] = {}
        elif self.turn is not None:
            path = reverse("kernels:replay_embed", args=[slug, self.turn.number])
            params = {}
        else:
            path = reverse("sessions:embed", args=[slug])
            params = {"from": self.first, "to": self.last}
        if self.theme != DEFAULT_THEME:
            params["theme"] = self.theme
        return f"{origin}{path}" + (f"?{urlencode(params)}" if params else "")

    def height(self) -> int:
        """A first guess; the embed then reports its real height to the page."""
        if self.turn is not None or self.fork is not None:
            return REPLAY_HEIGHT
        return range_height(self.last - self.first + 1)

    def fitted_height(self, origin: str, width: int) -> int:
        """The height of the embed's content in a frame this wide, for a plain iframe,
        which nothing resizes: the embed page is laid out (pages/embed_heights.py)
        and the height kept like the page; a replay or fork whose run is not stored
        yet gets the first guess."""
        if self.fork is not None:
            where: tuple[str | int, ...] = ("fork", self.fork.id)
        elif self.turn is not None:
            where = ("replay", self.turn.number)
        else:
            where = (self.first, self.last)
        key = self.session.cache_key("embed-height", *where, width, origin)
        height: int | None = cache.get(key)
        if height is None and (self.turn is not None or self.fork is not None):
            # The replay app draws these pages; it sits above this module.
            from pages.embed_views import stored_embed_page

            page = stored_embed_page(self, origin)
            if page is None:
                return self.height()
            height = embed_heights.estimate(page, width)
            cache.set(key, height, timeout=settings.PAGE_CACHE_SECONDS)
        if height is None:
            page, complete = render_embed(self.session, self.first, self.last, self.theme, origin)
            height = embed_heights.estimate(page, width)
            seconds = (
                settings.PAGE_CACHE_SECONDS if complete else settings.EMBED_PENDING_CACHE_SECONDS
            )
            cache.set(key, height, timeout=seconds)
        return height


def show_outcomes(turns: list[Turn]) -> bool:
    """Give each turn that reviewed a kernel its stored run (turn.replayed; nothing is
    started from an embed), and the first turn showing each version its outcome's
    picture. True when every kernel that can be replayed has a stored run."""
    versions = [turn.kernel_version for turn in turns if turn.kernel_version is not None]
    runs, complete = navigation.stored_runs(versions)
    pictured = set()
    for turn in turns:
        turn.replayed = run = runs.get(turn.kernel_version_id) if turn.kernel_version_id else None
        if run is not None and turn.kernel_version_id not in pictured:
            pictured.add(turn.kernel_version_id)
            turn.picture = pictures.headline(run.outcome)
    return complete


def render_embed(
    session: Session, first: int, last: int, theme: str, origin: str
) -> tuple[str, bool]:
    """The embed page of turns first..last, and whether every kernel in it has a stored
    run (else it is kept only briefly)."""
    target = range_target(session, first, last, theme)
    shown = session.turns.shown().filter(number__gte=first, number__lte=last)
    turns = list(shown.select_related("kernel_version__kernel__session", "kernel_version__turn"))
    complete = show_outcomes(turns)
    link = f"{origin}{session.get_absolute_url()}"
    context = {
        "session": session,
        "turns": turns,
        "first": first,
        "last": last,
        "theme": theme,
        "title": target.title,
        "oembed_href": oembed_href(origin, target.embed_url(origin)),
        "session_link": link,
        "turn_link": f"{link}?turn={first}#turn-{first}",
        "site_url": origin,
    }
    return render_to_string("embed/session.html", context), complete


def range_height(turns: int) -> int:
    return min(OEMBED_MAX_HEIGHT, HEIGHT_BASE + HEIGHT_PER_TURN * turns)


def range_target(session: Session, first: int, last: int, theme: str = DEFAULT_THEME) -> Target:
    return Target(session, first, last, theme=theme)


def replay_target(turn: Turn, theme: str = DEFAULT_THEME) -> Target:
    return Target(turn.session, turn.number, turn.number, turn=turn, theme=theme)


def fork_target(fork: Fork, theme: str = DEFAULT_THEME) -> Target:
    # A fork shows no turns of its own; first and last are not used.
    return Target(fork.version.kernel.session, 0, 0, fork=fork, theme=theme)


def oembed_href(origin: str, url: str) -> str:
    """The discovery link's href: our oEmbed endpoint asked about this URL."""
    query = urlencode({"url": url, "format": "json"})
    return f"{origin}{reverse('sessions:oembed')}?{query}"


def loader_url(origin: str) -> str:
    return urljoin(f"{origin}/", f"{settings.STATIC_URL}{LOADER_SCRIPT}")


def _script_html(src: str, title: str, loader: str) -> SafeString:
    return format_html(
        '<a class="kernelbin-embed" href="{}">{}</a><script async src="{}"></script>',
        src,
        title,
        loader,
    )


def _iframe_html(src: str, width: int | str, height: int | str, title: str) -> SafeString:
    # The width attribute is what oEmbed consumers read; the style lets the frame shrink
    # to a phone's column instead of overflowing it.
    return format_html(
        '<iframe class="kernelbin-embed" src="{}" width="{}" height="{}" title="{}" '
        'style="width:100%;max-width:{}px" frameborder="0" loading="lazy"></iframe>',
        src,
        width,
        height,
        f"{title} (Kernelbin)",
        width,
    )


def script_code(target: Target, origin: str) -> SafeString:
    """The default code to paste: a link that our script turns into an iframe that fits
    its content; without the script (or with it blocked) the link stays a link."""
    return _script_html(target.embed_url(origin), target.title, loader_url(origin))


def iframe_code(
    target: Target, origin: str, width: int | None = None, height: int | None = None
) -> SafeString:
    """A plain iframe, for sites that allow no scripts; its height is a guess unless our
    script (or WordPress's) is on the page to fit it."""
    src = target.embed_url(origin)
    return _iframe_html(src, width or OEMBED_WIDTH, height or target.height(), target.title)


def code_templates(origin: str) -> dict[str, str]:
    """Both codes with {src}, {title} and {height} to fill in, for the page's embed panel
    to build them for any range a blogger picks."""
    return {
        "script": _script_html("{src}", "{title}", loader_url(origin)),
        "iframe": _iframe_html("{src}", OEMBED_WIDTH, "{height}", "{title}"),
    }


def _last_turn(session: Session) -> int:
    return session.turns.order_by("-number").values_list("number", flat=True).first() or 0


def _session_page_range(session: Session, params: QueryDict, fragment: str) -> tuple[int, int]:
    """The turns a session page URL names: a range, a turn, or the first of its page."""
    last_turn = _last_turn(session)
    if not last_turn:
        raise Http404("This session has no turns to embed.")
    if "from" in params or "to" in params:
        return parse_range(params, last_turn)
    named = params.get("turn", "")
    if anchor := re.fullmatch(r"turn-(\d{1,9})", fragment):
        named = anchor[1]
    if named.isdigit() and session.turns.shown().filter(number=int(named)).exists():
        return int(named), int(named)
    page = params.get("page", "")
    skip = 0
    if page.isdigit() and int(page) > 1:
        count = session.turns.shown().count()
        skip = (int(page) - 1) * navigation.page_size(count, settings.TURNS_PER_PAGE)
    numbers = session.turns.shown().order_by("number").values_list("number", flat=True)
    shown = list(numbers[skip : skip + DEFAULT_TURNS]) or list(numbers[:DEFAULT_TURNS])
    return shown[0], shown[-1]


def _replay_turn(session: Session, number: int) -> Turn:
    turn = session.turns.select_related("kernel_version__kernel").filter(number=number).first()
    if turn is None or turn.kernel_version is None:
        raise Http404("This turn has no kernel to replay.")
    return turn


def target_of(url: str, request: HttpRequest) -> Target:
    """What one of our URLs embeds; Http404 for a URL that is not ours or not
    embeddable, BadRange for a range that cannot be shown."""
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
    if match.view_name in ("kernels:fork", "kernels:fork_embed"):
        found = Fork.objects.embeddable().filter(pk=match.kwargs["fork_id"])
        fork = found.select_related("version__kernel__session").first()
        if fork is None:
            raise Http404("There is no public fork at this URL.")
        return fork_target(fork, parse_theme(QueryDict(parts.query)))
    views = ("sessions:detail", "sessions:embed", "kernels:replay", "kernels:replay_embed")
    if match.view_name not in views:
        raise Http404("Not a Kernelbin session URL.")
    session = get_embeddable_session(match.kwargs["slug"])
    params = QueryDict(parts.query)
    theme = parse_theme(params)
    if match.view_name in ("kernels:replay", "kernels:replay_embed"):
        return replay_target(_replay_turn(session, match.kwargs["number"]), theme)
    if match.view_name == "sessions:embed":
        return range_target(session, *parse_range(params, _last_turn(session)), theme)
    return range_target(session, *_session_page_range(session, params, parts.fragment), theme)


def oembed_document(
    target: Target, origin: str, maxwidth: int | None, maxheight: int | None
) -> dict[str, Any]:
    """oEmbed's "rich" answer. Its html is an iframe first (WordPress keeps only that,
    and resizes it by its own protocol), then our script, which fits the iframe to its
    content on sites that keep scripts (Ghost)."""
    width = min(OEMBED_MAX_WIDTH, maxwidth or OEMBED_WIDTH)
    height = target.fitted_height(origin, width)
    if maxheight:
        height = min(height, maxheight)
    script = format_html('<script async src="{}"></script>', loader_url(origin))
    document = {
        "type": "rich",
        "version": "1.0",
        "title": target.title,
        "provider_name": "Kernelbin",
        "provider_url": origin,
        "cache_age": 3600,
        "html": iframe_code(target, origin, width, height) + script,
        "width": width,
        "height": height,
    }
    if target.session.learner:
        document["author_name"] = target.session.learner
    return document
