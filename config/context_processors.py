from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def site_origin(request: HttpRequest) -> str:
    """scheme://host[:port] for absolute links that leave the site (embeds, oEmbed)."""
    return settings.SITE_URL or f"{request.scheme}://{request.get_host()}"


def site(request: HttpRequest) -> dict[str, str]:
    return {"site_url": site_origin(request)}
