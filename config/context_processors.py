from __future__ import annotations

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest


def site_origin(request: HttpRequest) -> str:
    """scheme://host[:port] for absolute links that leave the site (embeds, oEmbed)."""
    return settings.SITE_URL or f"{request.scheme}://{request.get_host()}"


def site(request: HttpRequest) -> dict[str, str]:
    try:
        return {"site_url": site_origin(request)}
    except DisallowedHost:  # the 400 page for that very host renders through here
        return {"site_url": ""}
