"""The session a request may open: one lookup for every view, in every app."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from sessions.models import Session


def get_session_for_user(request: HttpRequest, slug: str) -> Session:
    """The session at this slug if this user may open it; 404 otherwise, private or not."""
    return get_object_or_404(Session.objects.viewable_by(request.user), slug=slug)


def get_embeddable_session(slug: str) -> Session:
    """The session at this slug if it may be embedded, whoever asks; 404 otherwise."""
    return get_object_or_404(Session.objects.embeddable(), slug=slug)
